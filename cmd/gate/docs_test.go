package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/endpoints"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/replay"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

// docFiles are the texts a user reads for figures and formulas: where the same figure is
// stated in several, the tests below hold each statement to the code.
var docFiles = []string{
	"README.md", "docs/configuration.md", "docs/design.md", "docs/operations.md", "docs/reliability.md", "docs/rules.md",
	"docs/demo.md", "docs/development.md", "docs/outcomes.md",
	"deploy/helm/capture-gate/README.md", "deploy/helm/capture-gate/values.yaml", "docker-compose.yml",
	// the variables' descriptions, which gate env prints
	"internal/config/kafka.go", "internal/config/limits.go", "internal/config/redis.go", "internal/config/process.go",
}

// docSentence is one sentence of a doc, with where it is.
type docSentence struct{ where, text string }

// docSentences splits every doc file into sentences, paragraph lines joined and comment
// markers dropped, so that a statement wrapped over lines is matched whole.
func docSentences(t *testing.T) []docSentence {
	t.Helper()
	var out []docSentence
	comment := regexp.MustCompile(`(?m)^\s*(#|//)( --)?\s?`)
	for _, f := range docFiles {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		for i, para := range regexp.MustCompile(`\n\s*\n`).Split(string(b), -1) {
			para = strings.Join(strings.Fields(comment.ReplaceAllString(para, "")), " ")
			for _, s := range regexp.MustCompile(`[.;]\s`).Split(para, -1) {
				out = append(out, docSentence{where: f + " paragraph " + strconv.Itoa(i+1), text: s})
			}
		}
	}
	return out
}

