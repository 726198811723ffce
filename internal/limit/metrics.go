package limit

import "github.com/prometheus/client_golang/prometheus"

// collector exports the limiter's counters. They are kept in per-shard atomics, and the
// decisions in striped ones (limiter.go), rather than prometheus counters because a counter
// shared by every core would be the one contended cache line on the per-record path.
type collector struct {
	l           *Limiter
	decisions   *prometheus.Desc
	cache       *prometheus.Desc
	entries     *prometheus.Desc
	fullest     *prometheus.Desc
	tiers       *prometheus.Desc
	transitions *prometheus.Desc
	evictions   *prometheus.Desc
	displaced   *prometheus.Desc
	clamped     *prometheus.Desc
	starts      *prometheus.Desc
	releases    *prometheus.Desc
	held        *prometheus.Desc
	spikeStarts *prometheus.Desc
	spikeEnds   *prometheus.Desc
	spiking     *prometheus.Desc
	relearned   *prometheus.Desc
	untracked   *prometheus.Desc
	moves       *prometheus.Desc
	overfull    *prometheus.Desc
	floor       *prometheus.Desc
	rotating    *prometheus.Desc
	rotations   *prometheus.Desc
	rotated     *prometheus.Desc
}

func newCollector(l *Limiter) *collector {
	return &collector{
		l: l,
		decisions: prometheus.NewDesc("gate_limiter_decisions_total",
			"Checks answered, by decision (allowed, limited).", []string{"decision"}, nil),
		cache: prometheus.NewDesc("gate_limiter_cache_total",
			"Cache results: hit and miss per check, sync_queued per read planned by the tick.", []string{"result"}, nil),
		entries: prometheus.NewDesc("gate_limiter_cache_entries",
			"Teams in the local cache.", nil, nil),
		fullest: prometheus.NewDesc("gate_limiter_cache_fullest_entries",
			"Teams in the fullest of the caches GATE_CACHE_CAPACITY bounds each: the one cache under GATE_CLOCK=wall (gate_limiter_cache_entries); under GATE_CLOCK=event, the fullest window's cache (gate_limiter_cache_entries adds up every window's). Past the capacity, that cache evicts.", nil, nil),
		tiers: prometheus.NewDesc("gate_limiter_tier_entities",
			"Cached teams per pressure tier, as of the last tick; under GATE_CLOCK=event each team once, in the tier of the newest window it is cached in (as the team view shows it).", []string{"tier"}, nil),
		transitions: prometheus.NewDesc("gate_limiter_tier_transitions_total",
			"Tier changes seen by checks.", []string{"from", "to"}, nil),
		evictions: prometheus.NewDesc("gate_limiter_evictions_total",
			"Teams removed from the cache, by reason (capacity, idle).", []string{"reason"}, nil),
		displaced: prometheus.NewDesc("gate_limiter_displaced_counts_total",
			"Counted records dropped because no tick collected them for a whole window.", nil, nil),
		clamped: prometheus.NewDesc("gate_limiter_event_time_clamped_total",
			"GATE_CLOCK=event: records whose timestamp was clamped, by reason: too_old (older than GATE_MAX_EVENT_AGE, counted as that old), future (more than 5 s ahead of the wall clock, counted as now); a record checked by several limits (a rule's, the rules') is counted once, by the first that checked it.", []string{"reason"}, nil),
		starts: prometheus.NewDesc("gate_limiter_divert_starts_total",
			"Teams held in overflow (GATE_DIVERT_HOLD), by source: local (this gate saw the team reach its threshold), fleet (another gate's hold flag, read from Redis).", []string{"source"}, nil),
		releases: prometheus.NewDesc("gate_limiter_divert_releases_total",
			"Holds ended, by reason: calm (under the release level for the hold), raised (its threshold raised, by an override say, so that its level is under the new release level), gone (the team left the cache).", []string{"reason"}, nil),
		held: prometheus.NewDesc("gate_limiter_divert_held_teams",
			"Teams held in overflow on this gate.", nil, nil),
		spikeStarts: prometheus.NewDesc("gate_limiter_spikes_started_total",
			"GATE_THRESHOLD_MODE=adaptive: spikes started on this gate (a team reached its learned threshold).", nil, nil),
		spikeEnds: prometheus.NewDesc("gate_limiter_spikes_ended_total",
			"GATE_THRESHOLD_MODE=adaptive: spikes ended on this gate (the team released, or under the release level without holds; or it left the cache).", nil, nil),
		relearned: prometheus.NewDesc("gate_limiter_spikes_relearned_total",
			"GATE_THRESHOLD_MODE=adaptive: spikes ended because they lasted GATE_ADAPTIVE_MAX_SPIKE: the team was re-learned at its new volume (also counted in gate_limiter_spikes_ended_total).", nil, nil),
		untracked: prometheus.NewDesc("gate_limiter_untracked_checks_total",
			"Checks of keys below the fleet floor, answered from the sketch: neither cached nor written to Redis nor read (docs/design.md, \"Keys below the floor\"); neither a hit nor a miss of gate_limiter_cache_total.", nil, nil),
		moves: prometheus.NewDesc("gate_limiter_key_moves_total",
			"Keys moved between the sketch and the cache, by direction: to=cache (a key reached its floor, promoted with its counts), to=sketch (a cached key fell under half its floor).", []string{"to"}, nil),
		overfull: prometheus.NewDesc("gate_limiter_cache_overfull_total",
			"Keys cached past GATE_CACHE_CAPACITY because every key a full cache looked at could be over its limit (at half its threshold or more, or held), and none is evicted then.", nil, nil),
		floor: prometheus.NewDesc("gate_limiter_untracked_floor",
			"Records a window under which a key at the default threshold is not cached (GATE_SYNC_FLOOR x threshold / gates in the fleet); 0: every key cached.", nil, nil),
		rotating: prometheus.NewDesc("gate_limiter_rotating_teams",
			"Teams rotating identities under a composite-key rule now: more distinct keys in a window than its max_keys.", nil, nil),
		rotations: prometheus.NewDesc("gate_limiter_rotations_detected_total",
			"Teams found rotating identities under a composite-key rule (more distinct keys in a window than its max_keys).", nil, nil),
		rotated: prometheus.NewDesc("gate_limiter_rotation_records_total",
			"Records of rotating teams' keys under the floor, handled as the rule's on_cardinality says (collapse, overflow, tag).", []string{"on_cardinality"}, nil),
		spiking: prometheus.NewDesc("gate_limiter_spiking_teams",
			"GATE_THRESHOLD_MODE=adaptive: teams in a spike on this gate.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.decisions, c.cache, c.entries, c.fullest, c.tiers, c.transitions, c.evictions, c.displaced, c.clamped, c.starts, c.releases, c.held, c.spikeStarts, c.spikeEnds, c.relearned, c.spiking, c.untracked, c.moves, c.overfull, c.floor, c.rotating, c.rotations, c.rotated} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	var allowed, limited, misses, evicted, displaced, untracked, promoted, demoted, overfull, rotated uint64
	var trans [numTiers * numTiers]uint64
	// The capacity bounds each window's cache under EventClock on its own (insertIn).
	fullest := l.count.Load()
	for i := range l.shards {
		sh := &l.shards[i]
		misses += sh.misses.Load()
		evicted += sh.evicted.Load()
		displaced += sh.displaced.Load()
		for j := range sh.transitions {
			trans[j] += uint64(sh.transitions[j].Load())
		}
		untracked += sh.untracked.Load()
		promoted += sh.promoted.Load()
		demoted += sh.demoted.Load()
		overfull += sh.overfull.Load()
		rotated += sh.rotated.Load()
	}
	if l.ring != nil {
		// Tables are dropped under ringMu: holding it, each one's counters are counted
		// once, live or retired.
		l.ringMu.Lock()
		defer l.ringMu.Unlock()
		misses += l.retired.misses.Load()
		evicted += l.retired.evicted.Load()
		displaced += l.retired.displaced.Load()
		overfull += l.retired.overfull.Load()
		for j := range trans {
			trans[j] += l.retired.transitions[j].Load()
		}
		fullest = 0
		for i := range l.ring {
			t := l.ring[i].Load()
			if t == nil || t.dead.Load() {
				continue // a dropped table's counters are in l.retired
			}
			fullest = max(fullest, t.count.Load())
			for j := range t.shards {
				sh := &t.shards[j]
				misses += sh.misses.Load()
				evicted += sh.evicted.Load()
				displaced += sh.displaced.Load()
				overfull += sh.overfull.Load()
				for k := range sh.transitions {
					trans[k] += uint64(sh.transitions[k].Load())
				}
			}
		}
	}
	var tooOld, future uint64
	for i := range l.decisions {
		allowed += l.decisions[i].allowed.Load()
		limited += l.decisions[i].limited.Load()
		tooOld += l.decisions[i].tooOld.Load()
		future += l.decisions[i].future.Load()
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.decisions, allowed, "allowed")
	counter(c.decisions, limited, "limited")
	// Checks that found no key cached: misses, the sketch's answers, and a rotating team's
	// records under on_cardinality overflow or tag, answered without the cache (under
	// collapse each is a check of the collapsed key, counted as one).
	uncached := misses + untracked
	if cd := l.card; cd != nil && cd.action != CardinalityCollapse {
		uncached += rotated
	}
	counter(c.cache, allowed+limited-min(uncached, allowed+limited), "hit")
	counter(c.cache, misses, "miss")
	counter(c.cache, l.swept.queued.Load(), "sync_queued")
	counter(c.evictions, evicted, "capacity")
	counter(c.evictions, l.swept.expired.Load(), "idle")
	counter(c.displaced, displaced)
	counter(c.untracked, untracked)
	counter(c.moves, promoted, "cache")
	counter(c.moves, demoted, "sketch")
	counter(c.overfull, overfull)
	ch <- prometheus.MustNewConstMetric(c.floor, prometheus.GaugeValue, float64(l.untrackedFloor.Load()))
	if cd := l.card; cd != nil {
		ch <- prometheus.MustNewConstMetric(c.rotating, prometheus.GaugeValue, float64(len(l.Rotating())))
		counter(c.rotations, cd.detected.Load())
		counter(c.rotated, rotated, cd.action.String())
	}
	if l.ring != nil {
		counter(c.clamped, tooOld, "too_old")
		counter(c.clamped, future, "future")
	}
	h := l.holds
	counter(c.starts, h.startsLocal.Load(), "local")
	counter(c.starts, h.startsFleet.Load(), "fleet")
	counter(c.releases, h.releasedCalm.Load(), "calm")
	counter(c.releases, h.releasedRaised.Load(), "raised")
	counter(c.releases, h.releasedGone.Load(), "gone")
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(h.count()))
	if a := l.adapt; a != nil {
		counter(c.spikeStarts, a.started.Load())
		counter(c.spikeEnds, a.ended.Load())
		counter(c.relearned, a.relearned.Load())
		ch <- prometheus.MustNewConstMetric(c.spiking, prometheus.GaugeValue, float64(a.spiking.Load()))
	}
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(l.Len()))
	ch <- prometheus.MustNewConstMetric(c.fullest, prometheus.GaugeValue, float64(fullest))
	for t := range numTiers {
		ch <- prometheus.MustNewConstMetric(c.tiers, prometheus.GaugeValue, float64(l.swept.tiers[t].Load()), t.String())
		for u := range numTiers {
			if v := trans[t*numTiers+u]; v > 0 {
				counter(c.transitions, v, t.String(), u.String())
			}
		}
	}
}
