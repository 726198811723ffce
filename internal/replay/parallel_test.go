package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// manyTeams is ten minutes of 60 teams at rates from far under to three times their
// limits, some with a user sending most of their records, and a bad record a minute: enough
// keys for every worker to get some.
func manyTeams() []*kgo.Record {
	var recs []*kgo.Record
	for m := range 10 {
		base := time.Duration(m) * time.Minute
		for team := range 60 {
			n := 20 + team*5
			if team%7 == 3 && m >= 2 && m <= 6 {
				n *= 3
			}
			for i := range n {
				user := fmt.Sprint("u", i%(1+team%5))
				if team%4 == 1 && i%2 == 0 {
					user = "bot"
				}
				recs = append(recs, event(fmt.Sprint("t", team), user, base+time.Duration(i)*time.Minute/time.Duration(n)+time.Duration(team)*time.Millisecond))
			}
		}
		recs = append(recs, &kgo.Record{Topic: "events", Value: []byte("not json"), Timestamp: start.Add(base + 30*time.Second)})
	}
	for _, r := range recs {
		r.Timestamp = r.Timestamp.Truncate(time.Millisecond)
	}
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	return recs
}

// TestWorkersReportAsOne: routed by several workers, a replay reports byte for byte what
// one goroutine does, on either clock, with rules and without, one candidate or two.
// Under the race detector, which makes each replay some 17 times slower (116 s against 7
// in all), only the two candidates on three workers: the workers' concurrency is the
// same code; make test-norace runs the whole of it.
func TestWorkersReportAsOne(t *testing.T) {
	const userRules = `
rules:
- name: user
  key: json:team_id+distinct_id
  limits: [1m:60]
  action: overflow
- name: team
  key: json:team_id
  limits: [1m:150]
  action: tag
- name: team-shadow
  key: json:team_id
  limits: [1m:100, 5m:300]
  shadow: true
`
	recs := manyTeams()
	for _, clk := range []string{"wall", "event"} {
		for _, tc := range []struct {
			name  string
			rules []string // "" for the GATE_* limits
		}{{"limits", []string{""}}, {"rules", []string{userRules}}, {"compare", []string{userRules, ""}}} {
			t.Run(clk+"/"+tc.name, func(t *testing.T) {
				workers := []int{2, 3, 4}
				if raceEnabled {
					if len(tc.rules) < 2 {
						t.Skip("under the race detector, the two candidates' run alone (make test-norace runs this)")
					}
					workers = []int{3}
				}
				cfg := testConfig(t, map[string]string{"GATE_CLOCK": clk, "GATE_WINDOW": "1m", "GATE_THRESHOLD": "200", "GATE_LIMIT_MODE": "divert"})
				cands := func() []*Candidate {
					var cands []*Candidate
					for i, y := range tc.rules {
						var c *Candidate
						var err error
						if y == "" {
							c, err = NewCandidate(fmt.Sprint("c", i), cfg, nil)
						} else {
							c, err = NewCandidate(fmt.Sprint("c", i), cfg, testRules(t, cfg, y))
						}
						if err != nil {
							t.Fatal(err)
						}
						cands = append(cands, c)
					}
					return cands
				}
				r := sameOnWorkers(t, cfg.TickInterval, recs, cands, workers...)
				if c := r.Candidates[0]; c.Total.Limited+c.Total.Tagged == 0 || len(c.Keys) < 5 || c.Total.DeadLetter != 10 {
					t.Errorf("the traffic limits too little to compare: %+v, %d keys", c.Total, len(c.Keys))
				}
			})
		}
	}
}

// Rules whose keys share no field are routed by one worker: a record's keys could then
// be on two workers.
func TestWorkersNeedASharedMember(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_CLOCK": "event"})
	set := testRules(t, cfg, `
rules:
- name: team
  key: json:team_id
  limits: [1m:100]
  action: overflow
- name: events
  key: json:event
  limits: [1m:1000]
  action: overflow
`)
	c, err := NewCandidate("c", cfg, set)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(time.Second, c)
	if err != nil {
		t.Fatal(err)
	}
	if n, by := e.Workers(4); n != 1 || by != "" {
		t.Fatalf("Workers(4) = %d, %q; want 1, none", n, by)
	}
	// The file-less gate's composite key is shared by its one rule: the first field.
	cfg = testConfig(t, map[string]string{"GATE_KEY_FROM": "json:distinct_id+team_id"})
	if c, err = NewCandidate("c", cfg, nil); err != nil {
		t.Fatal(err)
	}
	if e, err = NewEngine(time.Second, c); err != nil {
		t.Fatal(err)
	}
	if n, by := e.Workers(3); n != 3 || by != "json:distinct_id" {
		t.Fatalf("Workers(3) = %d, %q; want 3 by json:distinct_id", n, by)
	}
	e.Report(1) // stops the workers
}

