package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/tick"
)

// A gate with rules (GATE_RULES_FILE, or Options.Rules) runs them as a generation: every
// part that counts for one rule set (each rule's limiters, the tick that syncs them, each
// rule's overrides refresher, the router) with its metrics on a registry of its own. A
// changed rules file makes a new generation; RunTick starts it, the consumer's next record
// goes through its router, and the old one's tick, a tick later (every record it routed
// counted by then), makes its final flush and stops; what that flush could not write (Redis
// down or refusing writes) it keeps writing, under its own writer, until Redis takes it
// (tick.Drain), and the gate's other ticks add it to their reads of the same keys
// (tick.Unwritten), counting its drops meanwhile on the gate's metrics (tick.Dropped).
// The limiters of a rule whose name, key and cost did not change start, limit by limit
// of the same Redis keys and window, from the old ones' view of each key (its last read,
// what the old ones counted since, its hold: limit.InheritState), whatever their
// thresholds now; the others start empty and read each key's fleet-wide count, and any
// hold, from Redis when they first meet it, as a restarted gate's do. A rule whose name,
// cost and windows did not change keeps its keys, and so its counts
// (config.RuleKeyPrefix). Counters of the metrics a
// generation registers start again from 0, but for gate_limiter_dropped_counts_total.

// generation is the parts of one rule set.
type generation struct {
	n         int
	set       *rules.Set
	reg       *prometheus.Registry
	rules     []RuleLimits
	ticker    *tick.Ticker
	overrides []*overrides.Refresher // one per rule
	router    *route.Router
	topics    []string // the rules' own topics (action topic:NAME)
	// inherited are the limiters that took their old ones' keys over (InheritState):
	// primeReload reads none of theirs.
	inherited map[*limit.Limiter]bool
}

// ruleSet is the rule set the gate starts with: Options.Rules, else GATE_RULES_FILE's
// (read and checked now: a problem in it is a configuration error, exit status 2), else
// nil for the gate without rules.
func (g *Gate) ruleSet(cfg config.Config, o Options, log *slog.Logger) (*rules.Set, error) {
	if o.Rules != nil {
		return o.Rules, nil
	}
	if cfg.RulesFile == "" {
		return nil, nil
	}
	g.reload = cmp.Or(o.RulesReload, rules.DefaultReloadInterval)
	r, err := rules.NewReloader(cfg.RulesFile, cfg.RulesOptions(), rules.ReloadOptions{Interval: g.reload, Clock: o.Clock, Log: log.With("component", "rules"), Reg: g.Reg,
		Check: g.checkReload})
	if err != nil {
		return nil, config.Problems{fmt.Errorf("GATE_RULES_FILE=%q: %w", cfg.RulesFile, err)}
	}
	g.reloader = r
	g.checkNow = make(chan chan string)
	return r.Current(), nil
}

