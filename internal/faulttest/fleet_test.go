package faulttest_test

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
)

const (
	inTopic  = "events"
	accTopic = "events_accepted"
	ovfTopic = "events_overflow"
	dlqTopic = "events_dead_letter"
	group    = "fleet"
	parts    = 6
	// commitInterval and maxPoll are the gates' GATE_COMMIT_INTERVAL and
	// GATE_MAX_POLL_RECORDS: they bound what a SIGKILL may replay.
	commitInterval = 200 * time.Millisecond
	maxPoll        = 500
)

var outTopics = []string{accTopic, ovfTopic, dlqTopic}

// fleet is several gate processes in one group, an in-process broker and a redis-server.
type fleet struct {
	t     *testing.T
	c     *kfake.Cluster
	redis *redistest.Server
	vars  map[string]string
	gates map[string]*faulttest.Gate
}

func newFleet(t *testing.T, opts ...kfake.Opt) *fleet {
	t.Helper()
	needGate(t)
	c := faulttest.NewCluster(t, append([]kfake.Opt{
		kfake.SeedTopics(parts, inTopic),
		kfake.SeedTopics(3, outTopics...),
	}, opts...)...)
	rs := redistest.Start(t)
	return &fleet{
		t: t, c: c, redis: rs, gates: map[string]*faulttest.Gate{},
		vars: map[string]string{
			"GATE_KAFKA_BROKERS":    strings.Join(c.ListenAddrs(), ","),
			"GATE_REDIS_URLS":       rs.URL(),
			"GATE_HTTP_ADDR":        "127.0.0.1:0",
			"GATE_GROUP_ID":         group,
			"GATE_COMMIT_INTERVAL":  commitInterval.String(),
			"GATE_MAX_POLL_RECORDS": strconv.Itoa(maxPoll),
			"GATE_TICK_INTERVAL":    "100ms",
			"GATE_SYNC_INTERVAL":    "1s",
			"GATE_WINDOW":           "10s",
			// The hot team (a third of the traffic) goes over it, the others stay under.
			"GATE_THRESHOLD":        "500",
			"GATE_REVOKE_TIMEOUT":   "5s",
			"GATE_SHUTDOWN_TIMEOUT": "10s",
			"GATE_PRODUCE_RETRIES":  "3",
		},
	}
}

// start starts a gate process named name.
func (f *fleet) start(name string) *faulttest.Gate {
	f.t.Helper()
	g := faulttest.StartGate(f.t, gateBin, name, f.vars)
	f.gates[name] = g
	return g
}

// waitMembers waits until the group is stable with n members.
func (f *fleet) waitMembers(n int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := f.c.WaitGroupStable(ctx, group, n); err != nil {
		gi := f.c.GroupInfo(group)
		f.t.Fatalf("group not stable with %d members within 60s: %+v", n, gi)
	}
}

// outputs counts the records on the output topics.
func (f *fleet) outputs() int64 {
	var n int64
	for _, topic := range outTopics {
		for _, p := range f.c.PartitionInfos(topic) {
			n += p.HighWatermark
		}
	}
	return n
}

// waitOutputsGrow waits until by more records reached the outputs than now.
func (f *fleet) waitOutputsGrow(by int64, what string) {
	f.t.Helper()
	from := f.outputs()
	faulttest.WaitFor(f.t, 60*time.Second, fmt.Sprintf("%d more output records (%s)", by, what), func() bool {
		return f.outputs() >= from+by
	})
}

// commits returns the group's committed offset per input partition (-1 for none).
func (f *fleet) commits() map[int32]int64 {
	out := map[int32]int64{}
	gi := f.c.GroupInfo(group)
	for p := range int32(parts) {
		out[p] = -1
		if gi != nil {
			if gc, ok := gi.Commits[inTopic][p]; ok {
				out[p] = gc.Offset
			}
		}
	}
	return out
}

// ends returns the input's high watermark per partition.
func (f *fleet) ends() map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range f.c.PartitionInfos(inTopic) {
		out[p.Partition] = p.HighWatermark
	}
	return out
}