// A minute whose rows are under the budget is kept whole on workers too, though all of a
// team's rows are on one worker: each worker has the whole budget, not a share.
func TestWorkersKeepTheRowBudget(t *testing.T) {
	var recs []*kgo.Record
	for m := range 3 {
		for i := range 300 { // one team, 300 users a minute, each over its limit
			for k := range 2 {
				recs = append(recs, event("big", fmt.Sprint("u", i), time.Duration(m)*time.Minute+time.Duration(i)*100*time.Millisecond+time.Duration(k)*time.Millisecond))
			}
		}
		for team := range 20 {
			recs = append(recs, event(fmt.Sprint("s", team), "u", time.Duration(m)*time.Minute+time.Duration(team)*time.Second))
		}
	}
	for _, r := range recs {
		r.Timestamp = r.Timestamp.Truncate(time.Millisecond)
	}
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	cfg := testConfig(t, map[string]string{"GATE_CLOCK": "event"})
	set := testRules(t, cfg, "rules:\n- name: user\n  key: json:team_id+distinct_id\n  limits: [1m:1]\n  action: overflow\n")
	r := sameOnWorkers(t, cfg.TickInterval, recs, func() []*Candidate {
		c, err := NewCandidate("c", cfg, set)
		if err != nil {
			t.Fatal(err)
		}
		c.rows = 400 // 321 rows a minute: one goroutine folds nothing
		return []*Candidate{c}
	}, 2, 3, 5)
	if c := r.Candidates[0]; c.Folded != 0 || c.KeysAffected < 300 {
		t.Errorf("one goroutine: %d records folded, %d keys affected; want none folded, the 300 users among them", c.Folded, c.KeysAffected)
	}
}

// sameOnWorkers replays recs through the candidates cands makes, ticking every tick, on
// one worker, then on each of ns, and fails where a report differs from one's. It returns one's report.
func sameOnWorkers(t *testing.T, tick time.Duration, recs []*kgo.Record, cands func() []*Candidate, ns ...int) *Report {
	t.Helper()
	report := func(workers int) ([]byte, *Report) {
		e, err := NewEngine(tick, cands()...)
		if err != nil {
			t.Fatal(err)
		}
		if n, by := e.Workers(workers); n != workers {
			t.Fatalf("Workers(%d) = %d, %q", workers, n, by)
		}
		for _, r := range recs {
			e.Route(r)
		}
		rep := e.Report(1000)
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(rep); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), rep
	}
	one, rep := report(1)
	for _, n := range ns {
		if got, _ := report(n); !bytes.Equal(got, one) {
			t.Errorf("%d workers report otherwise than one:\n%s\n%s", n, got, one)
		}
	}
	return rep
}

// Close stops the workers of a replay that ends without a report, and does nothing after
// one.
func TestEngineCloseStopsWorkers(t *testing.T) {
	cfg := testConfig(t, map[string]string{"GATE_CLOCK": "event"})
	c, err := NewCandidate("c", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(time.Second, c)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := e.Workers(3); n != 3 || len(e.workers) != 3 {
		t.Fatalf("Workers(3) = %d, %d workers: no workers to stop, the test tests nothing", n, len(e.workers))
	}
	ws := slices.Clone(e.workers)
	for _, r := range traffic()[:100] {
		e.Route(r)
	}
	e.Close()
	for i, w := range ws {
		select {
		case <-w.done:
		default:
			t.Errorf("worker %d still running after Close", i)
		}
	}
	e.Close() // again: nothing to stop
}

// One team spelled several ways in its JSON ("ab", "a\u0062", 1, 1.0, "1", 10e-1...):
// dealing and routing read the field alike, so the report is the same byte for byte on
// any number of workers, on either clock, with two sets compared.
func TestWorkersTeamSpelledSeveralWays(t *testing.T) {
	var recs []*kgo.Record
	forms := []string{`"ab"`, `"a\u0062"`, `"\u0061b"`, `"a\/b"`, `"a/b"`, `1`, `1.0`, `"1"`, `10e-1`}
	for i := range 600 {
		v := fmt.Sprintf(`{"team_id":%s,"distinct_id":"u%d"}`, forms[i%len(forms)], i%3)
		recs = append(recs, &kgo.Record{Topic: "events", Value: []byte(v), Timestamp: start.Add(time.Duration(i) * 50 * time.Millisecond)})
	}
	for _, clk := range []string{"event", "wall"} {
		cfg := testConfig(t, map[string]string{"GATE_CLOCK": clk, "GATE_WINDOW": "1m", "GATE_THRESHOLD": "20", "GATE_LIMIT_MODE": "divert"})
		set := testRules(t, cfg, "rules:\n- name: user\n  key: json:team_id+distinct_id\n  limits: [1m:30]\n  action: overflow\n- name: team\n  key: json:team_id\n  limits: [1m:50]\n  action: overflow\n")
		r := sameOnWorkers(t, cfg.TickInterval, recs, func() []*Candidate {
			c, err := NewCandidate("c", cfg, set)
			if err != nil {
				t.Fatal(err)
			}
			c2, err := NewCandidate("d", cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			return []*Candidate{c, c2}
		}, 2, 3, 4, 5, 7)
		if len(r.Candidates[0].Keys) == 0 {
			t.Errorf("%s clock: no key limited; the test wants some", clk)
		}
	}
}
