package integration

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/faulttest"
)

// TestBrokerSettings: the hardening cases on a real broker's own checks.
func TestBrokerSettings(t *testing.T) {
	t.Parallel()
	t.Run("timestamp refused by message.timestamp.after.max.ms", func(t *testing.T) {
		s := newScenario(t, kafkaOpts{}, 0, 0)
		// The input takes any timestamp; the accepted topic none more than a minute ahead.
		s.k.CreateTopic(t, s.n.In, 1, "message.timestamp.after.max.ms", "9223372036854775807")
		s.k.CreateTopic(t, s.n.Acc, 1, "message.timestamp.after.max.ms", "60000")
		s.k.CreateTopic(t, s.n.Ovf, 1)
		s.k.CreateTopic(t, s.n.Dlq, 1, "message.timestamp.after.max.ms", "60000")
		gt := faulttest.StartGate(t, s.bin, "ts", s.vars())
		waitReady(t, gt)
		future := time.Now().Add(30 * time.Minute).Truncate(time.Millisecond)
		produce(t, s.k, &kgo.Record{Topic: s.n.In, Value: []byte(`{"team_id":"t"}`), Timestamp: future,
			Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
		out := waitOne(t, s.k, gt, s.n.Dlq)
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
		s := newScenario(t, kafkaOpts{}, 0, 0)
		s.k.CreateTopic(t, s.n.In, 1)
		s.k.CreateTopic(t, s.n.Acc, 1, "max.message.bytes", "4096")
		s.k.CreateTopic(t, s.n.Ovf, 1, "max.message.bytes", "4096")
		s.k.CreateTopic(t, s.n.Dlq, 1, "max.message.bytes", "2048")
		gt := faulttest.StartGate(t, s.bin, "big", s.vars())
		waitReady(t, gt)
		// Incompressible: a broker checks max.message.bytes against the batch as sent,
		// compressed (kfake against the records' own size), so 16 KiB of one letter
		// would pass a 4 KiB limit.
		big := fmt.Sprintf(`{"team_id":"t","pad":%q}`, incompressible(16<<10))
		produce(t, s.k, &kgo.Record{Topic: s.n.In, Value: []byte(big),
			Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
		out := waitOne(t, s.k, gt, s.n.Dlq)
		dropped, ok := faulttest.Header(out, "gate-dropped")
		if len(out.Value) != 0 || !ok || !strings.Contains(dropped, "value_bytes="+strconv.Itoa(len(big))) {
			t.Errorf("dead letter: %d-byte value, gate-dropped %q: want no value and its size", len(out.Value), dropped)
		}
		if src, _ := faulttest.Header(out, "gate-source"); src != s.n.In+"/0/0" {
			t.Errorf("gate-source %q, want %s/0/0", src, s.n.In)
		}
	})

	t.Run("missing output topic", func(t *testing.T) {
		s := newScenario(t, kafkaOpts{}, 0, 0)
		s.k.CreateTopic(t, s.n.In, 1)
		s.k.CreateTopic(t, s.n.Acc, 1)
		s.k.CreateTopic(t, s.n.Dlq, 1)
		gt := faulttest.StartGate(t, s.bin, "missing", s.vars())
		faulttest.WaitFor(t, time.Minute, "/readyz naming the missing topic", func() bool {
			code, body := gt.Get(t, "/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, `topic "`+s.n.Ovf+`" does not exist`)
		})
		s.k.CreateTopic(t, s.n.Ovf, 1)
		waitReady(t, gt)
		produce(t, s.k, &kgo.Record{Topic: s.n.In, Value: []byte(`{"team_id":"t"}`),
			Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
		waitOne(t, s.k, gt, s.n.Acc)
	})

	t.Run("overflow topic made compacted while the gate runs", func(t *testing.T) {
		s := newScenario(t, kafkaOpts{}, 1, 1)
		v := s.vars()
		v["GATE_THRESHOLD"] = "1" // every record of team t after the first to overflow, without its key
		gt := faulttest.StartGate(t, s.bin, "compacted", v)
		waitReady(t, gt)
		compact := "compact"
		res, err := s.k.Admin.AlterTopicConfigs(t.Context(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: &compact}}, s.n.Ovf)
		if err := allOK(res, err, func(r kadm.AlterConfigsResponse) error { return r.Err }); err != nil {
			t.Fatalf("making the overflow topic compacted: %v", err)
		}
		// The broker refuses a keyless record once its metadata has the change.
		var recs []*kgo.Record
		for i := range 5 {
			recs = append(recs, &kgo.Record{Topic: s.n.In, Key: []byte("k"), Value: []byte(`{"team_id":"t"}`),
				Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte(strconv.Itoa(i))}}})
		}
		produce(t, s.k, recs...)
		out := waitOne(t, s.k, gt, s.n.Dlq)
		if e, _ := faulttest.Header(out, "gate-error"); e != "rejected" {
			t.Errorf("dead letter gate-error %q, want rejected", e)
		}
		detail, _ := faulttest.Header(out, "gate-error-detail")
		t.Logf("dead letter gate-error-detail: %s", detail)
		// Within a few round trips of that refusal, not at the gate's once-a-minute read
		// of its topics' settings (up to a minute after it).
		faulttest.WaitFor(t, 15*time.Second, "/readyz naming the compacted overflow topic", func() bool {
			code, body := gt.Get(t, "/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, `topic "`+s.n.Ovf+`": cleanup.policy=compact`)
		})
	})
}

// incompressible is n bytes of random base64 text.
func incompressible(n int) string {
	b := make([]byte, n*3/4+3)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)[:n]
}

// TestACLs: a SASL user lacking WRITE on the dead-letter topic; /readyz names the
// permission, and once it is granted the gate becomes ready and routes. First, on the
// same broker, a wrong password: Apache Kafka refuses the login, and the gate is not
// ready, /readyz giving the broker's answer and the variables to check, the password
// in neither its log nor its answer (consume's TestSASLRefusedAtStartIsNamed has it on
// kfake, refusing by a hook of its own: a review once saw kfake take a wrong password).
func TestACLs(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{sasl: true}, 1, 1)
	wrong := faulttest.StartGate(t, s.bin, "wrong-password", gateVarsFor(s,
		"GATE_KAFKA_SASL_MECHANISM", "plain",
		"GATE_KAFKA_SASL_USERNAME", "gate",
		"GATE_KAFKA_SASL_PASSWORD", "not-the-gate-secret"))
	var body string
	faulttest.WaitFor(t, time.Minute, "/readyz naming the refused login and its variables", func() bool {
		var code int
		code, body = wrong.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "SASL_AUTHENTICATION_FAILED") &&
			strings.Contains(body, "GATE_KAFKA_SASL_USERNAME") && strings.Contains(body, "GATE_KAFKA_SASL_PASSWORD")
	})
	if strings.Contains(body+wrong.Logs(), "not-the-gate-secret") {
		t.Errorf("the wrong password appears in /readyz or the log:\n%s\n%s", body, wrong.Logs())
	}
	wrong.Term(t, time.Minute)
	grant := func(b *kadm.ACLBuilder) {
		t.Helper()
		s.k.allow(t, b, "User:gate")
	}
	grant(kadm.NewACLs().Topics(s.n.In).Operations(kadm.OpRead, kadm.OpDescribe))
	grant(kadm.NewACLs().Topics(s.n.Acc, s.n.Ovf).Operations(kadm.OpWrite, kadm.OpDescribe))
	grant(kadm.NewACLs().Topics(s.n.Dlq).Operations(kadm.OpDescribe)) // no WRITE
	grant(kadm.NewACLs().Groups(s.n.Group).Operations(kadm.OpRead, kadm.OpDescribe))
	vars := gateVarsFor(s,
		"GATE_KAFKA_SASL_MECHANISM", "plain",
		"GATE_KAFKA_SASL_USERNAME", "gate",
		"GATE_KAFKA_SASL_PASSWORD", "gate-secret")
	gt := faulttest.StartGate(t, s.bin, "acl", vars)
	faulttest.WaitFor(t, time.Minute, "/readyz naming the missing WRITE", func() bool {
		code, body := gt.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `topic "`+s.n.Dlq+`": no permission to write it`)
	})
	grant(kadm.NewACLs().Topics(s.n.Dlq).Operations(kadm.OpWrite))
	waitReady(t, gt)
	produce(t, s.k, &kgo.Record{Topic: s.n.In, Value: []byte("not json"),
		Headers: []kgo.RecordHeader{{Key: faulttest.IDHeader, Value: []byte("1")}}})
	waitOne(t, s.k, gt, s.n.Dlq)
	if strings.Contains(gt.Logs(), "gate-secret") {
		t.Errorf("the SASL password appears in the gate's log")
	}
}

// TestRedisNoEviction: Redis full under maxmemory with noeviction refuses the tick's
// writes (OOM); the gate keeps routing every record (fail open), counts the errors, and
// writes its counts once Redis has room again.
func TestRedisNoEviction(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{}, 6, 3)
	s.rurl = startRedis(t, "maxmemory-policy", "noeviction")
	opt, err := redis.ParseURL(s.rurl)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	t.Cleanup(func() { _ = rc.Close() })
	// Fill it with 4 MiB, then set maxmemory 1 MiB below what it uses: writes are
	// refused from here on (a limit just at the fill point lets a write through whenever
	// a client buffer is freed).
	pad := strings.Repeat("x", 64<<10)
	for i := range 64 {
		if err := rc.Set(t.Context(), "fill:"+strconv.Itoa(i), pad, 0).Err(); err != nil {
			t.Fatalf("filling Redis: %v", err)
		}
	}
	info, err := rc.InfoMap(t.Context(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		t.Fatalf("used_memory %q: %v", info["Memory"]["used_memory"], err)
	}
	if err := rc.ConfigSet(t.Context(), "maxmemory", strconv.FormatInt(mem-(1<<20), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(t.Context(), "probe", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("a write to the full Redis: %v, want an OOM refusal", err)
	}
	g := faulttest.StartGate(t, s.bin, "oom", s.vars())
	waitReady(t, g)
	stop := s.produceLoad()
	s.waitOutputsGrow(2000, "while Redis refuses writes")
	faulttest.WaitFor(t, time.Minute, "gate_limiter_errors_total > 0", func() bool {
		_, m := g.Get(t, "/metrics")
		return metricAbove(m, "gate_limiter_errors_total", 0)
	})
	if n, _ := rc.Keys(t.Context(), s.n.Prefix+":*").Result(); len(n) != 0 {
		t.Errorf("%d keys written under %s:* while Redis was full", len(n), s.n.Prefix)
	}
	// Room again: the counts kept meanwhile are written.
	if err := rc.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	faulttest.WaitFor(t, time.Minute, "the gate's counts in Redis", func() bool {
		n, _ := rc.Keys(t.Context(), s.n.Prefix+":*").Result()
		return len(n) > 0
	})
	acked := stop()
	s.waitDrained()
	rep := s.check(nil)
	if !rep.OK() || rep.Inputs < int(acked) {
		t.Errorf("conservation through the Redis refusal: %s", rep)
	}
	g.Term(t, time.Minute)
}

// TestFreshCluster: on a cluster that has never had a consumer group, the first
// FindCoordinator makes the broker create __consumer_offsets, and until it is loaded
// the group's coordinator answers COORDINATOR_NOT_AVAILABLE (kfake answers at once).
// That is a wait, not an operator's problem: the gate becomes ready without logging an
// error or naming a problem in /readyz.
func TestFreshCluster(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{own: true}, 1, 1)
	g := faulttest.StartGate(t, s.bin, "fresh", s.vars())
	waitReady(t, g)
	produce(t, s.k, s.record(1))
	waitOne(t, s.k, g, s.n.Acc)
	if strings.Contains(g.Logs(), `"level":"ERROR"`) {
		t.Errorf("the gate logged an error on a fresh cluster:\n%s", g.Logs())
	}
}

// TestTransactionTimeoutAboveBrokerMax: a GATE_TRANSACTION_TIMEOUT above the brokers'
// transaction.max.timeout.ms makes every InitProducerId fail with
// INVALID_TRANSACTION_TIMEOUT (kfake takes any timeout), which franz-go's producer
// cannot get past. The gate does not exit into a crash loop: it stays up, not ready,
// and says in its log and /readyz which two settings disagree; nothing is routed
// meanwhile. Where the gate may read the brokers' configuration (DESCRIBE_CONFIGS on
// the cluster) its preflight names the brokers' value; where it may not, the refusal
// itself does.
func TestTransactionTimeoutAboveBrokerMax(t *testing.T) {
	t.Parallel()
	// The SASL broker's transaction.max.timeout.ms is 30 s (saslConfig). Its two users:
	// describer may read the brokers' configuration, gate may not.
	t.Run("preflight", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t, kafkaOpts{sasl: true}, 1, 1)
		grantAll(t, s, "describer", s.n.Group+"-txn")
		s.k.allow(t, kadm.NewACLs().Clusters().Operations(kadm.OpDescribeConfigs), "User:describer")
		g := faulttest.StartGate(t, s.bin, "txn", gateVarsFor(s,
			"GATE_KAFKA_SASL_MECHANISM", "plain",
			"GATE_KAFKA_SASL_USERNAME", "describer",
			"GATE_KAFKA_SASL_PASSWORD", saslUsers["describer"],
			"GATE_DELIVERY", "exactly-once",
			"GATE_TRANSACTIONAL_ID", s.n.Group+"-txn",
			"GATE_TRANSACTION_TIMEOUT", "45s"))
		txnTimeoutRefused(t, s, g, "transaction.max.timeout.ms (30s)")
	})
	t.Run("without DESCRIBE_CONFIGS", func(t *testing.T) {
		t.Parallel()
		s := newScenario(t, kafkaOpts{sasl: true}, 1, 1)
		grantAll(t, s, "gate", s.n.Group+"-txn")
		g := faulttest.StartGate(t, s.bin, "txn", gateVarsFor(s,
			"GATE_KAFKA_SASL_MECHANISM", "plain",
			"GATE_KAFKA_SASL_USERNAME", "gate",
			"GATE_KAFKA_SASL_PASSWORD", "gate-secret",
			"GATE_DELIVERY", "exactly-once",
			"GATE_TRANSACTIONAL_ID", s.n.Group+"-txn",
			"GATE_TRANSACTION_TIMEOUT", "45s"))
		txnTimeoutRefused(t, s, g, "transaction.max.timeout.ms (unknown")
	})
}

