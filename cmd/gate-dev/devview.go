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
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// devStats counts what gate-dev's gates route, over both gates: records per route, and
// per team that has ever overflowed, its overflow and its last decision.
type devStats struct {
	routed [3]atomic.Int64 // by route.Route: accepted, overflow, dead letter

	mu    sync.Mutex
	teams map[string]*teamStats
}

type teamStats struct {
	overflow int64
	last     limit.Decision // the latest check of the team by either gate
	rule     string         // with rules: the rule that last sent it away
}

func newDevStats() *devStats { return &devStats{teams: make(map[string]*teamStats)} }

// record counts one outcome. A team is followed from its first overflow on, so memory
// grows with the teams that overflow, not with every team seen.
func (s *devStats) record(o route.Outcome) {
	if int(o.Route) < len(s.routed) {
		s.routed[o.Route].Add(1)
	}
	if o.Team == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.teams[o.Team]
	if ts == nil {
		if o.Route != route.Overflow {
			return
		}
		ts = &teamStats{}
		s.teams[strings.Clone(o.Team)] = ts // o.Team aliases the record
	}
	if o.Route == route.Overflow {
		ts.overflow++
		ts.rule = o.Rule
	}
	ts.last = o.Decision
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

// devSnapshot is everything the view shows, read once a second.
type devSnapshot struct {
	at       time.Time
	produced int64    // acknowledged on the input topic
	routed   [3]int64 // by route
	teams    map[string]teamStats
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
	routed  [3]float64
	total   devSnapshot
	top     []teamRate
	gates   []gateRate
}

type teamRate struct {
	team     string
	rule     string
	perSec   float64
	overflow int64
	last     limit.Decision
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
		r.top = append(r.top, teamRate{team: team, rule: ts.rule, perSec: float64(ts.overflow-prev.teams[team].overflow) / dt, overflow: ts.overflow, last: ts.last})
	}
	slices.SortFunc(r.top, func(a, b teamRate) int {
		return cmp.Or(cmp.Compare(b.perSec, a.perSec), cmp.Compare(b.overflow, a.overflow), strings.Compare(a.team, b.team))
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
	fmt.Fprintf(&b, "t=%s in=%.0f/s accepted=%.0f/s overflow=%.0f/s dead_letter=%.0f/s",
		r.elapsed, r.in, r.routed[route.Accepted], r.routed[route.Overflow], r.routed[route.DeadLetter])
	for i, g := range r.gates {
		fmt.Fprintf(&b, " gate%d[partitions=%.0f pipeline=%.2fms cmds/tick=%.1f]", i+1, g.partitions, g.pipelineMs, g.commands)
	}
	if len(r.top) > 0 {
		b.WriteString(" top_overflow=")
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
	fmt.Fprintf(&b, "\nup %s   (Ctrl-C stops: load, then both gates with a final commit and tick flush)\n\n", r.elapsed)
	fmt.Fprintf(&b, "%-10s %12s %12s %12s %14s\n", "records", "in", "accepted", "overflow", "dead letter")
	fmt.Fprintf(&b, "%-10s %12.0f %12.0f %12.0f %14.0f\n", "per second", r.in, r.routed[route.Accepted], r.routed[route.Overflow], r.routed[route.DeadLetter])
	fmt.Fprintf(&b, "%-10s %12d %12d %12d %14d\n\n", "total", r.total.produced, r.total.routed[route.Accepted], r.total.routed[route.Overflow], r.total.routed[route.DeadLetter])
	fmt.Fprintf(&b, "%-10s %12s %16s %16s\n", "gate", "partitions", "redis pipeline", "commands/tick")
	for i, g := range r.gates {
		fmt.Fprintf(&b, "%-10s %12.0f %14.2fms %16.1f\n", fmt.Sprintf("gate %d", i+1), g.partitions, g.pipelineMs, g.commands)
	}
	fmt.Fprintf(&b, "\ntop keys by overflow (a team, or team:user)\n%-18s %-10s %12s %12s %24s %8s\n", "key", "rule", "overflow/s", "overflow", "level / threshold", "tier")
	for _, t := range r.top {
		lt := fmt.Sprintf("%.0f / %d", t.last.Level, t.last.Threshold)
		if t.last.Threshold > 0 {
			lt += fmt.Sprintf(" (%.1fx)", t.last.Level/float64(t.last.Threshold))
		}
		fmt.Fprintf(&b, "%-18s %-10s %12.0f %12d %24s %8s\n", t.team, cmp.Or(t.rule, "-"), t.perSec, t.overflow, lt, t.last.Tier)
	}
	if len(r.top) == 0 {
		b.WriteString("(none yet: a team overflows once its level reaches its threshold)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
