package replay

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
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
// settings (internal/gate), on the event clock, without Redis: a store in memory stands
// for the fleet's (store.go).
type Candidate struct {
	name     string
	wall     bool          // judged on the wall clock (learned thresholds need it)
	every    time.Duration // how often its fleet ticks, in record time (NewEngine)
	next     time.Time     // its next tick
	router   *route.Router
	stores   []*store
	adaptive time.Duration // the learner's MinHistory; 0 when no rule learns
	agg      *outcome.Agg
	sc       route.Scratch
	out      kgo.Record
	b        *builder
}

// NewCandidate builds the candidate name (how the report calls it) from cfg's limits,
// or from set's rules when set is not nil, as the gate would run them, enforcing
// (GATE_DRY_RUN is ignored: replay says what enforcement would do), with GATE_OVERRIDES
// as the only overrides (the live ones are in Redis, which replay does not touch), and on
// the event clock: records are judged in the window of their own time, counted exactly.
// Learned thresholds (GATE_THRESHOLD_MODE=adaptive, threshold_mode: adaptive) are kept
// on the wall clock only: a candidate with one is judged on the wall clock, a live gate's,
// its "now" the replay's clock, its view of each key rebuilt every tick from the store
// (store.go) as a gate's is from Redis.
func NewCandidate(name string, cfg config.Config, set *rules.Set) (*Candidate, error) {
	wall := set == nil && cfg.LimitConfig().Adaptive != nil
	if set != nil {
		for _, r := range set.Rules {
			wall = wall || r.Adaptive
		}
	}
	cfg.Clock.Clock = limit.EventClock
	if wall {
		cfg.Clock.Clock = limit.WallClock
	}
	rcfg := cfg.RouteConfig()
	rcfg.DryRun = false
	c := &Candidate{name: name, wall: wall, agg: outcome.NewAgg(time.Minute, outcome.NewBudget(MaxRowsPerMinute)), b: newBuilder()}
	c.sc.Outcomes = c.agg
	var err error
	if set == nil {
		var lims []*limit.Limiter
		for i, lc := range append([]limit.Config{cfg.LimitConfig()}, cfg.ExtraLimitConfigs()...) {
			l, err := limit.New(lc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("building limit %d of %s: %w", i+1, name, err)
			}
			lims = append(lims, l)
		}
		c.use(lims...)
		if c.router, err = route.NewMulti(rcfg, lims, nil); err != nil {
			return nil, fmt.Errorf("building the router of %s: %w", name, err)
		}
		return c, nil
	}
	var rrs []route.Rule
	for _, r := range set.Rules {
		var lims []*limit.Limiter
		for _, lc := range cfg.RuleLimitConfigs(r) {
			l, err := limit.New(lc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("building rule %s's %s limiter: %w", r.Name, lc.Window, err)
			}
			lims = append(lims, l)
		}
		c.use(lims...)
		rrs = append(rrs, config.RouteRule(r, lims))
		c.b.ruleSet = append(c.b.ruleSet, r.Name)
	}
	if c.router, err = route.NewRules(rcfg, rrs, nil); err != nil {
		return nil, fmt.Errorf("building the router of %s: %w", name, err)
	}
	return c, nil
}

func (c *Candidate) use(lims ...*limit.Limiter) {
	for _, l := range lims {
		c.stores = append(c.stores, newStore(l))
		if a := l.Adaptive(); a != nil {
			c.adaptive = max(c.adaptive, a.MinHistory)
		}
	}
}

// Name is how the report calls the candidate.
func (c *Candidate) Name() string { return c.name }

// route routes rec at now, the replay's clock, and follows what became of it.
func (c *Candidate) route(now time.Time, rec *kgo.Record) {
	o := c.router.RouteInto(now, rec, &c.sc, &c.out)
	c.b.observe(now, &o)
}

// tick is the fleet's tick at now.
func (c *Candidate) tick(now time.Time) {
	for _, s := range c.stores {
		s.tick(now)
	}
}

// seal hands the rows of the minutes routed so far to the report.
func (c *Candidate) seal() {
	c.b.rows(outcome.Seal("replay", "", c.agg))
}