// txnTimeoutRefused checks that g, refused its transactions, is up, not ready with a
// reason naming both settings (and want), and routes nothing.
func txnTimeoutRefused(t *testing.T, s *scenario, g *faulttest.Gate, want string) {
	t.Helper()
	produce(t, s.k, s.record(1))
	faulttest.WaitFor(t, 2*time.Minute, "/readyz naming both timeouts", func() bool {
		code, body := g.Get(t, "/readyz")
		return code == http.StatusServiceUnavailable &&
			strings.Contains(body, "GATE_TRANSACTION_TIMEOUT (45s)") && strings.Contains(body, want)
	})
	if g.Exited() {
		t.Fatalf("the gate exited: %s", g.Logs())
	}
	// The log reaches the test through a pipe its reader copies as it comes: the line
	// /readyz's reason is logged with can be in the pipe still when /readyz answers.
	faulttest.WaitFor(t, 30*time.Second, "a log line naming "+want, func() bool { return strings.Contains(g.Logs(), want) })
	if n := s.outputs(); n != 0 {
		t.Errorf("%d records routed while transactions cannot start", n)
	}
}

// grantAll gives user what a gate needs on s's topics and group, and on the
// transactional id txnID when not empty: not DESCRIBE_CONFIGS on the cluster.
func grantAll(t *testing.T, s *scenario, user, txnID string) {
	t.Helper()
	bs := []*kadm.ACLBuilder{
		kadm.NewACLs().Topics(s.n.In).Operations(kadm.OpRead, kadm.OpDescribe),
		kadm.NewACLs().Topics(s.n.Outs()...).Operations(kadm.OpWrite, kadm.OpDescribe),
		kadm.NewACLs().Groups(s.n.Group).Operations(kadm.OpRead, kadm.OpDescribe),
	}
	if txnID != "" {
		bs = append(bs, kadm.NewACLs().TransactionalIDs(txnID).Operations(kadm.OpWrite, kadm.OpDescribe))
	}
	for _, b := range bs {
		s.k.allow(t, b, "User:"+user)
	}
}