// newGeneration builds the parts of set, registering nothing outside its own registry.
func (g *Gate) newGeneration(set *rules.Set) (*generation, error) {
	g.gens++
	gen := &generation{n: g.gens, set: set, reg: prometheus.NewRegistry(), inherited: map[*limit.Limiter]bool{}}
	cfg := g.cfg
	var tlims []tick.Limit
	for _, r := range set.Rules {
		rl := RuleLimits{Name: r.Name, Force: r.Force, Key: r.Key, Cost: r.Cost, Shadow: r.Shadow}
		for i, lc := range cfg.RuleLimitConfigs(r) {
			reg := prometheus.WrapRegistererWith(prometheus.Labels{"rule": r.Name, "limit": lc.Window.String()}, gen.reg)
			lc.HashSeed = g.seed
			l, err := limit.New(lc, nil, reg)
			if err != nil {
				return nil, fmt.Errorf("building rule %s's %s limiter: %w", r.Name, durtext.String(lc.Window), err)
			}
			rl.Lims = append(rl.Lims, l)
			rl.KeyPrefixes = append(rl.KeyPrefixes, cfg.RuleKeyPrefix(r, i))
			tlims = append(tlims, tick.Limit{Lim: l, KeyPrefix: rl.KeyPrefixes[i]})
		}
		// A team the primary limit finds rotating identities stays out of the further
		// limits' caches too (limit.FollowRotation).
		for _, l := range rl.Lims[1:] {
			l.FollowRotation(rl.Lims[0])
		}
		gen.rules = append(gen.rules, rl)
	}
	scfg := cfg.SyncConfig()
	scfg.Writer = g.writer
	scfg.Redirects = g.redirects
	scfg.Fleet = g.fleet
	scfg.Evictions = g.evictions
	scfg.Warnings = g.warnings
	scfg.Unwritten = g.unwritten
	scfg.Dropped = g.dropped
	var descs []ruleDesc
	for i, rl := range gen.rules {
		scfg.LiveRules = append(scfg.LiveRules, rl.Name)
		descs = append(descs, ruleDescOf(set.Rules[i]))
	}
	scfg.LiveLimits = limitsDesc(descs, tlims)
	if scfg.Writer != "" && gen.n > 1 {
		// Each tick writes under a name of its own: two generations' ticks overlap for a
		// tick, and a writer's batches are numbered in one sequence.
		scfg.Writer += "-r" + strconv.Itoa(gen.n)
	}
	var err error
	if gen.ticker, err = tick.NewMulti(tlims, g.instances, scfg, gen.reg, g.log.With("component", "tick")); err != nil {
		return nil, fmt.Errorf("building the tick: %w", err)
	}
	var rrs []route.Rule
	for i, r := range set.Rules {
		rl := gen.rules[i]
		ocfg := cfg.OverridesConfig()
		ocfg.Key = overrides.Key(cfg.RulePrefix(r.Name)) // kept whatever else of the rule changes
		ocfg.Base = nil
		for j, l := range rl.Lims[1:] {
			ocfg.Extra = append(ocfg.Extra, overrides.Extra{Lim: l, Threshold: r.Limits[j+1].Threshold, Primary: r.Limits[0].Threshold})
		}
		reg := prometheus.WrapRegistererWith(prometheus.Labels{"rule": r.Name}, gen.reg)
		ref, err := overrides.New(ocfg, rl.Lims[0], g.instances[0], reg, g.log.With("component", "overrides", "rule", r.Name))
		if err != nil {
			return nil, fmt.Errorf("building rule %s's overrides refresher: %w", r.Name, err)
		}
		// A rule that was in use keeps its live overrides until its hash is read again, and,
		// with the same key, the teams it found rotating identities.
		if prev := g.gen.Load(); prev != nil {
			for k, pr := range prev.rules {
				if pr.Name == r.Name {
					if err := ref.Inherit(prev.overrides[k]); err != nil {
						g.log.Warn("rule's live overrides not carried over the reload", "rule", r.Name, "err", err)
					}
					if prev.set.Rules[k].Key.String() == r.Key.String() {
						rl.Lims[0].InheritRotation(pr.Lims[0])
					}
					// With its cost too, what each key's limiter knew, limit by limit of the
					// same Redis keys (the same window; limit.InheritState refuses another,
					// and learned thresholds): the last read of the fleet's count, what the
					// old one counted since (its tick writes that, not this one's), and the
					// hold. Thresholds and mode may have changed: counts carry over, and each
					// key is judged afresh by the new threshold. After the overrides: a hold
					// is kept under the threshold it was held under; the first sweep releases
					// it if the threshold rose and the team is under its new release level
					// (lowered, the hold runs its DivertHold). Without it, a
					// limit raised or lowered with Redis down let held teams through.
					if pp := prev.set.Rules[k]; pp.Key.String() == r.Key.String() && pp.Cost == r.Cost {
						for j, l := range rl.Lims {
							if o := slices.Index(pr.KeyPrefixes, rl.KeyPrefixes[j]); o >= 0 && l.InheritState(pr.Lims[o]) {
								gen.inherited[l] = true
							}
						}
					}
				}
			}
		}
		gen.overrides = append(gen.overrides, ref)
		rrs = append(rrs, config.RouteRule(r, rl.Lims))
	}
	rcfg := cfg.RouteConfig()
	rcfg.RuleTopics = g.topics
	rcfg.OutcomesTeam = set.Team
	if gen.router, err = route.NewRules(rcfg, rrs, gen.reg); err != nil {
		return nil, fmt.Errorf("building the router: %w", err)
	}
	gen.topics = set.Topics()
	return gen, nil
}

