package replay

import (
	"fmt"
	"hash/maphash"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/outcome"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
)

// MaxRowsPerMinute caps the outcome rows a candidate keeps for one minute of the range
// (its keys and their outcomes): keys past it are summed in folded rows, which count in
// the rule totals but not per key (Report's Folded).
const MaxRowsPerMinute = 1_000_000

// Candidate is one set of limits replayed: a rules file's rules, or the GATE_* limits
// of a gate without one. Its limiters and router are those the gate builds from the same
// settings (internal/gate), without Redis: a store in memory stands for the fleet's
// (store.go).
type Candidate struct {
	name     string
	cfg      config.Config
	set      *rules.Set
	wall     bool          // judged on the wall clock
	every    time.Duration // how often its fleet ticks, in record time (NewEngine)
	next     time.Time     // its next tick
	delay    time.Duration // how long after a tick's writes its reads are made (NewEngine)
	readAt   time.Time     // when the reads of the last tick are made; zero when made
	idle     time.Duration // how long a key unseen may stay cached (NewEngine): a tick after that changes nothing
	router   *route.Router
	stores   []*store
	adaptive time.Duration // the learner's MinHistory; 0 when no rule learns
	agg      *outcome.Agg
	sc       route.Scratch
	out      kgo.Record
	b        *builder
	rows     int64 // the row budget of a minute: MaxRowsPerMinute (a test's less)
}

// NewCandidate builds the candidate name (how the report calls it) from cfg's limits,
// or from set's rules when set is not nil, as the gate would run them, on cfg's clock
// (GATE_CLOCK), enforcing (GATE_DRY_RUN is ignored: replay says what enforcement would
// do), and with GATE_OVERRIDES as the only overrides (the live ones are in Redis, which
// replay does not touch).
//
// On the event clock every record is judged in the window of its own time, on exact
// counts. On the wall clock (the gate's default, and the one learned thresholds need)
// each record is judged as a gate routing it at its record time would: each key's view
// is rebuilt every GATE_TICK_INTERVAL of record time from the counts in memory, as a
// gate's is from Redis, and a key over its limit is held (GATE_DIVERT_HOLD) as the
// gate holds it. Either way every key is counted exactly: the sketch a per-user rule
// keeps its quiet keys in is the fleet's economy of Redis, and its hashes are seeded
// per process, which would make two replays differ. With it goes max_keys, which is a
// decision (a rotating team's keys get on_cardinality's action): gate replay says so
// in a note for each rule that has one.
func NewCandidate(name string, cfg config.Config, set *rules.Set) (*Candidate, error) {
	c := &Candidate{name: name, cfg: cfg, set: set, wall: cfg.Clock.Clock == limit.WallClock, b: newBuilder(), rows: MaxRowsPerMinute}
	if set != nil {
		for _, r := range set.Rules {
			c.b.ruleSet = append(c.b.ruleSet, r.Name)
			if r.Shadow {
				c.b.shadows = append(c.b.shadows, r.Name)
			}
		}
	}
	// Built now to refuse bad settings at once (on any clock: nothing is counted); built
	// again at the first record, on a clock at its time (start).
	if err := c.build(time.Unix(0, 0)); err != nil {
		return nil, err
	}
	return c, nil
}

// start builds the candidate afresh for a range starting at first: the limiters' clock
// (their idle and least-recently-seen times count from it) an hour before it, a whole
// second, so that two replays of a range see the same times.
func (c *Candidate) start(first time.Time) error {
	return c.build(first.Add(-time.Hour).Truncate(time.Second))
}

// Name is the candidate's name: its rules file, or "GATE_* limits".
func (c *Candidate) Name() string { return c.name }