// waitDrained waits until the group's commits reach the end of every input partition:
// every input record is then acknowledged on an output topic.
func (f *fleet) waitDrained() {
	f.t.Helper()
	faulttest.WaitFor(f.t, 90*time.Second, "commits at the input's end", func() bool {
		c, e := f.commits(), f.ends()
		for p, end := range e {
			if end > 0 && c[p] != end {
				return false
			}
		}
		return true
	})
}

// check reads everything and matches inputs to outputs.
func (f *fleet) check() faulttest.Report {
	f.t.Helper()
	r := faulttest.Conservation(f.t, f.c, nil, inTopic, outTopics...)
	f.t.Logf("conservation: %s", r)
	recordFigures(f.t.Name(), r)
	if len(r.Lost) > 0 || len(r.Strays) > 0 {
		f.t.Errorf("records lost or stray: %s", r)
	}
	for _, topic := range outTopics {
		if r.ByTopic[topic] == 0 {
			f.t.Errorf("nothing on %s: the run should exercise every route", topic)
		}
	}
	return r
}

// counterSum is the sum of the values of every counter key of the gates in Redis.
func (f *fleet) counterSum() int64 {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := f.redis.Client(f.t)
	keys, err := cl.Keys(ctx, "gate:*").Result()
	if err != nil || len(keys) == 0 {
		return 0
	}
	vals, err := cl.MGet(ctx, keys...).Result()
	if err != nil {
		return 0
	}
	var n int64
	for _, v := range vals {
		if s, ok := v.(string); ok {
			i, _ := strconv.ParseInt(s, 10, 64)
			n += i
		}
	}
	return n
}

// metric returns the sum of a metric's samples on a gate's /metrics.
func metric(t *testing.T, g *faulttest.Gate, name string) float64 {
	t.Helper()
	code, body := g.Get(t, "/metrics")
	if code != 200 {
		t.Fatalf("gate %s /metrics: %d", g.Name, code)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// load produces input records until stopped: a third to one hot team, the rest over 20
// teams, one in 50 not JSON (dead letter). Each carries its id in faulttest.IDHeader.
// The input topic itself, read at the end, is the truth about what was produced: a
// produce that fails here may or may not have been written.
type load struct {
	stop     chan struct{}
	done     chan struct{}
	produced atomic.Int64
	errs     atomic.Int64
}

// loadRate is records per second; every 10ms a batch of loadRate/100.
func loadRate() int {
	if soak() {
		return 3000
	}
	return 1000
}

func (f *fleet) produce(opts ...kgo.Opt) *load {
	f.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(f.c.ListenAddrs()...),
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.RecordRetries(5),
	}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	batch := loadRate() / 100
	go func() {
		defer close(l.done)
		defer cl.Close()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		id := 0
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			recs := make([]*kgo.Record, batch)
			for i := range recs {
				recs[i] = inputRecord(id)
				id++
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res := cl.ProduceSync(ctx, recs...)
			cancel()
			for _, r := range res {
				if r.Err != nil {
					l.errs.Add(1)
				} else {
					l.produced.Add(1)
				}
			}
		}
	}()
	f.t.Cleanup(l.Stop)
	return l
}

// Stop stops producing and waits for the last batch.
func (l *load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

func inputRecord(id int) *kgo.Record {
	var v []byte
	switch {
	case id%50 == 49:
		v = []byte("not json " + strconv.Itoa(id))
	case id%3 == 0:
		v = fmt.Appendf(nil, `{"team_id":"hot","seq":%d}`, id)
	default:
		v = fmt.Appendf(nil, `{"team_id":"team-%d","seq":%d}`, id%20, id)
	}
	return &kgo.Record{
		Topic:   inTopic,
		Key:     []byte("k" + strconv.Itoa(id%64)),
		Value:   v,
		Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte(strconv.Itoa(id))}},
	}
}

// figures collects each scenario's report; TestMain prints them under -v.
var figures struct {
	sync.Mutex
	rows []string
}

func recordFigures(name string, r faulttest.Report) {
	figures.Lock()
	defer figures.Unlock()
	figures.rows = append(figures.rows, fmt.Sprintf("%s: inputs=%d lost=%d duplicated=%d extra=%d", name, r.Inputs, len(r.Lost), len(r.Duplicated), r.Extra))
}