// checkReload is the reloader's check of a changed rule set (rules.ReloadOptions.Check):
// its rule topics (checkRuleTopics), then its parts, built now and kept (g.built) for
// RunTick to put in use. A set whose parts cannot be built is refused as a bad file is
// (gate_rules_file_valid 0, counted and logged once, the rules in use kept): built after
// the reloader had taken it, it was counted as put in use with the gauge at 1, and the
// reloader's set was not the one in use (a review).
func (g *Gate) checkReload(ctx context.Context, set *rules.Set) error {
	if err := g.checkRuleTopics(ctx, set); err != nil {
		return err
	}
	// Under primeMu: a prime's marks are either in the old limiters before the copy,
	// or in gen's too (pending) after it.
	g.primeMu.Lock()
	defer g.primeMu.Unlock()
	gen, err := g.newGeneration(set)
	if err != nil {
		g.gens-- // numbers the generations built, and this one is not
		return fmt.Errorf("building its rules: %w", err)
	}
	g.pending, g.built = gen, gen
	return nil
}

// checkRuleTopics checks, before a reloaded rule set is put in use, that each of its
// rules' topics exists and takes the gate's writes: a set naming one that does not is
// refused as a bad file is (rules.ReloadOptions.Check). A check Kafka could not answer
// (a broker's brief outage) says nothing of the file: neither refused nor taken, it is
// made again at the next read.
//
// Only the topics the rules in use do not send to are checked: one they do is watched
// (route.TopicWatch), and its loss makes the gate not ready and sends its records to
// overflow, holding up nothing else. Checked, every edit was refused while it was lost,
// a limit raised mid-incident on another rule too.
func (g *Gate) checkRuleTopics(ctx context.Context, set *rules.Set) error {
	var topics []string
	cur := g.gen.Load()
	for _, t := range set.Topics() {
		if cur == nil || !slices.Contains(cur.topics, t) {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 || g.Consumer == nil {
		return nil
	}
	if err := g.Consumer.CheckTopics(ctx, topics); errors.Is(err, consume.ErrUnasked) {
		return fmt.Errorf("%w: %w", rules.ErrUnchecked, err)
	} else if err != nil {
		// Each topic's problem at each rule that names it, as a parse problem is said
		// (FILE:LINE:COL and the field): the operator fixes the file or the topic there.
		// Anything else (not a topic's, or a topic no rule names) is kept as it is.
		var ps rules.Problems
		for _, e := range joined(err) {
			var at rules.Problems
			if te, ok := errors.AsType[*consume.TopicError](e); ok {
				at = set.TopicProblems(te.Topic, te.Kind, "a rule's topic cannot take the gate's records: "+te.Problem)
			}
			if len(at) == 0 {
				at = rules.Problems{fmt.Errorf("a rule's topic cannot take the gate's records: %w", e)}
			}
			ps = append(ps, at...)
		}
		return ps
	}
	return nil
}

// joined is err's errors when it joins several, else err.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// limitsHash is the hash of the generation's limits as the fleet compares them
// (tick.LimitsHash): the gates whose lines give another run other limits.
func (gen *generation) limitsHash() string { return tick.LimitsHash(gen.ticker.Config().LiveLimits) }

// describe is gen's rule names and their keys' prefixes, for the log.
func (gen *generation) describe() (names, prefixes []string) {
	for _, r := range gen.rules {
		names, prefixes = append(names, r.Name), append(prefixes, r.KeyPrefixes[0])
	}
	return names, prefixes
}

// switchRouter routes each record through the current generation's router.
type switchRouter struct{ g *Gate }

func (s switchRouter) RouteInto(now time.Time, in *kgo.Record, sc *route.Scratch, out *kgo.Record) route.Outcome {
	return s.g.gen.Load().router.RouteInto(now, in, sc, out)
}

func (s switchRouter) DeadLetter(in *kgo.Record, reason, detail string) *kgo.Record {
	return s.g.gen.Load().router.DeadLetter(in, reason, detail)
}

func (s switchRouter) CountDeadLettered() { s.g.gen.Load().router.CountDeadLettered() }

func (s switchRouter) TeamOf(in *kgo.Record, sc *route.Scratch) string {
	return s.g.gen.Load().router.TeamOf(in, sc)
}

func (s switchRouter) CountRuleTopicMissing(rule, topic string) {
	s.g.gen.Load().router.CountRuleTopicMissing(rule, topic)
}

// genCollector exposes the current generation's metrics on the gate's registry.
type genCollector struct{ g *Gate }

// Describe sends nothing: the generation's metrics change with the rules, so the
// collector is unchecked (the registry does not check what it has not been told of).
func (genCollector) Describe(chan<- *prometheus.Desc) {}

func (c genCollector) Collect(ch chan<- prometheus.Metric) { c.g.gen.Load().reg.Collect(ch) }

// LogRules logs the rules in use, if any: serve's line after "gate started".
func (g *Gate) LogRules() {
	if gen := g.gen.Load(); gen != nil {
		g.logRulesInUse(gen)
	}
}

// logRulesInUse is the line of the rules gen puts in use: with outcomes on, what their
// rows' team is read by, how it was chosen, and the rules whose rows are filed under it
// (rules.Set.OutcomesFiling): a file without team: may take another field for the team,
// and said nowhere, a team's rows went under an IP (a review).
func (g *Gate) logRulesInUse(gen *generation) {
	names, prefixes := gen.describe()
	attrs := []any{"generation", gen.n, "file", gen.set.Source, "rules", names, "key_prefixes", prefixes, "limits_hash", gen.limitsHash()}
	if g.cfg.OutcomesTopic != "" {
		team, how, apart := gen.set.OutcomesFiling()
		attrs = append(attrs, "outcomes_team", team.String(), "outcomes_team_from", how)
		if len(apart) > 0 {
			attrs = append(attrs, "outcomes_rows_after_the_team", apart)
		}
	}
	g.log.Info("rules in use", attrs...)
	if g.cfg.ValidateJSON && !gen.router.EnforcesJSON() {
		// Accepted, as a reload may bring a JSON rule in; said, as it checks nothing now.
		g.log.Warn("GATE_VALIDATE_JSON=true checks nothing with the rules in use: no enforced rule reads the value as JSON "+
			"(a json: key or match field), so no record goes to dead letter as not_json", "generation", gen.n, "file", gen.set.Source)
	}
}

// CurrentRules are the limiters of the rules in use (nil without rules).
func (g *Gate) CurrentRules() []RuleLimits {
	if gen := g.gen.Load(); gen != nil {
		return gen.rules
	}
	return nil
}

// RunTick runs the tick until ctx is done, then makes its final flush. With a rules
// file it also reads the file again every Options.RulesReload and puts a changed,
// valid one in use as a new generation (see above); every rule's overrides refresher runs
// with its generation.
func (g *Gate) RunTick(ctx context.Context) {
	if g.gen.Load() == nil {
		g.Ticker.Run(ctx)
		return
	}
	var retiring sync.WaitGroup
	stop := g.start(g.gen.Load())
	defer func() {
		stop()
		retiring.Wait()
	}()
	if g.reloader == nil {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(g.reload)
	defer t.Stop()
	for {
		var reply chan string // a CheckRulesNow's, told what the read found
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case reply = <-g.checkNow:
		}
		changed, result := g.reloader.CheckNowResult(ctx)
		if !changed {
			if reply != nil {
				reply <- result
			}
			continue
		}
		// Built by the reloader's check (checkReload), which took no other set since.
		gen := g.built
		g.built = nil
		old, oldStop := g.gen.Load(), stop
		// From its next tick's writes on, what the old tick cannot write is added to the
		// new one's reads: they drop from the level what the new limiters inherited, and
		// with Redis refusing writes those counts are in neither Redis nor the new tick.
		old.ticker.Retire()
		stop = g.start(gen)
		// A rule that was not in use (nothing carried over) routes on its live overrides
		// from its first record too.
		g.awaitFirstReads(ctx, gen.overrides)
		g.primeReload(ctx, old, gen)
		g.topics.Use(gen.topics)
		g.gen.Store(gen)
		g.primeMu.Lock()
		g.pending = nil
		g.primeMu.Unlock()
		g.logRulesInUse(gen)
		if reply != nil {
			reply <- fmt.Sprintf("%s (generation %d)", result, gen.n)
		}
		retiring.Add(1)
		go func() {
			defer retiring.Done()
			// A record routed through the old router a moment ago counts in its limiters:
			// its tick keeps running a tick longer, then flushes and stops.
			var stopping time.Time // when the gate began to stop, if it has
			select {
			case <-time.After(old.ticker.Config().TickInterval):
			case <-ctx.Done():
				stopping = time.Now()
			}
			oldStop()
			if stopping.IsZero() && ctx.Err() != nil {
				// The gate began to stop while the tick made its final flush (a slow
				// Redis): its Drain, ctx done, would try nothing (a review).
				stopping = time.Now()
			}
			// With Redis down or refusing writes its final flush failed: the tick keeps
			// what it could not write, and writes it when Redis answers, under its own
			// writer (tick.Drain). Dropped, it was never counted fleet-wide, and the
			// gate's teams could exceed their limits by what it routed meanwhile.
			if n := old.ticker.PendingWrites(); n > 0 && !stopping.IsZero() {
				// The gate stopping a tick after a reload: they are tried again, while
				// Redis fails them, as long as the rules in use have theirs tried (their
				// final flush's FlushTimeout, within the shutdown bound); Drain, its
				// context done, tried none (a review: 100 of 150 lost to a 400 ms refusal).
				dropped, err := old.ticker.DrainBy(stopping.Add(old.ticker.Config().FlushTimeout))
				if err != nil {
					g.log.Warn("retired rules' counts not written before the gate stopped", "generation", old.n, "dropped_counts", dropped, "err", err)
				} else {
					g.log.Info("retired rules' counts written", "generation", old.n, "dropped_counts", dropped)
				}
			} else if n > 0 {
				g.log.Warn("retired rules' counts not written yet; their tick writes them when Redis answers", "generation", old.n, "pending_writes", n)
				dropped, err := old.ticker.Drain(ctx)
				if err != nil {
					g.log.Warn("retired rules' counts not all written", "generation", old.n, "dropped_counts", dropped, "err", err)
				} else {
					// Dropped: of epochs no longer written, as any tick drops them.
					g.log.Info("retired rules' counts written", "generation", old.n, "dropped_counts", dropped)
				}
			}
		}()
	}
}

// CheckRulesNow has RunTick read GATE_RULES_FILE at once, as its periodic read does,
// putting a changed, valid file in use (serve's SIGHUP), and returns the file and what
// the read found. ok is false when the gate has no rules file to read, or ctx ended
// before RunTick took the request (the gate stopping).
func (g *Gate) CheckRulesNow(ctx context.Context) (file, result string, ok bool) {
	if g.reloader == nil {
		return "", "", false
	}
	reply := make(chan string, 1) // RunTick never waits on the answer
	select {
	case g.checkNow <- reply:
	case <-ctx.Done():
		return g.cfg.RulesFile, "", false
	}
	// Taken: RunTick answers whatever happens, even when it stops meanwhile.
	return g.cfg.RulesFile, <-reply, true
}

// reloadPrimeKeys bounds the keys of each changed limit primeReload reads.
const reloadPrimeKeys = 4096

// primeReload has the new tick read, before gen routes a record, the keys the old
// limiters found near or over their limits, for each new limiter of a kept rule (the same
// name, key and cost) that did not take its old one's keys over (limit.InheritState:
// learned thresholds, on either side). It keeps its counters in Redis, limit by limit of
// the same window, but knew nothing, and every key was first contact, judged by this
// gate's own count until its count reached the sync floor and a tick read it: a review's
// fleet admitted 2,220 in the 10 s after a limit raised from 1,000 to 2,000, when
// changed limits were not inherited (docs/rules.md). The keys the old limiter had at half
// of the lower of the two thresholds or more, or limited (at most 4,096 of a limit, most
// pressing first), go in the new one's cache for its first read
// (limit.Limiter.Expect), and a tick is made at once (tick.Ticker.TickNow), waited for
// up to two tick intervals.
func (g *Gate) primeReload(ctx context.Context, old, gen *generation) {
	now := time.Now()
	n := 0
	for i, r := range gen.set.Rules {
		k := slices.IndexFunc(old.set.Rules, func(o rules.Rule) bool { return o.Name == r.Name })
		if k < 0 {
			continue
		}
		pr := old.set.Rules[k]
		if pr.Key.String() != r.Key.String() || pr.Cost != r.Cost {
			continue // another key or unit: other counts
		}
		rl, orl := gen.rules[i], old.rules[k]
		for j, l := range rl.Lims {
			o := slices.Index(orl.KeyPrefixes, rl.KeyPrefixes[j])
			if gen.inherited[l] || o < 0 || pr.Limits[o].Window != r.Limits[j].Window {
				continue // inherited; or another window: other epochs, other counters
			}
			// Half the lower threshold: a key's override, if it has one, is the same
			// under both (the rule's hash of overrides is kept).
			half := float64(min(pr.Limits[o].Threshold, r.Limits[j].Threshold)) / 2
			for _, team := range orl.Lims[o].Pressing(now, half, reloadPrimeKeys) {
				if l.Expect(now, team) {
					n++
				}
			}
		}
	}
	if n == 0 {
		return
	}
	if err := readMarked(ctx, gen.ticker); err != nil {
		g.log.Info("rules put in use before all the keys near or over their limits under the old rules were read",
			"generation", gen.n, "keys", n, "took", time.Since(now), "err", err)
		return
	}
	g.log.Debug("read the keys near or over their limits under the old rules before the new ones route",
		"generation", gen.n, "keys", n, "took", time.Since(now))
}

// start runs gen's tick and overrides refreshers; the function returned stops them and
// returns once the tick's final flush is done.
func (g *Gate) start(gen *generation) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1 + len(gen.overrides))
	go func() { defer wg.Done(); gen.ticker.Run(ctx) }()
	for _, r := range gen.overrides {
		go func() { defer wg.Done(); r.Run(ctx) }()
	}
	return func() { cancel(); wg.Wait() }
}

