package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// devStats counts what gate-dev's gates route, over both gates: records per route; per
// rule, the records its action took; and per key ever sent away, the records sent away
// and its last decision.
type devStats struct {
	routed [numRoutes]atomic.Int64 // by route.Route: accepted, overflow, dead letter, rule topics, dropped

	mu    sync.Mutex
	teams map[string]*teamStats
	rules map[string]*ruleStats
}

// numRoutes is how many routes a record can take, route.Dropped (a rule's action: drop,
// written nowhere) the last: uncounted, dropped records left the totals short of what was
// produced, and the end of a run waited its whole drain for them.
const numRoutes = int(route.Dropped) + 1

type teamStats struct {
	away int64          // records sent to overflow or a rule's topic
	last limit.Decision // the latest check of the key by rule, by either gate
	rule string         // with rules: the rule that last sent it away
}

// ruleStats are the records a rule's action took: sent to overflow or the rule's topic,
// or tagged on the accepted topic.
type ruleStats struct {
	n     int64
	route route.Route // where the last of them went
}

func newDevStats() *devStats {
	return &devStats{teams: make(map[string]*teamStats), rules: make(map[string]*ruleStats)}
}

// sentAway reports whether r takes a record off the accepted topic for its key's limit.
func sentAway(r route.Route) bool { return r == route.Overflow || r == route.RuleTopic }