// TestDocsStateTheShutdownBound: every statement of the shutdown bound or of the grace
// period derived from it (the chart's terminationGracePeriodSeconds, compose's
// stop_grace_period: the bound + 5 s) gives the figure the code has with the defaults,
// and a formula's constant adds up to the figure it states.
func TestDocsStateTheShutdownBound(t *testing.T) {
	cfg, err := config.Load(func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	bound := cfg.ShutdownBound()
	grace := bound + 5*time.Second
	secs := func(s string) time.Duration { n, _ := strconv.Atoi(s); return time.Duration(n) * time.Second }
	// "... + 2 × kafka.revokeTimeout + 15s (55s by default)"
	formula := regexp.MustCompile("2 (?:x|×) `?[A-Za-z_.]*(?:revoke|REVOKE)[A-Za-z_]*`? \\+ (\\d+) ?s? \\((\\d+) ?s? (?:by default|with the defaults)\\)")
	figure := regexp.MustCompile(`\((\d+) ?s? (?:by default|with the defaults)\)|(\d+) ?s (?:by default|with the defaults)`)
	about := regexp.MustCompile(`(?i)grace|shutdown.bound|worst.case shutdown|whole shutdown`)
	n := 0
	for _, s := range docSentences(t) {
		if !about.MatchString(s.text) {
			continue
		}
		for _, m := range formula.FindAllStringSubmatch(s.text, -1) {
			n++
			if sum, stated := cfg.ShutdownTimeout+2*cfg.RevokeTimeout+secs(m[1]), secs(m[2]); sum != stated {
				t.Errorf("%s: %q: %v + 2 × %v + %ss is %v, not the %v it says", s.where, m[0], cfg.ShutdownTimeout, cfg.RevokeTimeout, m[1], sum, stated)
			}
		}
		for _, m := range figure.FindAllStringSubmatch(s.text, -1) {
			n++
			if d := secs(m[1] + m[2]); d != bound && d != grace {
				t.Errorf("%s: %q: the shutdown bound is %v by default and the grace period %v", s.where, m[0], bound, grace)
			}
		}
	}
	if n < 5 {
		t.Errorf("found %d statements of the shutdown bound; has their wording changed?", n)
	}
}

// TestDocsStateKeyLifetimes: every statement of how long Redis keys live gives the code's
// margin on counters (2 × the window + KeyTTLMargin) and profiles' life (ProfileTTL), the
// figures an operator sizes Redis by after an oom.
func TestDocsStateKeyLifetimes(t *testing.T) {
	margin := regexp.MustCompile(`2 ?(?:×|x) (?:the|its own|the limit's) window[^.]{0,60}?(?:\+|plus) (\d+) ?s\b`)
	profile := regexp.MustCompile(`(?i)profile[^.]{0,60}?\b(\d+) days`)
	var nm, np int
	for _, s := range docSentences(t) {
		for _, m := range margin.FindAllStringSubmatch(s.text, -1) {
			nm++
			if m[1] != strconv.Itoa(int(tick.KeyTTLMargin.Seconds())) {
				t.Errorf("%s: %q: counters get %v beyond 2 × the window", s.where, m[0], tick.KeyTTLMargin)
			}
		}
		for _, m := range profile.FindAllStringSubmatch(s.text, -1) {
			np++
			if m[1] != strconv.Itoa(int(tick.ProfileTTL.Hours()/24)) {
				t.Errorf("%s: %q: profiles live %v after their last fold", s.where, m[0], tick.ProfileTTL)
			}
		}
	}
	if nm < 3 || np < 3 {
		t.Errorf("found %d statements of the counters' margin and %d of the profiles' life; has their wording changed?", nm, np)
	}
}

// TestDocsStateTheRulesReload: every statement of how often a gate reads its rules file
// gives rules.DefaultReloadInterval, none says a change is put in use within a tick (it is
// put in use at the read that finds it, up to the interval after it reaches the file),
// and GATE_RULES_FILE's description says that a reloaded file naming a rule topic that
// does not exist is refused, as a bad one is.
func TestDocsStateTheRulesReload(t *testing.T) {
	every := regexp.MustCompile(`(?i)\b(?:reads? (?:it|the file|the rules file|GATE_RULES_FILE)(?: again)?|(?:read|re-read) again|re-read) every (\d+) ?s\b`)
	n := 0
	for _, s := range docSentences(t) {
		for _, m := range every.FindAllStringSubmatch(s.text, -1) {
			n++
			if m[1] != strconv.Itoa(int(rules.DefaultReloadInterval.Seconds())) {
				t.Errorf("%s: %q: a gate reads its rules file every %v", s.where, m[0], rules.DefaultReloadInterval)
			}
		}
		if strings.Contains(s.text, "put in use within a tick") {
			t.Errorf("%s: %q: a changed rules file is put in use at the read that finds it, every %v, not within a tick", s.where, s.text, rules.DefaultReloadInterval)
		}
	}
	if n < 3 {
		t.Errorf("found %d statements of how often the rules file is read; has their wording changed?", n)
	}
	// A reload builds the router again with the rules, its metrics on their registry: a
	// statement that counters start again from 0 names every one the router registers,
	// not only the rules' own.
	reg := prometheus.NewRegistry()
	cfg, err := config.Load(func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clock.NewFake(time.Unix(0, 0)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := route.New(cfg.RouteConfig(), lim, reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("the router's metrics: %d, %v", len(mfs), err)
	}
	resets := 0
	for _, s := range docSentences(t) {
		if !regexp.MustCompile(`(?i)start(?:s|ing)? again from 0`).MatchString(s.text) {
			continue
		}
		resets++
		for _, mf := range mfs {
			if !strings.Contains(s.text, mf.GetName()) {
				t.Errorf("%s: %q: a reload registers the router's %s anew too, from 0", s.where, s.text, mf.GetName())
			}
		}
	}
	if resets == 0 {
		t.Error("found no statement of the counters a reload starts again from 0; has its wording changed?")
	}
	var env strings.Builder
	if err := config.WriteEnvTable(&env); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for line := range strings.Lines(env.String()) {
		if !strings.HasPrefix(line, "| `GATE_RULES_FILE` |") {
			continue
		}
		rows++
		if !regexp.MustCompile(`topic[^;]*does not exist[^;]*refused`).MatchString(line) {
			t.Errorf("GATE_RULES_FILE's description does not say that a reloaded file naming a topic that does not exist is refused:\n%s", line)
		}
	}
	if rows != 1 {
		t.Errorf("gate env has %d rows of GATE_RULES_FILE, want 1: its description is not checked", rows)
	}
}

// readmeMaxLines bounds the README: the page that takes a user from nothing to a routed
// record and to the docs, which say the rest.
const readmeMaxLines = 300

// TestReadmeIsAFirstPage: the README stays within readmeMaxLines lines and links every
// page of docs/.
func TestReadmeIsAFirstPage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail into docs/ and link it", n, readmeMaxLines)
	}
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v, %d files", err, len(docs))
	}
	for _, d := range docs {
		if link := "](docs/" + filepath.Base(d); !strings.Contains(readme, link) {
			t.Errorf("README.md does not link docs/%s", filepath.Base(d))
		}
	}
}

