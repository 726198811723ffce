package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// TestIdentityRotation, black-box (the gate's binary, Apache Kafka, redis-server): a team
// that sends a fresh distinct_id with every event, under a per-user rule, leaves no key of
// its in Redis and is found rotating: logged with the team, counted, and its records sent
// to overflow with reason key_cardinality (on_cardinality: overflow); a steady team's users
// are routed as before, and its runaway user, over the user limit, is diverted by the rule
// and keeps its counter in Redis. Before keys under the floor stayed in a sketch, each of
// the rotating team's keys was cached, written to Redis and never limited.
func TestIdentityRotation(t *testing.T) {
	t.Parallel()
	s := newScenario(t, kafkaOpts{}, 1, 1)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(`rules:
  - name: team-user
    key: json:team_id+distinct_id
    limits: [1m:2000]
    max_keys: 1000
    on_cardinality: overflow
  - name: team
    key: json:team_id
    limits: [1m:1000000]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	vars := s.vars()
	vars["GATE_RULES_FILE"] = rules
	delete(vars, "GATE_WINDOW")
	delete(vars, "GATE_THRESHOLD")
	gt := faulttest.StartGate(t, s.bin, "rotation", vars)
	waitReady(t, gt)

	var recs []*kgo.Record
	batch := func(from, to int) []*kgo.Record {
		var out []*kgo.Record
		for i := from; i < to; i++ {
			out = append(out, &kgo.Record{Topic: s.n.In, Value: fmt.Appendf(nil, `{"team_id":"rot","distinct_id":"id-%d"}`, i)})
			if i%4 == 0 {
				out = append(out, &kgo.Record{Topic: s.n.In, Value: fmt.Appendf(nil, `{"team_id":"ok","distinct_id":"user-%d"}`, i%5)})
			}
			if i%8 == 0 { // a runaway user: 2,500 in all, 500 over its limit of 2,000 a minute
				for range 5 {
					out = append(out, &kgo.Record{Topic: s.n.In, Value: []byte(`{"team_id":"ok","distinct_id":"hot"}`)})
				}
			}
		}
		recs = append(recs, out...)
		return out
	}
	routed := func(what string) {
		t.Helper()
		faulttest.WaitFor(t, 2*time.Minute, what, func() bool {
			ends := s.k.Ends(t, s.n.Acc, s.n.Ovf, s.n.Dlq)
			return sum(ends[s.n.Acc])+sum(ends[s.n.Ovf])+sum(ends[s.n.Dlq]) >= int64(len(recs))
		})
	}
	// The runaway user's diversion is exact within one window. Across a window's start the
	// sliding window weighs the window before by the part of it still covered, so a few
	// more of its records pass (498 of 500 diverted were seen once, the records routed
	// across a minute's turn): the records go in with at least 30 s of the minute left,
	// the windows being the wall clock's minutes, and the check is exact only if they were
	// all routed before it turned.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 30*time.Second {
		time.Sleep(left) // a wall-clock instant, not a condition: the next minute's start
	}
	window := time.Now().Truncate(time.Minute)
	// Found rotating by the tick after its keys pass the bound: a candidate at 500 records,
	// rotating past 1,000 keys.
	produce(t, s.k, batch(0, 3000)...)
	routed("the first 3,750 records routed")
	faulttest.WaitFor(t, time.Minute, "the rotating team logged", func() bool {
		return strings.Contains(gt.Logs(), "team rotating identities") && strings.Contains(gt.Logs(), `"team":"rot"`)
	})
	produce(t, s.k, batch(3000, 4000)...)
	routed("every record routed")
	oneWindow := time.Now().Truncate(time.Minute).Equal(window)
	// From then on its records go to overflow, saying why.
	var ovfRot, accOK, ovfHot int
	for _, r := range s.k.ReadAll(t, nil, s.n.Acc, s.n.Ovf) {
		reason := ""
		for _, h := range r.Headers {
			if h.Key == "gate-overflow-reason" {
				reason = string(h.Value)
			}
		}
		v := string(r.Value)
		switch {
		case r.Topic == s.n.Ovf && strings.Contains(v, `"rot"`) && reason == "key_cardinality":
			ovfRot++
		case r.Topic == s.n.Acc && strings.Contains(v, `"user-`):
			accOK++
		case r.Topic == s.n.Ovf && strings.Contains(v, `"hot"`) && reason == "rate_limited":
			ovfHot++
		}
	}
	wantHot := ovfHot == 500
	switch {
	case !oneWindow:
		// A slow run crossed the minute: the divert guarantee, at least 90 % of the excess.
		t.Logf("the records were routed across a minute's turn: %d of the runaway user's 500 over its limit diverted", ovfHot)
		wantHot = ovfHot >= 450 && ovfHot <= 500
	case strings.Contains(gt.Logs(), "redis pipeline failed"):
		// A tick Redis did not answer in time (a loaded machine: 250 ms): the team's view
		// is this gate's own rebuild until the next read, and a few records more or fewer
		// may be diverted (502 were seen once, a read timing out in a loaded CI run).
		t.Logf("a tick failed as the records were routed: %d of the runaway user's 500 over its limit diverted", ovfHot)
		wantHot = ovfHot >= 490 && ovfHot <= 510
	}
	if ovfRot < 1000 || accOK != 1000 || !wantHot {
		t.Errorf("rotating team's records in overflow with key_cardinality: %d, want its last 1,000 at least; steady users' accepted %d of 1,000; the runaway user's diverted %d, want the 500 over its limit",
			ovfRot, accOK, ovfHot)
	}
	opt, err := redis.ParseURL(s.rurl)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	keys, err := rc.Keys(context.Background(), s.n.Prefix+":rule:team-user:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	hot := false
	for _, k := range keys {
		if strings.Contains(k, ":rot:") {
			t.Errorf("Redis holds %s: a rotating team's key under the floor", k)
		}
		hot = hot || strings.Contains(k, ":ok:hot:")
	}
	if !hot {
		t.Errorf("Redis keys of the user rule %v: want the runaway user's counter", keys)
	}
	code, body := gt.Get(t, "/metrics")
	if code != 200 || !strings.Contains(body, `gate_limiter_rotations_detected_total{limit="1m0s",rule="team-user"} 1`) {
		t.Errorf("/metrics: rotations detected not 1:\n%s", grepLines(body, "gate_limiter_rotation"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
