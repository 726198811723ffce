package helm

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// panelQueries returns the queries of the dashboard's panel titled title, as Grafana
// sends them with every job and pod selected and a rate interval of 5m.
func panelQueries(t *testing.T, title string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "grafana", "gate-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"` // a collapsed row's
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	var walk func([]panel) []string
	walk = func(ps []panel) []string {
		for _, p := range ps {
			if p.Title == title {
				var qs []string
				for _, tg := range p.Targets {
					q := grafanaVar.ReplaceAllString(tg.Expr, "5m")
					qs = append(qs, strings.NewReplacer(`"$job"`, `".*"`, `"$pod"`, `".*"`).Replace(q))
				}
				return qs
			}
			if qs := walk(p.Panels); qs != nil {
				return qs
			}
		}
		return nil
	}
	qs := walk(dash.Panels)
	if len(qs) == 0 {
		t.Fatalf("no panel %q with queries in the dashboard", title)
	}
	return qs
}

// dashPod is a gate as the dashboard's queries select it.
const dashPod = `job="gate", instance="10.0.0.7:8080", pod="gate-0"`

// TestRecordsPanelShowsRuleTopics: "Records by route and reason" says it shows every
// record the gates route; a record a rule sends to its own topic (action topic:NAME) is
// counted in gate_rule_topic_records_total, not gate_records_total. Before, the panel
// read gate_records_total alone: a rule taking 600 of 1000 records a minute to its topic
// showed 400 a minute routed, as if the rest were lost.
func TestRecordsPanelShowsRuleTopics(t *testing.T) {
	load := "gate_records_total{" + dashPod + `, route="accepted", reason="allowed"} 0+400x30` + "\n" +
		"gate_rule_topic_records_total{" + dashPod + `, rule="merges", reason="rate_limited"} 0+600x30` + "\n" +
		// a record the router sent to overflow as the rule's topic was missing: counted
		// there as well as in gate_records_total
		"gate_records_total{" + dashPod + `, route="overflow", reason="rate_limited"} 0+10x30` + "\n" +
		"gate_rule_topic_records_total{" + dashPod + `, rule="merges", reason="topic_missing"} 0+10x30`
	total := 0.0
	for _, q := range panelQueries(t, "Records by route and reason (records/s)") {
		for _, s := range queryAt(t, q, load, 25)[0] {
			total += s.F
		}
	}
	if want := 1010.0 / 60; math.Abs(total-want) > 0.01 {
		t.Errorf("Records by route and reason adds up to %.2f records/s, want %.2f: every record routed, once", total, want)
	}
}

// TestOverridesAgePanelPerRule: with rules each rule reads its own live overrides hash,
// and one whose hash cannot be used goes stale while the others refresh (GateOverridesStale
// fires per rule). Before, "Since the last good read, by gate" took the latest read of any
// rule: the on-call the alert sent there saw a minute's age while a rule had read nothing
// for twenty.
func TestOverridesAgePanelPerRule(t *testing.T) {
	// Minute m's sample is a read at minute m (fresh) or the last read at minute 4 (stale);
	// evaluated at minute 25, in seconds since the start of the load.
	fresh, stale := "", ""
	for m := range 31 {
		fresh += " " + strconv.Itoa(m*60)
		stale += " " + strconv.Itoa(min(m, 4)*60)
	}
	load := "gate_overrides_last_refresh_timestamp_seconds{" + dashPod + `, rule="teams"}` + fresh + "\n" +
		"gate_overrides_last_refresh_timestamp_seconds{" + dashPod + `, rule="users"}` + stale
	oldest := 0.0
	for _, s := range queryAt(t, panelQueries(t, "Since the last good read, by gate")[0], load, 25)[0] {
		oldest = max(oldest, s.F)
	}
	if want := float64(21 * 60); oldest != want {
		t.Errorf("Since the last good read shows at most %.0fs, want %.0fs: rule users last read at minute 4", oldest, want)
	}
}

// TestOverridesInForcePanelPerRule: with rules each rule has its own overrides (its
// thresholds with its live hash over it), gate_overrides_loaded and gate_overrides_live
// one series a rule. Before, "Overrides in force and live teams, by gate" took the max
// over the rules: a rule whose live hash was emptied (3 overrides left) showed as the
// other's 50, unchanged.
func TestOverridesInForcePanelPerRule(t *testing.T) {
	load := "gate_overrides_loaded{" + dashPod + `, rule="teams"} 50x30` + "\n" +
		"gate_overrides_loaded{" + dashPod + `, rule="users"} 3x30` + "\n" +
		"gate_overrides_live{" + dashPod + `, rule="teams"} 40x30` + "\n" +
		"gate_overrides_live{" + dashPod + `, rule="users"} 0x30`
	for i, want := range [][]float64{{3, 50}, {0, 40}} {
		var got []float64
		for _, s := range queryAt(t, panelQueries(t, "Overrides in force and live teams, by gate")[i], load, 25)[0] {
			got = append(got, s.F)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("Overrides in force and live teams, query %d, shows %v, want %v: one series a rule", i, got, want)
		}
	}
}

// TestDeadLetterSharePanelCountsEachRecordOnce: a record the broker refused on its output
// topic is counted twice in gate_records_total, where it was first routed and as
// dead_letter/rejected; "Dead letter share by reason" divides by the records routed, each
// once. Before, the refused records were in the denominator twice: an accepted topic
// refusing every record (its max.message.bytes lowered) read as 50 % dead-lettered, not
// 100 %.
func TestDeadLetterSharePanelCountsEachRecordOnce(t *testing.T) {
	load := "gate_records_total{" + dashPod + `, route="accepted", reason="allowed"} 0+600x30` + "\n" +
		"gate_records_total{" + dashPod + `, route="dead_letter", reason="rejected"} 0+600x30` + "\n" +
		"gate_records_total{" + dashPod + `, route="dead_letter", reason="not_json"} 0+0x30`
	share := 0.0
	for _, s := range queryAt(t, panelQueries(t, "Dead letter share by reason")[0], load, 25)[0] {
		share += s.F
	}
	if math.Abs(share-1) > 0.001 {
		t.Errorf("Dead letter share by reason adds up to %.3f with every record refused and dead-lettered, want 1", share)
	}
}

// TestEveryAlertMetricIsOnAPanel: every gate metric an alert fires on is on some panel of
// the dashboard, so that the on-call its runbook sends there sees which gate and since
// when. GatePartitionStopped (critical) sent them to a dashboard that never showed
// gate_partitions_stopped, and seven other alerts' metrics were on no panel (a review).
func TestEveryAlertMetricIsOnAPanel(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "grafana", "gate-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash panel
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				// Grafana's variables, as panelQueries gives them, so that the parser takes it.
				e := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$pod", ".*").Replace(tg.Expr)
				names, err := metricNames(e)
				if err != nil {
					t.Fatalf("panel query %q: %v", tg.Expr, err)
				}
				for _, n := range names {
					shown[strings.TrimSuffix(n, "_bucket")] = true
				}
			}
		}
	}
	walk(dash.Panels)
	_, spec := promRule(t, mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true}")))
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(spec, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names, err := metricNames(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range names {
				if strings.HasPrefix(m, "gate_") {
					n++
					if !shown[strings.TrimSuffix(m, "_bucket")] {
						t.Errorf("%s fires on %s, which no dashboard panel shows", r.Alert, m)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no alert read a gate metric: nothing checked")
	}
}