// record counts one outcome. A key is followed from the first record sent away on, so
// memory grows with the keys sent away, not with every key seen.
func (s *devStats) record(o route.Outcome) {
	if int(o.Route) < len(s.routed) {
		s.routed[o.Route].Add(1)
	}
	// A rule's action (o.Rule), not a dry run's record that would have taken it.
	ruled := o.Rule != "" && o.Reason != route.ReasonDryRun
	if o.Team == "" && !ruled {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ruled {
		rs := s.rules[o.Rule]
		if rs == nil {
			rs = &ruleStats{}
			s.rules[strings.Clone(o.Rule)] = rs
		}
		rs.n++
		rs.route = o.Route
	}
	if o.Team == "" {
		return
	}
	ts := s.teams[o.Team]
	if ts == nil {
		if !sentAway(o.Route) {
			return
		}
		ts = &teamStats{}
		s.teams[strings.Clone(o.Team)] = ts // o.Team aliases the record
	}
	if sentAway(o.Route) {
		ts.away++
		ts.rule = o.Rule
	}
	// The level and threshold shown beside the rule are that rule's: a key of several
	// rules (a team's under a team rule and an event rule) is checked by each against
	// its own threshold, and a record the sending rule did not decide (another rule's
	// key, or the rule gone in a reload) showed another rule's figures under its name.
	if o.KeyRule == ts.rule {
		ts.last = o.Decision
	}
}

// wrap returns a router that counts r's outcomes in s.
func (s *devStats) wrap(r consume.Router) consume.Router { return &statsRouter{Router: r, stats: s} }

// statsRouter is the gate's router with every outcome counted in a devStats.
type statsRouter struct {
	consume.Router
	stats *devStats
}

func (r *statsRouter) RouteInto(now time.Time, in *kgo.Record, s *route.Scratch, out *kgo.Record) route.Outcome {
	o := r.Router.RouteInto(now, in, s, out)
	r.stats.record(o)
	return o
}

// TeamOf is the gate's router's, when it reads teams (the consumer's outcome rows of the
// records it decides itself are counted under their team): embedded as a
// consume.Router, it would be hidden.
func (r *statsRouter) TeamOf(in *kgo.Record, s *route.Scratch) string {
	if tr, ok := r.Router.(interface {
		TeamOf(*kgo.Record, *route.Scratch) string
	}); ok {
		return tr.TeamOf(in, s)
	}
	return ""
}

// devSnapshot is everything the view shows, read once a second.
type devSnapshot struct {
	at       time.Time
	produced int64            // acknowledged on the input topic
	routed   [numRoutes]int64 // by route
	teams    map[string]teamStats
	rules    map[string]ruleStats
	gates    []gateSnapshot
}

// gateSnapshot is one gate's figures from its metrics registry.
type gateSnapshot struct {
	partitions  float64 // input partitions it owns
	pipelineSum float64 // seconds in Redis pipelines, total
	pipelines   uint64  // Redis pipelines, total
	commandsSum float64 // Redis commands sent by ticks, total
	ticks       uint64  // ticks, total
}

func (s *devStats) snapshot(at time.Time, produced int64, regs []*prometheus.Registry) devSnapshot {
	snap := devSnapshot{at: at, produced: produced}
	for i := range s.routed {
		snap.routed[i] = s.routed[i].Load()
	}
	s.mu.Lock()
	snap.teams = make(map[string]teamStats, len(s.teams))
	for team, ts := range s.teams {
		snap.teams[team] = *ts
	}
	snap.rules = make(map[string]ruleStats, len(s.rules))
	for name, rs := range s.rules {
		snap.rules[name] = *rs
	}
	s.mu.Unlock()
	for _, reg := range regs {
		snap.gates = append(snap.gates, readGateMetrics(reg))
	}
	return snap
}

// readGateMetrics reads the figures the view shows from a gate's registry: what
// /metrics would serve. A gather error leaves the figures at zero; the view is a demo.
func readGateMetrics(reg *prometheus.Registry) gateSnapshot {
	var g gateSnapshot
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "gate_owned_partitions":
				g.partitions += m.GetGauge().GetValue()
			case "gate_limiter_pipeline_duration_seconds":
				g.pipelineSum += m.GetHistogram().GetSampleSum()
				g.pipelines += m.GetHistogram().GetSampleCount()
			case "gate_limiter_tick_redis_commands":
				g.commandsSum += m.GetHistogram().GetSampleSum()
				g.ticks += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return g
}

// devRates is the difference of two snapshots, per second.
type devRates struct {
	elapsed time.Duration // since the start
	in      float64
	routed  [numRoutes]float64
	total   devSnapshot
	rules   []ruleRate
	top     []teamRate
	gates   []gateRate
}

type teamRate struct {
	team   string
	rule   string
	perSec float64 // sent away
	away   int64
	last   limit.Decision
}

// ruleRate is the records a rule's action took.
type ruleRate struct {
	name   string
	route  route.Route
	perSec float64
	total  int64
}

// action says where a rule's records went.
func (r ruleRate) action() string {
	switch r.route {
	case route.Accepted:
		return "tagged"
	case route.RuleTopic:
		return "its topic"
	}
	return r.route.String()
}

type gateRate struct {
	partitions float64
	pipelineMs float64 // mean pipeline time over the second; 0 when none ran
	commands   float64 // mean Redis commands per tick over the second
}

// rates computes the view's figures from two snapshots a second or so apart. last is the
// previous figures: a gate that ran no tick in between (the tick and the view both run
// once a second, so some seconds see none) keeps its last pipeline and command figures.
func rates(prev, cur devSnapshot, last devRates, start time.Time, top int) devRates {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		dt = 1
	}
	r := devRates{elapsed: cur.at.Sub(start).Round(time.Second), in: float64(cur.produced-prev.produced) / dt, total: cur}
	for i := range r.routed {
		r.routed[i] = float64(cur.routed[i]-prev.routed[i]) / dt
	}
	for team, ts := range cur.teams {
		r.top = append(r.top, teamRate{team: team, rule: ts.rule, perSec: float64(ts.away-prev.teams[team].away) / dt, away: ts.away, last: ts.last})
	}
	slices.SortFunc(r.top, func(a, b teamRate) int {
		return cmp.Or(cmp.Compare(b.perSec, a.perSec), cmp.Compare(b.away, a.away), strings.Compare(a.team, b.team))
	})
	for name, rs := range cur.rules {
		r.rules = append(r.rules, ruleRate{name: name, route: rs.route, perSec: float64(rs.n-prev.rules[name].n) / dt, total: rs.n})
	}
	slices.SortFunc(r.rules, func(a, b ruleRate) int {
		return cmp.Or(cmp.Compare(b.total, a.total), strings.Compare(a.name, b.name))
	})
	r.top = r.top[:min(top, len(r.top))]
	for i, g := range cur.gates {
		var p gateSnapshot
		if i < len(prev.gates) {
			p = prev.gates[i]
		}
		gr := gateRate{partitions: g.partitions}
		if i < len(last.gates) {
			gr.pipelineMs, gr.commands = last.gates[i].pipelineMs, last.gates[i].commands
		}
		if n := g.pipelines - p.pipelines; n > 0 {
			gr.pipelineMs = (g.pipelineSum - p.pipelineSum) / float64(n) * 1000
		}
		if n := g.ticks - p.ticks; n > 0 {
			gr.commands = (g.commandsSum - p.commandsSum) / float64(n)
		}
		r.gates = append(r.gates, gr)
	}
	return r
}

