package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// scenario is one test's broker, Redis, topics and gate settings.
type scenario struct {
	t    *testing.T
	k    *kafka
	n    names
	bin  string
	rurl string
}

// newScenario gives t a broker as o asks, a Redis, the gate binary and its own input
// (inParts partitions) and output topics (outParts each); with inParts 0 the test
// creates its topics itself.
func newScenario(t *testing.T, o kafkaOpts, inParts, outParts int32) *scenario {
	t.Helper()
	return scenarioOn(t, startKafka(t, o), inParts, outParts)
}

// scenarioOn is newScenario on a broker the caller has (shared by its subtests).
func scenarioOn(t *testing.T, k *kafka, inParts, outParts int32) *scenario {
	t.Helper()
	s := &scenario{t: t, k: k, n: namesFor(t), bin: gateBinary(t)}
	s.rurl = startRedis(t)
	if inParts == 0 {
		return s
	}
	s.k.CreateTopic(t, s.n.In, inParts)
	for _, o := range s.n.Outs() {
		s.k.CreateTopic(t, o, outParts)
	}
	return s
}

// vars are a gate's settings for the scenario's topics, group and Redis prefix.
func (s *scenario) vars() map[string]string {
	return map[string]string{
		"GATE_KAFKA_BROKERS":     s.k.Brokers,
		"GATE_REDIS_URLS":        s.rurl,
		"GATE_REDIS_PREFIX":      s.n.Prefix,
		"GATE_HTTP_ADDR":         "127.0.0.1:0",
		"GATE_INPUT_TOPIC":       s.n.In,
		"GATE_ACCEPTED_TOPIC":    s.n.Acc,
		"GATE_OVERFLOW_TOPIC":    s.n.Ovf,
		"GATE_DEAD_LETTER_TOPIC": s.n.Dlq,
		"GATE_GROUP_ID":          s.n.Group,
		"GATE_COMMIT_INTERVAL":   "200ms",
		"GATE_TICK_INTERVAL":     "100ms",
		"GATE_SYNC_INTERVAL":     "1s",
		"GATE_WINDOW":            "10s",
		"GATE_THRESHOLD":         "500",
		"GATE_REVOKE_TIMEOUT":    "10s",
		"GATE_SHUTDOWN_TIMEOUT":  "10s",
	}
}

// startGate starts gate name in s's group with delivery (at-least-once or
// exactly-once: a transactional id of its own, kept across a restart under the same
// name, and a transaction timeout above the rebalance timeout unless kv sets one), and
// the pairs kv added.
func (s *scenario) startGate(name, delivery string, kv ...string) *faulttest.Gate {
	s.t.Helper()
	v := gateVarsFor(s, kv...)
	v["GATE_DELIVERY"] = delivery
	if delivery == "exactly-once" {
		v["GATE_TRANSACTIONAL_ID"] = s.n.Group + "-" + name
		if _, ok := v["GATE_TRANSACTION_TIMEOUT"]; !ok {
			v["GATE_TRANSACTION_TIMEOUT"] = (faulttest.RebalanceTimeout + 10*time.Second).String()
		}
	}
	return faulttest.StartGate(s.t, s.bin, name, v)
}

// checkConserved reads the input and the outputs (read_committed with exactly-once)
// and fails t unless every acknowledged input is on an output: at least once, or with
// exactly-once, exactly once. It returns the report for the test's figures.
func (s *scenario) checkConserved(delivery string, acked int64, what string) faulttest.Report {
	s.t.Helper()
	eos := delivery == "exactly-once"
	var opts []kgo.Opt
	if eos {
		opts = []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	}
	rep := s.check(opts)
	switch {
	case rep.Inputs < int(acked):
		s.t.Errorf("%s: the input topic holds %d records, fewer than the %d acknowledged", what, rep.Inputs, acked)
	case len(rep.Lost) > 0 || len(rep.Strays) > 0:
		s.t.Errorf("%s: %s; want every input on an output", what, rep)
	case eos && !rep.OK():
		s.t.Errorf("%s, exactly-once, read_committed: %s; want every input exactly once", what, rep)
	}
	return rep
}

// record is input record id: a third to a hot team, the rest over 20 teams, one in 50
// not JSON (dead letter); its id in faulttest.IDHeader.
func (s *scenario) record(id int) *kgo.Record {
	v := fmt.Appendf(nil, `{"team_id":"team-%d","seq":%d}`, id%20, id)
	switch {
	case id%50 == 49:
		v = []byte("not json " + strconv.Itoa(id))
	case id%3 == 0:
		v = fmt.Appendf(nil, `{"team_id":"hot","seq":%d}`, id)
	}
	return &kgo.Record{
		Topic:   s.n.In,
		Key:     []byte("k" + strconv.Itoa(id%64)),
		Value:   v,
		Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte(strconv.Itoa(id))}},
	}
}

