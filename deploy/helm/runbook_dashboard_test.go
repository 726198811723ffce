package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboardRows returns the dashboard's rows, by title, each with the metric names its
// panels query (a histogram's by its own name as well as its _bucket, _sum or _count) and
// its panels' titles.
func dashboardRows(t *testing.T) (metrics map[string]map[string]bool, titles map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "grafana", "gate-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		Panels []struct {
			panel
			Panels []panel `json:"panels"` // a collapsed row's
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	metrics, titles = map[string]map[string]bool{}, map[string][]string{}
	row := ""
	add := func(p panel) {
		titles[row] = append(titles[row], p.Title)
		for _, tg := range p.Targets {
			names, err := metricNames(grafanaVar.ReplaceAllString(tg.Expr, "5m"))
			if err != nil {
				t.Fatalf("panel %q: %v", p.Title, err)
			}
			for _, n := range names {
				metrics[row][n] = true
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(n, suffix); ok {
						metrics[row][base] = true
					}
				}
			}
		}
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			row = p.Title
			metrics[row] = map[string]bool{}
			for _, sub := range p.Panels {
				add(sub)
			}
			continue
		}
		if metrics[row] == nil {
			metrics[row] = map[string]bool{}
		}
		add(p.panel)
	}
	return metrics, titles
}

var (
	runbookRow   = regexp.MustCompile(`(?i)the dashboard's ([\w-]+) row`)
	runbookPanel = regexp.MustCompile(`(?i)the dashboard's "([^"]+)" panel`)
	docMetric    = regexp.MustCompile("`(gate_[a-z0-9_]*[a-z0-9])(?:\\{[^`]*\\})?`")
)

// TestRunbookDashboardSteps: a runbook entry that sends the on-call to a row of the
// dashboard ("Find which, with the dashboard's Kafka row: ...") names the metrics that
// tell its causes apart; each must be on a panel of that row, and a panel it names must
// exist. Before, the lag entry's broker throttling (gate_broker_throttled_seconds_total),
// fetching held by failing commits (gate_fetch_held_by_commits) and outcome rows awaiting
// a retry (gate_retrying_outcome_rows), and the slow tick entry's teams per pipeline
// (gate_limiter_pipeline_size) and reads put off (gate_limiter_reads_skipped_total), were
// on no panel: the row showed nothing of those causes.
func TestRunbookDashboardSteps(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	metrics, titles := dashboardRows(t)
	_, runbook, ok := strings.Cut(string(b), "\n## Runbook\n")
	if !ok {
		t.Fatal("docs/operations.md has no ## Runbook")
	}
	runbook, _, _ = strings.Cut(runbook, "\n## ")
	rows, panels := 0, 0
	for _, entry := range strings.Split(runbook, "\n### ")[1:] {
		heading, _, _ := strings.Cut(entry, "\n")
		text := strings.Join(strings.Fields(entry), " ") // a phrase may wrap over lines
		for _, m := range runbookPanel.FindAllStringSubmatch(text, -1) {
			panels++
			found := false
			for _, ts := range titles {
				for _, title := range ts {
					found = found || strings.HasPrefix(strings.ToLower(title), strings.ToLower(m[1]))
				}
			}
			if !found {
				t.Errorf("runbook %q: the dashboard has no panel %q", heading, m[1])
			}
		}
		// The rows the entry sends the reader to, and the metrics it names from the first on.
		locs := runbookRow.FindAllStringSubmatchIndex(text, -1)
		if locs == nil {
			continue
		}
		rows++
		var named, rowNames []string
		for _, loc := range locs {
			name := text[loc[2]:loc[3]]
			rowNames = append(rowNames, name)
			row := ""
			for r := range metrics {
				if strings.HasPrefix(strings.ToLower(r), strings.ToLower(name)) {
					row = r
				}
			}
			if row == "" {
				t.Errorf("runbook %q: the dashboard has no %s row", heading, name)
				continue
			}
			named = append(named, row)
		}
		for _, m := range docMetric.FindAllStringSubmatch(text[locs[0][0]:], -1) {
			shown := false
			for _, row := range named {
				shown = shown || metrics[row][m[1]]
			}
			if !shown {
				t.Errorf("runbook %q finds the cause with the dashboard's %s row, but no panel there shows %s",
					heading, strings.Join(rowNames, " and "), m[1])
			}
		}
	}
	if rows < 2 || panels < 2 {
		t.Fatalf("found %d runbook steps naming a dashboard row and %d naming a panel: is the runbook's wording changed?", rows, panels)
	}
}