// writeLine is the view on a non-terminal: one plain line a second.
func (r devRates) writeLine(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%s in=%.0f/s accepted=%.0f/s overflow=%.0f/s rule_topics=%.0f/s dead_letter=%.0f/s dropped=%.0f/s",
		durtext.String(r.elapsed), r.in, r.routed[route.Accepted], r.routed[route.Overflow], r.routed[route.RuleTopic], r.routed[route.DeadLetter], r.routed[route.Dropped])
	for i, g := range r.gates {
		fmt.Fprintf(&b, " gate%d[partitions=%.0f pipeline=%.2fms cmds/tick=%.1f]", i+1, g.partitions, g.pipelineMs, g.commands)
	}
	if len(r.rules) > 0 {
		b.WriteString(" rules[")
		for i, ru := range r.rules {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%.0f/s(%s)", ru.name, ru.perSec, strings.ReplaceAll(ru.action(), " ", "_"))
		}
		b.WriteByte(']')
	}
	if len(r.top) > 0 {
		b.WriteString(" top_sent_away=")
		for i, t := range r.top[:min(3, len(r.top))] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s:%.0f/s(level=%.0f/%d,%s", t.team, t.perSec, t.last.Level, t.last.Threshold, t.last.Tier)
			if t.rule != "" {
				fmt.Fprintf(&b, ",rule=%s", t.rule)
			}
			b.WriteByte(')')
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// writeScreen is the view on a terminal: the whole screen, redrawn.
func (r devRates) writeScreen(w io.Writer, header string) error {
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J") // home, clear
	b.WriteString(header)
	fmt.Fprintf(&b, "\nup %s   (Ctrl-C stops: load, then both gates with a final commit and tick flush)\n\n", durtext.String(r.elapsed))
	fmt.Fprintf(&b, "%-10s %12s %12s %12s %12s %14s %12s\n", "records", "in", "accepted", "overflow", "rule topics", "dead letter", "dropped")
	fmt.Fprintf(&b, "%-10s %12.0f %12.0f %12.0f %12.0f %14.0f %12.0f\n", "per second", r.in, r.routed[route.Accepted], r.routed[route.Overflow], r.routed[route.RuleTopic], r.routed[route.DeadLetter], r.routed[route.Dropped])
	fmt.Fprintf(&b, "%-10s %12d %12d %12d %12d %14d %12d\n\n", "total", r.total.produced, r.total.routed[route.Accepted], r.total.routed[route.Overflow], r.total.routed[route.RuleTopic], r.total.routed[route.DeadLetter], r.total.routed[route.Dropped])
	if len(r.rules) > 0 {
		fmt.Fprintf(&b, "%-18s %-10s %12s %12s\n", "rule", "sent to", "per second", "total")
		for _, ru := range r.rules {
			fmt.Fprintf(&b, "%-18s %-10s %12.0f %12d\n", ru.name, ru.action(), ru.perSec, ru.total)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%-10s %12s %16s %16s\n", "gate", "partitions", "redis pipeline", "commands/tick")
	for i, g := range r.gates {
		fmt.Fprintf(&b, "%-10s %12.0f %14.2fms %16.1f\n", fmt.Sprintf("gate %d", i+1), g.partitions, g.pipelineMs, g.commands)
	}
	fmt.Fprintf(&b, "\ntop keys sent away, to overflow or a rule's topic (a team, or team:user)\n%-18s %-10s %12s %12s %24s %8s\n", "key", "rule", "away/s", "away", "level / threshold", "tier")
	for _, t := range r.top {
		lt := fmt.Sprintf("%.0f / %d", t.last.Level, t.last.Threshold)
		if t.last.Threshold > 0 {
			lt += fmt.Sprintf(" (%.1fx)", t.last.Level/float64(t.last.Threshold))
		}
		fmt.Fprintf(&b, "%-18s %-10s %12.0f %12d %24s %8s\n", t.team, cmp.Or(t.rule, "-"), t.perSec, t.away, lt, t.last.Tier)
	}
	if len(r.top) == 0 {
		b.WriteString("(none yet: a key is sent away once its level reaches its threshold)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