// produceLoad produces records at up to 1000/s until the returned stop is called; stop
// waits for the records still in flight and returns how many were acknowledged. Records
// produced but not acknowledged (a broker down refused them) are not counted; the checks
// read the input topic for what is there. Up to loadInFlight batches are in flight at
// once: waiting on each batch's acknowledgement, as it once did, bound the rate to the
// round trip's (some 170 records a second on three loaded JVM brokers), and the tests'
// waits for so many more records took most of their time.
func (s *scenario) produceLoad(opts ...kgo.Opt) (stop func() int64) {
	t := s.t
	t.Helper()
	// A record not acknowledged within 10 s fails, as a batch's ProduceSync under a 10 s
	// deadline once did.
	cl := s.k.Client(t, append([]kgo.Opt{kgo.RecordRetries(5), kgo.RecordDeliveryTimeout(10 * time.Second)}, opts...)...)
	quit, done := make(chan struct{}), make(chan struct{})
	var acked atomic.Int64
	go func() {
		defer close(done)
		const loadInFlight = 8
		slots := make(chan struct{}, loadInFlight)
		var inFlight sync.WaitGroup
		defer inFlight.Wait()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for id := 0; ; {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			select {
			case <-quit:
				return
			case slots <- struct{}{}:
			}
			inFlight.Add(1)
			s.produceBatch(cl, id, 10, &acked, func() { <-slots; inFlight.Done() })
			id += 10
		}
	}()
	var once atomic.Bool
	stop = func() int64 {
		if once.CompareAndSwap(false, true) {
			close(quit)
		}
		<-done
		return acked.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// produceBatch produces input records from to from+n-1 with cl, counting each one
// acknowledged in acked, and calls done once every one is acknowledged or failed.
func (s *scenario) produceBatch(cl *kgo.Client, from, n int, acked *atomic.Int64, done func()) {
	var left atomic.Int32
	left.Store(int32(n))
	for id := from; id < from+n; id++ {
		cl.Produce(context.Background(), s.record(id), func(_ *kgo.Record, err error) {
			if err == nil {
				acked.Add(1)
			}
			if left.Add(-1) == 0 {
				done()
			}
		})
	}
}

// outputs counts the records on the output topics (markers included).
func (s *scenario) outputs() int64 {
	var n int64
	for _, ps := range s.k.Ends(s.t, s.n.Outs()...) {
		n += sum(ps)
	}
	return n
}

// waitOutputsGrow waits until the output topics hold by more records. Four minutes: three
// gates and a JVM broker on a loaded 2-core VM routed 45,000 in more than two (CI,
// 2026-11-30).
func (s *scenario) waitOutputsGrow(by int64, what string) {
	s.t.Helper()
	from := s.outputs()
	faulttest.WaitFor(s.t, 4*time.Minute, fmt.Sprintf("%d more output records (%s)", by, what), func() bool {
		return s.outputs() >= from+by
	})
}

// waitMembers waits until the group is stable with n members. A KIP-848 group is
// described by ConsumerGroupDescribe, a classic one by DescribeGroups (which answers
// for a KIP-848 group with no members), so both are asked.
func (s *scenario) waitMembers(n int) {
	s.t.Helper()
	faulttest.WaitFor(s.t, 2*time.Minute, fmt.Sprintf("group %s stable with %d members", s.n.Group, n), func() bool {
		if gs, err := s.k.Admin.DescribeGroups(s.t.Context(), s.n.Group); err == nil {
			if g := gs[s.n.Group]; g.Err == nil && g.State == "Stable" && len(g.Members) == n {
				return true
			}
		}
		if gs, err := s.k.Admin.DescribeConsumerGroups(s.t.Context(), s.n.Group); err == nil {
			g := gs[s.n.Group]
			if g.Err == nil && g.State == "Stable" && len(g.Members) == n {
				return true
			}
		}
		return false
	})
}

// committed is the group's committed offset on each input partition (-1 for none).
func (s *scenario) committed() map[int32]int64 {
	s.t.Helper()
	out := map[int32]int64{}
	os, err := s.k.Admin.FetchOffsets(s.t.Context(), s.n.Group)
	if err != nil {
		return out
	}
	for p, o := range os[s.n.In] {
		if o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

// waitEveryPartitionPast waits until the group's committed offset on every input
// partition is past its value in from: no partition is left unfetched.
func (s *scenario) waitEveryPartitionPast(from map[int32]int64, what string) {
	s.t.Helper()
	parts := s.k.Ends(s.t, s.n.In)[s.n.In]
	faulttest.WaitFor(s.t, 3*time.Minute, "every input partition committed past where it was "+what, func() bool {
		now := s.committed()
		for p := range parts {
			if now[p] <= from[p] {
				return false
			}
		}
		return true
	})
}

// waitDrained waits until the group has committed the whole input.
func (s *scenario) waitDrained() {
	s.t.Helper()
	end := sum(s.k.Ends(s.t, s.n.In)[s.n.In])
	faulttest.WaitFor(s.t, 3*time.Minute, fmt.Sprintf("the group to commit all %d input records", end), func() bool {
		return s.k.Committed(s.t, s.n.Group, s.n.In) >= end
	})
}

// check matches the input topic to the output topics, read with opts.
func (s *scenario) check(opts []kgo.Opt) faulttest.Report {
	s.t.Helper()
	return faulttest.Check(s.k.ReadAll(s.t, opts, s.n.In), s.k.ReadAll(s.t, opts, s.n.Outs()...))
}

// waitReady waits for /readyz 200.
func waitReady(t *testing.T, g *faulttest.Gate) {
	t.Helper()
	faulttest.WaitFor(t, 2*time.Minute, "gate "+g.Name+" /readyz 200", func() bool {
		code, _ := g.Get(t, "/readyz")
		return code == http.StatusOK
	})
}

// metricAbove reports whether any sample of name in the exposition text is above v.
func metricAbove(text, name string, v float64) bool {
	return metricSum(text, name) > v
}

// metricSum adds every sample of name in the exposition text.
func metricSum(text, name string) float64 {
	var total float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		if x, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += x
		}
	}
	return total
}

func produce(t *testing.T, k *kafka, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := k.Client(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// waitOne waits for the first record on topic and returns it.
func waitOne(t *testing.T, k *kafka, g *faulttest.Gate, topic string) *kgo.Record {
	t.Helper()
	var out []*kgo.Record
	faulttest.WaitFor(t, time.Minute, "a record on "+topic+" (gate "+g.Name+")", func() bool {
		if sum(k.Ends(t, topic)[topic]) == 0 {
			return false
		}
		out = k.ReadAll(t, nil, topic)
		return len(out) > 0
	})
	return out[0]
}