// TestDevelopmentLayoutNamesEveryDir: the layout in docs/development.md, which the README
// sends a reader to for where each part of the code is, names every directory of cmd/ and
// internal/.
func TestDevelopmentLayoutNamesEveryDir(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Layout\n.*?```\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/development.md has no ## Layout block")
	}
	named := map[string]bool{}
	for _, l := range strings.Split(string(m[1]), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			named[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	for _, parent := range []string{"cmd", "internal"} {
		entries, err := os.ReadDir(filepath.Join(root, parent))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() && !named[parent+"/"+e.Name()] {
				t.Errorf("docs/development.md's layout does not name %s/%s/", parent, e.Name())
			}
		}
	}
}

// TestDocsStateWhatEndsATransaction: no statement has a smaller GATE_MAX_POLL_RECORDS make
// an exactly-once transaction shorter (it takes polls for GATE_TRANSACTION_INTERVAL, the
// next poll routing into it), and every statement of the interval's bound gives the
// longest GATE_TRANSACTION_INTERVAL the gate takes.
func TestDocsStateWhatEndsATransaction(t *testing.T) {
	shorter := regexp.MustCompile("(?i)GATE_MAX_POLL_RECORDS`?[^;]*\\bso (?:that )?(?:each|every|a|the) transactions? (?:is|are|gets?) shorter")
	bound := regexp.MustCompile("GATE_TRANSACTION_INTERVAL`? \\(at most (\\d+) ?s\\b")
	n := 0
	for _, s := range docSentences(t) {
		if m := shorter.FindString(s.text); m != "" {
			t.Errorf("%s: %q: a transaction takes polls for GATE_TRANSACTION_INTERVAL, the next poll routing into it: a smaller poll does not end it sooner", s.where, m)
		}
		for _, m := range bound.FindAllStringSubmatch(s.text, -1) {
			n++
			secs, _ := strconv.Atoi(m[1])
			for _, c := range []struct {
				interval time.Duration
				ok       bool
			}{{time.Duration(secs) * time.Second, true}, {time.Duration(secs)*time.Second + time.Millisecond, false}} {
				_, err := config.Load(getenvFrom(map[string]string{"GATE_DELIVERY": "exactly-once", "GATE_TRANSACTION_INTERVAL": c.interval.String()}), nil)
				if (err == nil) != c.ok {
					t.Errorf("%s: %q: GATE_TRANSACTION_INTERVAL=%v loads with %v", s.where, m[0], c.interval, err)
				}
			}
		}
	}
	if n == 0 {
		t.Error("found no statement of the longest GATE_TRANSACTION_INTERVAL; has its wording changed?")
	}
}

