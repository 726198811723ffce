//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/faulttest"
)

const (
	inTopic  = "events"
	accTopic = "events_accepted"
	ovfTopic = "events_overflow"
	dlqTopic = "events_dead_letter"
	group    = "capture-gate-it"
)

var outTopics = []string{accTopic, ovfTopic, dlqTopic}

// gateVars are a gate's settings against k and the Redis at redisURL.
func gateVars(k *kafka, redisURL string) map[string]string {
	return map[string]string{
		"GATE_KAFKA_BROKERS":    k.Brokers,
		"GATE_REDIS_URLS":       redisURL,
		"GATE_HTTP_ADDR":        "127.0.0.1:0",
		"GATE_GROUP_ID":         group,
		"GATE_COMMIT_INTERVAL":  "200ms",
		"GATE_TICK_INTERVAL":    "100ms",
		"GATE_SYNC_INTERVAL":    "1s",
		"GATE_WINDOW":           "10s",
		"GATE_THRESHOLD":        "500",
		"GATE_REVOKE_TIMEOUT":   "10s",
		"GATE_SHUTDOWN_TIMEOUT": "10s",
	}
}

// createTopics creates the input (6 partitions) and the three outputs (3 each).
func createTopics(t *testing.T, k *kafka) {
	t.Helper()
	k.CreateTopic(t, inTopic, 6)
	for _, o := range outTopics {
		k.CreateTopic(t, o, 3)
	}
}

// record is input record id: a third to a hot team, the rest over 20 teams, one in 50
// not JSON (dead letter); its id in faulttest.IDHeader.
func record(id int) *kgo.Record {
	v := fmt.Appendf(nil, `{"team_id":"team-%d","seq":%d}`, id%20, id)
	switch {
	case id%50 == 49:
		v = []byte("not json " + strconv.Itoa(id))
	case id%3 == 0:
		v = fmt.Appendf(nil, `{"team_id":"hot","seq":%d}`, id)
	}
	return &kgo.Record{
		Topic:   inTopic,
		Key:     []byte("k" + strconv.Itoa(id%64)),
		Value:   v,
		Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte(strconv.Itoa(id))}},
	}
}