// build makes the limiters, the stores and the router on a clock fixed at base.
func (c *Candidate) build(base time.Time) error {
	cfg, set := c.cfg, c.set
	clk := clock.NewFake(base)
	rcfg := cfg.RouteConfig()
	rcfg.DryRun = false
	c.stores, c.adaptive = nil, 0
	// One hash seed for the limiters and the aggregate, as a gate has it.
	seed := maphash.MakeSeed()
	c.agg = outcome.NewAggSeeded(time.Minute, outcome.NewBudget(c.rows), seed)
	c.sc = route.Scratch{Outcomes: c.agg, ShadowOver: c.shadowOver}
	exact := func(lc limit.Config) limit.Config {
		lc.SketchWidth, lc.KeyCardinality, lc.HashSeed = 0, 0, seed
		return lc
	}
	var err error
	if set == nil {
		var lims []*limit.Limiter
		for i, lc := range append([]limit.Config{cfg.LimitConfig()}, cfg.ExtraLimitConfigs()...) {
			l, err := limit.New(exact(lc), clk, nil)
			if err != nil {
				return fmt.Errorf("building limit %d of %s: %w", i+1, c.name, err)
			}
			lims = append(lims, l)
		}
		c.use(lims...)
		if c.router, err = route.NewMulti(rcfg, lims, nil); err != nil {
			return fmt.Errorf("building the router of %s: %w", c.name, err)
		}
		return nil
	}
	var rrs []route.Rule
	for _, r := range set.Rules {
		var lims []*limit.Limiter
		for _, lc := range cfg.RuleLimitConfigs(r) {
			l, err := limit.New(exact(lc), clk, nil)
			if err != nil {
				return fmt.Errorf("building rule %s's %s limiter: %w", r.Name, durtext.String(lc.Window), err)
			}
			lims = append(lims, l)
		}
		c.use(lims...)
		rrs = append(rrs, config.RouteRule(r, lims))
	}
	rcfg.OutcomesTeam = set.Team
	if c.router, err = route.NewRules(rcfg, rrs, nil); err != nil {
		return fmt.Errorf("building the router of %s: %w", c.name, err)
	}
	return nil
}

// worker is a copy of c for a worker (parallel.go): its own limiters, stores, outcomes
// and report. Its row budget is c's whole: all of a team's keys go to one worker, so a
// share of it would fold a minute one goroutine keeps whole.
func (c *Candidate) worker() *Candidate {
	w := *c
	w.b = newBuilder()
	w.b.ruleSet, w.b.shadows = c.b.ruleSet, c.b.shadows
	w.router, w.stores, w.sc, w.out = nil, nil, route.Scratch{}, kgo.Record{}
	return &w
}

// keys are the key sources of c's rules, or the GATE_KEY_FROM of a gate without a file
// (its router's: defaulted).
func (c *Candidate) keys() []route.KeyFrom {
	if c.set == nil {
		return []route.KeyFrom{c.router.Config().KeyFrom}
	}
	var out []route.KeyFrom
	for _, r := range c.set.Rules {
		out = append(out, r.Key)
	}
	return out
}

func (c *Candidate) use(lims ...*limit.Limiter) {
	for _, l := range lims {
		c.stores = append(c.stores, newStore(l))
		if a := l.Adaptive(); a != nil {
			c.adaptive = max(c.adaptive, a.MinHistory)
		}
	}
}

// route routes rec at now, the replay's clock, and follows what became of it.
func (c *Candidate) route(now time.Time, rec *kgo.Record) {
	o := c.router.RouteInto(now, rec, &c.sc, &c.out)
	c.b.observe(now, &o)
}

// shadowOver follows a shadow rule's level at a key it was over (route.Scratch.ShadowOver):
// the record's decision, which observe follows, is another rule's.
func (c *Candidate) shadowOver(now time.Time, rule, key string, d limit.Decision) {
	c.b.shadowOver(now, rule, key, d)
}

// tick is the write phase of the fleet's tick at now: every count written, the reads
// planned (read makes them).
func (c *Candidate) tick(now time.Time) {
	for _, s := range c.stores {
		s.writePhase(now)
	}
}

// read is the read phase of the fleet's last tick, at now: the reads its write phase
// planned made and applied.
func (c *Candidate) read(now time.Time) {
	for _, s := range c.stores {
		s.readPhase(now)
	}
}

// seal hands the rows of the minutes routed so far to the report.
func (c *Candidate) seal() {
	c.b.rows(outcome.Seal("replay", "", c.agg))
}