// TestDocsStateTheReplayCharts: gate replay -html draws a chart for the first
// replay.MaxChartsPerSet keys of each set, not one per key (-top lists 20 by default):
// the docs and the flag's help say so, with the code's figure.
func TestDocsStateTheReplayCharts(t *testing.T) {
	sentences := append(docSentences(t), docSentence{where: "gate replay's -html help", text: replayFlags(new(replayOpts)).Lookup("html").Usage})
	perKey := regexp.MustCompile(`(?i)\ba chart (?:per|for each|for every) key\b`)
	figure := regexp.MustCompile(`(?i)chart for each of the (\d+) most affected keys`)
	n := 0
	for _, s := range sentences {
		if m := perKey.FindString(s.text); m != "" {
			t.Errorf("%s: %q: the page has charts for the first %d keys of each set only", s.where, m, replay.MaxChartsPerSet)
		}
		for _, m := range figure.FindAllStringSubmatch(s.text, -1) {
			n++
			if m[1] != strconv.Itoa(replay.MaxChartsPerSet) {
				t.Errorf("%s: %q: the page charts %d keys of each set", s.where, m[0], replay.MaxChartsPerSet)
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d statements of how many keys the replay page charts (docs/rules.md, the -html help); has their wording changed?", n)
	}
}

// TestDocsCurlTheTeamViewEscaped: the server decodes the team view's path before it looks
// the key up, so a composite key's % must be written %25 in a URL. Every documented curl
// of a key with an escape is asked of a real team view holding the docs' composite key,
// phc_x:user%3A1, and must find it.
func TestDocsCurlTheTeamViewEscaped(t *testing.T) {
	const key = "phc_x:user%3A1"
	t0 := time.Now()
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim.CheckAt(t0, key, 1)
	srv := httptest.NewServer(endpoints.NewMux(prometheus.NewRegistry(), nil, endpoints.NewTeamAPI(endpoints.GateJSON{}, endpoints.FixedRules(lim))))
	defer srv.Close()
	curl := regexp.MustCompile(`curl [^\n]*?/v1/teams/([^\s'"` + "`" + `]+)`)
	n := 0
	for _, f := range docFiles {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range curl.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(m[1], "%") {
				continue
			}
			n++
			resp, err := http.Get(srv.URL + "/v1/teams/" + m[1])
			if err != nil {
				t.Fatal(err)
			}
			var v struct{ Team string }
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil || v.Team != key {
				t.Errorf("%s: %q: %d, team %q (%v), want %q's view", f, m[0], resp.StatusCode, v.Team, err, key)
			}
		}
	}
	if n == 0 {
		t.Error("found no curl of the team view with a composite key; has its wording changed?")
	}
}

// TestDocsStateTheOutcomesLimit: every statement of how long gate outcomes reads before it
// gives up (docs/outcomes.md, its usage) gives outcomesLimit.
func TestDocsStateTheOutcomesLimit(t *testing.T) {
	sentences := append(docSentences(t), docSentence{where: "gate outcomes' usage", text: strings.Join(strings.Fields(outcomesUsage), " ")})
	limit := regexp.MustCompile(`gives up after (\d+) minutes`)
	n := 0
	for _, s := range sentences {
		for _, m := range limit.FindAllStringSubmatch(s.text, -1) {
			n++
			if m[1] != strconv.Itoa(int(outcomesLimit.Minutes())) {
				t.Errorf("%s: %q: gate outcomes gives up after %v", s.where, m[0], outcomesLimit)
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d statements of gate outcomes' limit (docs/outcomes.md, its usage); has their wording changed?", n)
	}
}

// TestDocsStateTheOverridesStartWait: every statement of how long a starting gate waits
// for its first read of the live overrides before it routes gives overrides.StartWait.
func TestDocsStateTheOverridesStartWait(t *testing.T) {
	about := regexp.MustCompile(`(?i)first read|not read in time|given up waiting|before (?:it|the gate) routes`)
	figure := regexp.MustCompile(`(?i)\b(?:after|past|at most|within the same) (\d+) ?s\b`)
	n := 0
	for _, s := range docSentences(t) {
		if !about.MatchString(s.text) {
			continue
		}
		for _, m := range figure.FindAllStringSubmatch(s.text, -1) {
			n++
			if m[1] != strconv.Itoa(int(overrides.StartWait.Seconds())) {
				t.Errorf("%s: %q: a gate waits %v for its first read of the live overrides", s.where, m[0], overrides.StartWait)
			}
		}
	}
	if n < 4 {
		t.Errorf("found %d statements of the wait for the live overrides at start; has their wording changed?", n)
	}
}