// RunOverrides keeps the overrides refresher running until ctx is done. With rules,
// RunTick runs each generation's refreshers instead, and RunOverrides only waits.
func (g *Gate) RunOverrides(ctx context.Context) {
	if g.gen.Load() != nil {
		<-ctx.Done()
		return
	}
	g.Overrides.Run(ctx)
}

// refreshers are the overrides refreshers of the rules in use, or the gate's.
func (g *Gate) refreshers() []*overrides.Refresher {
	if gen := g.gen.Load(); gen != nil {
		return gen.overrides
	}
	return []*overrides.Refresher{g.Overrides}
}

// awaitOverrides is the consumer's BeforeRouting: it returns once every refresher has read
// its hash (RunOverrides, or RunTick with rules), or overrides.StartWait has passed.
func (g *Gate) awaitOverrides(ctx context.Context) {
	g.awaitFirstReads(ctx, g.refreshers())
	g.routing.Store(true)
}

// awaitFirstReads waits until each of refs has a set to route on (FirstRead), for at most
// overrides.StartWait, or until ctx ends. Past the bound it logs the hashes still being
// read, once: their teams are routed without their live overrides (on GATE_OVERRIDES, a
// rule's static limits) until the read lands, as after a failed read.
func (g *Gate) awaitFirstReads(ctx context.Context, refs []*overrides.Refresher) {
	t := time.NewTimer(overrides.StartWait)
	defer t.Stop()
	for _, r := range refs {
		select {
		case <-r.FirstRead():
		case <-ctx.Done():
			return
		case <-t.C:
			g.log.Warn("live overrides not read in time; routing without them until they are (GATE_OVERRIDES, or the rule's limits)",
				"component", "overrides", "keys", pendingReads(refs), "waited", overrides.StartWait.String())
			return
		}
	}
}

// pendingReads are the hashes of refs not read yet.
func pendingReads(refs []*overrides.Refresher) []string {
	var keys []string
	for _, r := range refs {
		select {
		case <-r.FirstRead():
		default:
			keys = append(keys, r.HashKey())
		}
	}
	return keys
}

// OverridesNotReady says, until the consumer may route, which live overrides hashes the
// gate still waits to read (/readyz); nothing once it routes.
func (g *Gate) OverridesNotReady() []string {
	if g.routing.Load() {
		return nil
	}
	if keys := pendingReads(g.refreshers()); len(keys) > 0 {
		return []string{"overrides: waiting for the first read of the live overrides (" + strings.Join(keys, ", ") + ") before routing"}
	}
	return nil
}
