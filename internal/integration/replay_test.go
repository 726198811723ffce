package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/replay"
)

// TestReplayIsFaithfulOnApacheKafka: a fleet of three gates routes live traffic on
// Apache Kafka with a shadow rule beside the enforced one; then `gate replay` runs the
// same rules over the same input. Per key, the records replay finds over the shadow rule
// agree within 1 % with the gates' outcome rows, and in all with the gates'
// gate_rule_records_total{result="over"}; what the enforced rule overflowed agrees too.
// The replay leaves the gates' group and every topic as they were.
func TestReplayIsFaithfulOnApacheKafka(t *testing.T) {
	t.Parallel()
	// On each clock, the gates' and replay's (GATE_CLOCK): on the wall clock the gates
	// judge a record when they route it and replay at its record time, and both hold.
	for _, clk := range []string{"event", "wall"} {
		t.Run(clk, func(t *testing.T) {
			t.Parallel()
			replayIsFaithful(t, clk)
		})
	}
}

func replayIsFaithful(t *testing.T, clk string) {
	s := newScenario(t, kafkaOpts{}, 6, 3)
	outTopic := s.n.Prefix + ".outcomes"
	s.k.CreateTopic(t, outTopic, 3)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	// The hot team is over both (3,300 records a window against 1,000 and 20); the 20
	// others (about 320 a window each) over the shadow rule only. The shadow rule comes
	// first, so it judges every record: after one the enforced rule sent away it would
	// not be checked, and its count of the hot team would hang on where, a tick late,
	// the live fleet crossed the other rule's threshold (1.4 to 1.9 % on a loaded
	// machine), not on its own decisions.
	if err := os.WriteFile(rulesFile, []byte(`rules:
- name: would-be
  key: json:team_id
  limits: [10s:20]
  mode: divert
  shadow: true
- name: team
  key: json:team_id
  limits: [10s:1000]
  mode: divert
  action: overflow
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kv := []string{"GATE_RULES_FILE", rulesFile, "GATE_OUTCOMES_TOPIC", outTopic, "GATE_OUTCOMES_INTERVAL", "10s", "GATE_CLOCK", clk}
	vars := gateVarsFor(s, kv...)
	delete(vars, "GATE_WINDOW") // each rule says its own
	delete(vars, "GATE_THRESHOLD")
	var gates []*faulttest.Gate
	for _, name := range []string{"a", "b", "c"} {
		gates = append(gates, faulttest.StartGate(t, s.bin, name, vars))
	}
	s.waitMembers(3) // before the load: no rebalance routes a record twice
	stop := s.produceLoad()
	s.waitOutputsGrow(45_000, "three gates") // long enough that where each key first crossed weighs little
	stop()
	s.waitDrained()
	liveOver, failedTicks := 0.0, 0.0
	for _, g := range gates {
		_, body := g.Get(t, "/metrics")
		liveOver += metricValue(body, "gate_rule_records_total", `result="over"`, `rule="would-be"`)
		failedTicks += metricValue(body, "gate_limiter_errors_total")
	}
	for _, g := range gates {
		g.Term(t, time.Minute)
	}
	var rows []outcome.Row
	read, err := outcome.Scan(t.Context(), outTopic, time.Now().Add(-time.Hour), "", func(r *outcome.Row) { rows = append(rows, *r) }, kgo.SeedBrokers(s.k.Brokers))
	if err != nil || read.Skipped > 0 {
		t.Fatalf("reading the outcomes: %v (%d records skipped)", err, read.Skipped)
	}
	live := map[string]map[string]int64{} // rule → key → records over (shadow) or overflowed
	for _, r := range rows {
		if r.Outcome != "shadow_over" && r.Outcome != "overflow" {
			continue
		}
		if live[r.Rule] == nil {
			live[r.Rule] = map[string]int64{}
		}
		live[r.Rule][r.Key] += r.Records
	}
	ends := s.k.Ends(t, s.n.In, s.n.Acc, s.n.Ovf, s.n.Dlq, outTopic)
	committed := s.k.Committed(t, s.n.Group, s.n.In)

	// The replay, as an operator runs it, with the gates' settings.
	var stdout, stderr bytes.Buffer
	html := filepath.Join(t.TempDir(), "report.html")
	cmd := exec.CommandContext(t.Context(), s.bin, "replay", "-rules", rulesFile, "-from", "1h", "-top", "100", "-json", "-html", html, "-workers", "3")
	cmd.Env = faulttest.Env(vars)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gate replay: %v\n%s", err, stderr.String())
	}
	var rep replay.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("gate replay -json: %v\n%s", err, stdout.String())
	}
	// Deterministic: the same range again, on one worker, the same report byte for byte.
	first := slices.Clone(stdout.Bytes())
	stdout.Reset()
	offsets := make([]string, 0, len(rep.Partitions))
	for _, p := range rep.Partitions {
		offsets = append(offsets, fmt.Sprintf("%d:%d-%d", p.Partition, p.Start, p.End))
	}
	again := exec.CommandContext(t.Context(), s.bin, "replay", "-rules", rulesFile, "-offsets", strings.Join(offsets, ","), "-top", "100", "-json", "-workers", "1")
	again.Env, again.Stdout, again.Stderr = cmd.Env, &stdout, &stderr
	if err := again.Run(); err != nil {
		t.Fatalf("gate replay -offsets: %v\n%s", err, stderr.String())
	}
	if !bytes.Equal(first, stdout.Bytes()) {
		t.Errorf("two replays of the same range differ:\n%s\n%s", first, stdout.Bytes())
	}
	if rep.Records != sum(ends[s.n.In]) {
		t.Errorf("replay read %d records, the input holds %d", rep.Records, sum(ends[s.n.In]))
	}
	got := map[string]map[string]int64{}
	c := rep.Candidates[0]
	for _, k := range c.Keys {
		if got[k.Rule] == nil {
			got[k.Rule] = map[string]int64{}
		}
		got[k.Rule][k.Key] += k.ShadowOver + k.Limited
	}
	if len(live["would-be"]) < 21 || live["team"]["hot"] == 0 {
		t.Fatalf("live outcomes %v: want every team over the shadow rule and the hot team overflowing", live)
	}
	// Within 1 %, but what the enforced rule overflowed: the live fleet learns the hot
	// team's fleet-wide count at its ticks, and a tick that runs late (a loaded machine)
	// lets more through before the team is diverted, where replay ticks on time. One tick
	// (100 ms) late in a window moves some 33 of the hot team's 3,300 records, 1.4 % of the
	// 2,300 it overflows a window: 1 % is less than a tick, and a CI run, the limit package
	// beside it, failed at 2.2 % (live under replay, as late ticks make it). Two ticks late
	// a window are allowed there (2.9 %), and a tick more for each of the gates' failed
	// pipelines (gate_limiter_errors_total: a Redis read timing out on a loaded machine,
	// the counts kept for the next tick): a CI run with five failed 2.97 %. More, or live
	// over replay, is a fault.
	const hotPerTick = 33 // the hot team's records a tick: 3,300 a 10 s window, 100 ms ticks
	var worst float64
	for rule, keys := range live {
		for key, n := range keys {
			d := math.Abs(float64(got[rule][key]-n)) / float64(n)
			worst = max(worst, d)
			limit := 0.01
			if rule == "team" && n <= got[rule][key] {
				limit = 0.029 + failedTicks*hotPerTick/float64(n)
			}
			if d > limit {
				t.Errorf("rule %s key %s: replay %d, live %d (%.2f %% apart, %.2f %% allowed)", rule, key, got[rule][key], n, 100*d, 100*limit)
			}
		}
	}
	if d := math.Abs(float64(c.Total.ShadowOver)-liveOver) / liveOver; d > 0.01 {
		t.Errorf("replay %d over the shadow rule, gate_rule_records_total %v (%.2f %% apart)", c.Total.ShadowOver, liveOver, 100*d)
	}
	if page, err := os.ReadFile(html); err != nil || !bytes.Contains(page, []byte("<svg")) {
		t.Errorf("the report page: %v, %d bytes without a chart", err, len(page))
	}
	// Nothing moved: the replay joined no group and wrote to no topic.
	if after := s.k.Committed(t, s.n.Group, s.n.In); after != committed {
		t.Errorf("the gates' group committed %d before the replay, %d after", committed, after)
	}
	for topic, ps := range s.k.Ends(t, s.n.In, s.n.Acc, s.n.Ovf, s.n.Dlq, outTopic) {
		if sum(ps) != sum(ends[topic]) {
			t.Errorf("%s grew from %d to %d records during the replay", topic, sum(ends[topic]), sum(ps))
		}
	}
	t.Logf("FIGURES replay_faithful clock=%s records=%d keys=%d worst_key_gap=%.4f shadow_over replay=%d live_metric=%.0f failed_ticks=%.0f", clk, rep.Records, len(live["would-be"]), worst, c.Total.ShadowOver, liveOver, failedTicks)
}

// metricValue sums the samples of name whose labels include every one of labels.
func metricValue(body, name string, labels ...string) float64 {
	var total float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += v
		}
	}
	return total
}