// produceLoad produces records at about 1000/s until the returned stop is called; stop
// returns how many were acknowledged.
func produceLoad(t *testing.T, k *kafka) (stop func() int64) {
	t.Helper()
	cl := k.Client(t, kgo.RecordRetries(5))
	quit, done := make(chan struct{}), make(chan struct{})
	var acked atomic.Int64
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for id := 0; ; {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			recs := make([]*kgo.Record, 10)
			for i := range recs {
				recs[i] = record(id)
				id++
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for _, r := range cl.ProduceSync(ctx, recs...) {
				if r.Err == nil {
					acked.Add(1)
				}
			}
			cancel()
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

// outputs counts the records on the output topics (markers included).
func outputs(t *testing.T, k *kafka) int64 {
	var n int64
	for _, ps := range k.Ends(t, outTopics...) {
		n += sum(ps)
	}
	return n
}

func waitOutputsGrow(t *testing.T, k *kafka, by int64, what string) {
	t.Helper()
	from := outputs(t, k)
	faulttest.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d more output records (%s)", by, what), func() bool {
		return outputs(t, k) >= from+by
	})
}

// waitMembers waits until the group is stable with n members.
func waitMembers(t *testing.T, k *kafka, n int) {
	t.Helper()
	faulttest.WaitFor(t, 2*time.Minute, fmt.Sprintf("group %s stable with %d members", group, n), func() bool {
		gs, err := k.Admin.DescribeGroups(t.Context(), group)
		if err != nil {
			return false
		}
		g := gs[group]
		return g.State == "Stable" && len(g.Members) == n
	})
}

// waitDrained waits until the group has committed the whole input.
func waitDrained(t *testing.T, k *kafka) {
	t.Helper()
	end := sum(k.Ends(t, inTopic)[inTopic])
	faulttest.WaitFor(t, 2*time.Minute, fmt.Sprintf("the group to commit all %d input records", end), func() bool {
		return k.Committed(t, group, inTopic) >= end
	})
}

// waitReady waits for /readyz 200.
func waitReady(t *testing.T, g *faulttest.Gate) {
	t.Helper()
	faulttest.WaitFor(t, 2*time.Minute, "gate "+g.Name+" /readyz 200", func() bool {
		code, _ := g.Get(t, "/readyz")
		return code == http.StatusOK
	})
}

// TestConservationThreeGatesRebalance: three gates share the input through rebalances (a
// fourth joins, then leaves, then one is SIGKILLed and restarted); every input record
// reaches exactly one output, with at-least-once delivery, on a real broker.
func TestConservationThreeGatesRebalance(t *testing.T) {
	needRuntime(t)
	bin := gateBinary(t)
	k := startKafka(t, kafkaOpts{})
	rurl := startRedis(t)
	createTopics(t, k)
	vars := gateVars(k, rurl)
	gates := map[string]*faulttest.Gate{}
	for _, n := range []string{"a", "b", "c"} {
		gates[n] = faulttest.StartGate(t, bin, n, vars)
	}
	waitMembers(t, k, 3)
	stop := produceLoad(t, k)
	waitOutputsGrow(t, k, 2000, "three gates")

	gates["d"] = faulttest.StartGate(t, bin, "d", vars)
	waitMembers(t, k, 4)
	waitOutputsGrow(t, k, 1000, "four gates")
	gates["d"].Term(t, time.Minute)
	waitMembers(t, k, 3)
	waitOutputsGrow(t, k, 1000, "back to three")

	acked := stop()
	waitDrained(t, k)
	rep := faulttest.Check(k.ReadAll(t, nil, inTopic), k.ReadAll(t, nil, outTopics...))
	t.Logf("conservation: %s (acknowledged %d)", rep, acked)
	if !rep.OK() || rep.Inputs < int(acked) {
		t.Errorf("conservation: %s; want every input once (%d acknowledged)", rep, acked)
	}
	for _, n := range []string{"a", "b", "c"} {
		gates[n].Term(t, time.Minute)
	}
}

// TestExactlyOnceReadCommitted: with exactly-once delivery and a gate SIGKILLed mid-load
// (restarted under its transactional id, which fences its open transaction), a
// read_committed consumer sees every input record exactly once.
func TestExactlyOnceReadCommitted(t *testing.T) {
	needRuntime(t)
	bin := gateBinary(t)
	k := startKafka(t, kafkaOpts{})
	rurl := startRedis(t)
	createTopics(t, k)
	vars := gateVars(k, rurl)
	vars["GATE_DELIVERY"] = "exactly-once"
	vars["GATE_TRANSACTION_TIMEOUT"] = (faulttest.RebalanceTimeout + 5*time.Second).String()
	start := func(name string) *faulttest.Gate {
		v := map[string]string{"GATE_TRANSACTIONAL_ID": "it-" + name}
		for k, x := range vars {
			v[k] = x
		}
		return faulttest.StartGate(t, bin, name, v)
	}
	gates := map[string]*faulttest.Gate{"a": start("a"), "b": start("b")}
	waitMembers(t, k, 2)
	stop := produceLoad(t, k)
	waitOutputsGrow(t, k, 2000, "two gates")
	gates["b"].Kill(t)
	gates["b"] = start("b")
	waitMembers(t, k, 2)
	waitOutputsGrow(t, k, 2000, "after b's restart")
	acked := stop()
	waitDrained(t, k)
	for _, g := range gates {
		g.Term(t, time.Minute) // every transaction ends: committed, nothing left open
	}
	committed := []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	rep := faulttest.Check(k.ReadAll(t, committed, inTopic), k.ReadAll(t, committed, outTopics...))
	t.Logf("exactly-once: %s (acknowledged %d)", rep, acked)
	if !rep.OK() || rep.Inputs < int(acked) {
		t.Errorf("exactly-once, read_committed: %s; want every input exactly once", rep)
	}
}

// TestBrokerSettings: the hardening cases on a real broker's own checks.
func TestBrokerSettings(t *testing.T) {
	needRuntime(t)
	bin := gateBinary(t)
	k := startKafka(t, kafkaOpts{})
	rurl := startRedis(t)

	t.Run("timestamp refused by message.timestamp.after.max.ms", func(t *testing.T) {
		const g = "ts"
		// The input takes any timestamp; the accepted topic none more than a minute ahead.
		k.CreateTopic(t, g+"-in", 1, "message.timestamp.after.max.ms", "9223372036854775807")
		k.CreateTopic(t, g+"-acc", 1, "message.timestamp.after.max.ms", "60000")
		k.CreateTopic(t, g+"-ovf", 1)
		k.CreateTopic(t, g+"-dlq", 1, "message.timestamp.after.max.ms", "60000")
		gt := startTopicsGate(t, bin, k, rurl, g)
		future := time.Now().Add(30 * time.Minute).Truncate(time.Millisecond)
		produce(t, k, &kgo.Record{Topic: g + "-in", Value: []byte(`{"team_id":"t"}`), Timestamp: future,
			Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
		out := waitOne(t, k, gt, g+"-dlq")
		if e, _ := faulttest.Header(out, "gate-error"); e != "rejected" {
			t.Errorf("dead letter gate-error %q, want rejected", e)
		}
		if orig, _ := faulttest.Header(out, consume.HeaderOriginalTimestamp); orig != strconv.FormatInt(future.UnixMilli(), 10) {
			t.Errorf("%s = %q, want the input's %d", consume.HeaderOriginalTimestamp, orig, future.UnixMilli())
		}
		if out.Timestamp.After(time.Now().Add(time.Minute)) {
			t.Errorf("dead letter stamped %s: want now, which the topic accepts", out.Timestamp)
		}
	})

	t.Run("dead-letter topic with a small max.message.bytes", func(t *testing.T) {
		const g = "big"
		k.CreateTopic(t, g+"-in", 1)
		k.CreateTopic(t, g+"-acc", 1, "max.message.bytes", "4096")
		k.CreateTopic(t, g+"-ovf", 1, "max.message.bytes", "4096")
		k.CreateTopic(t, g+"-dlq", 1, "max.message.bytes", "2048")
		gt := startTopicsGate(t, bin, k, rurl, g)
		big := fmt.Sprintf(`{"team_id":"t","pad":%q}`, strings.Repeat("x", 16<<10))
		produce(t, k, &kgo.Record{Topic: g + "-in", Value: []byte(big),
			Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
		out := waitOne(t, k, gt, g+"-dlq")
		dropped, ok := faulttest.Header(out, "gate-dropped")
		if len(out.Value) != 0 || !ok || !strings.Contains(dropped, "value_bytes="+strconv.Itoa(len(big))) {
			t.Errorf("dead letter: %d-byte value, gate-dropped %q: want no value and its size", len(out.Value), dropped)
		}
		if src, _ := faulttest.Header(out, "gate-source"); src != g+"-in/0/0" {
			t.Errorf("gate-source %q, want %s-in/0/0", src, g)
		}
	})

	t.Run("missing output topic", func(t *testing.T) {
		const g = "missing"
		k.CreateTopic(t, g+"-in", 1)
		k.CreateTopic(t, g+"-acc", 1)
		k.CreateTopic(t, g+"-dlq", 1)
		gt := faulttest.StartGate(t, bin, g, topicsVars(k, rurl, g))
		faulttest.WaitFor(t, time.Minute, "/readyz naming the missing topic", func() bool {
			code, body := gt.Get(t, "/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, `topic "`+g+`-ovf" does not exist`)
		})
		k.CreateTopic(t, g+"-ovf", 1)
		waitReady(t, gt)
		produce(t, k, &kgo.Record{Topic: g + "-in", Value: []byte(`{"team_id":"t"}`),
			Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
		waitOne(t, k, gt, g+"-acc")
	})
}

// TestACLs: a SASL user lacking WRITE on the dead-letter topic; /readyz names the
// permission, and once it is granted the gate becomes ready and routes.
func TestACLs(t *testing.T) {
	needRuntime(t)
	bin := gateBinary(t)
	k := startKafka(t, kafkaOpts{saslUsers: map[string]string{"admin": "admin-secret", "gate": "gate-secret"}})
	rurl := startRedis(t)
	const g = "acl"
	for _, topic := range []string{g + "-in", g + "-acc", g + "-ovf", g + "-dlq"} {
		k.CreateTopic(t, topic, 1)
	}
	grant := func(b *kadm.ACLBuilder) {
		t.Helper()
		res, err := k.Admin.CreateACLs(t.Context(), b.Allow("User:gate").ResourcePatternType(kadm.ACLPatternLiteral))
		if err != nil {
			t.Fatalf("creating ACLs: %v", err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("creating ACL on %s: %v", r.Name, r.Err)
			}
		}
	}
	grant(kadm.NewACLs().Topics(g+"-in").Operations(kadm.OpRead, kadm.OpDescribe))
	grant(kadm.NewACLs().Topics(g+"-acc", g+"-ovf").Operations(kadm.OpWrite, kadm.OpDescribe))
	grant(kadm.NewACLs().Topics(g + "-dlq").Operations(kadm.OpDescribe)) // no WRITE
	grant(kadm.NewACLs().Groups(group).Operations(kadm.OpRead, kadm.OpDescribe))
	vars := topicsVars(k, rurl, g)
	vars["GATE_KAFKA_SASL_MECHANISM"] = "plain"
	vars["GATE_KAFKA_SASL_USERNAME"] = "gate"
	vars["GATE_KAFKA_SASL_PASSWORD"] = "gate-secret"
	gt := faulttest.StartGate(t, bin, g, vars)
	faulttest.WaitFor(t, time.Minute, "/readyz naming the missing WRITE", func() bool {
		code, body := gt.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `topic "`+g+`-dlq": no permission to write it`)
	})
	grant(kadm.NewACLs().Topics(g + "-dlq").Operations(kadm.OpWrite))
	waitReady(t, gt)
	produce(t, k, &kgo.Record{Topic: g + "-in", Value: []byte("not json"),
		Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
	waitOne(t, k, gt, g+"-dlq")
	if strings.Contains(gt.Logs(), "gate-secret") {
		t.Errorf("the SASL password appears in the gate's log")
	}
}

// TestRedisNoEviction: Redis full under maxmemory with noeviction refuses the tick's
// writes (OOM); the gate keeps routing every record (fail open), counts the errors, and
// writes its counts once Redis has room again.
func TestRedisNoEviction(t *testing.T) {
	needRuntime(t)
	bin := gateBinary(t)
	k := startKafka(t, kafkaOpts{})
	rurl := startRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	createTopics(t, k)
	opt, err := redis.ParseURL(rurl)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	t.Cleanup(func() { _ = rc.Close() })
	// Fill it: writes are refused from here on.
	pad := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		if err := rc.Set(t.Context(), "fill:"+strconv.Itoa(i), pad, 0).Err(); err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("filling Redis: %v, want an OOM refusal", err)
			}
			break
		}
		if i > 10000 {
			t.Fatal("Redis never refused a write: maxmemory not applied")
		}
	}
	vars := gateVars(k, rurl)
	vars["GATE_REDIS_PREFIX"] = "it"
	g := faulttest.StartGate(t, bin, "oom", vars)
	waitReady(t, g)
	stop := produceLoad(t, k)
	waitOutputsGrow(t, k, 2000, "while Redis refuses writes")
	faulttest.WaitFor(t, time.Minute, "gate_limiter_errors_total > 0", func() bool {
		_, m := g.Get(t, "/metrics")
		return metricAbove(m, "gate_limiter_errors_total", 0)
	})
	if n, _ := rc.Keys(t.Context(), "it:*").Result(); len(n) != 0 {
		t.Errorf("%d keys written under it:* while Redis was full", len(n))
	}
	// Room again: the counts kept meanwhile are written.
	if err := rc.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	faulttest.WaitFor(t, time.Minute, "the gate's counts in Redis", func() bool {
		n, _ := rc.Keys(t.Context(), "it:*").Result()
		return len(n) > 0
	})
	acked := stop()
	waitDrained(t, k)
	rep := faulttest.Check(k.ReadAll(t, nil, inTopic), k.ReadAll(t, nil, outTopics...))
	if !rep.OK() || rep.Inputs < int(acked) {
		t.Errorf("conservation through the Redis refusal: %s", rep)
	}
	g.Term(t, time.Minute)
}

// metricAbove reports whether any sample of name in the exposition text is above v.
func metricAbove(text, name string, v float64) bool {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		if x, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && x > v {
			return true
		}
	}
	return false
}

// topicsVars are a gate's settings for the topics g-in, g-acc, g-ovf and g-dlq, in its own
// group.
func topicsVars(k *kafka, rurl, g string) map[string]string {
	v := gateVars(k, rurl)
	v["GATE_INPUT_TOPIC"] = g + "-in"
	v["GATE_ACCEPTED_TOPIC"] = g + "-acc"
	v["GATE_OVERFLOW_TOPIC"] = g + "-ovf"
	v["GATE_DEAD_LETTER_TOPIC"] = g + "-dlq"
	v["GATE_REDIS_PREFIX"] = g
	if g != "acl" {
		v["GATE_GROUP_ID"] = group + "-" + g
	}
	return v
}

// startTopicsGate starts a gate on g's topics and waits until it is ready.
func startTopicsGate(t *testing.T, bin string, k *kafka, rurl, g string) *faulttest.Gate {
	t.Helper()
	gt := faulttest.StartGate(t, bin, g, topicsVars(k, rurl, g))
	waitReady(t, gt)
	return gt
}

func produce(t *testing.T, k *kafka, recs ...*kgo.Record) {
	t.Helper()
	if err := k.Client(t).ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
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
