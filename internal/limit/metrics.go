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
	tiers       *prometheus.Desc
	transitions *prometheus.Desc
	evictions   *prometheus.Desc
	displaced   *prometheus.Desc
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
		tiers: prometheus.NewDesc("gate_limiter_tier_entities",
			"Cached teams per pressure tier, as of the last tick.", []string{"tier"}, nil),
		transitions: prometheus.NewDesc("gate_limiter_tier_transitions_total",
			"Tier changes seen by checks.", []string{"from", "to"}, nil),
		evictions: prometheus.NewDesc("gate_limiter_evictions_total",
			"Teams removed from the cache, by reason (capacity, idle).", []string{"reason"}, nil),
		displaced: prometheus.NewDesc("gate_limiter_displaced_counts_total",
			"Counted records dropped because no tick collected them for a whole window.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.decisions, c.cache, c.entries, c.tiers, c.transitions, c.evictions, c.displaced} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	var allowed, limited, misses, evicted, displaced uint64
	var trans [numTiers * numTiers]uint64
	for i := range l.shards {
		sh := &l.shards[i]
		misses += sh.misses.Load()
		evicted += sh.evicted.Load()
		displaced += sh.displaced.Load()
		for j := range sh.transitions {
			trans[j] += uint64(sh.transitions[j].Load())
		}
	}
	for i := range l.decisions {
		allowed += l.decisions[i].allowed.Load()
		limited += l.decisions[i].limited.Load()
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.decisions, allowed, "allowed")
	counter(c.decisions, limited, "limited")
	counter(c.cache, allowed+limited-min(misses, allowed+limited), "hit")
	counter(c.cache, misses, "miss")
	counter(c.cache, l.swept.queued.Load(), "sync_queued")
	counter(c.evictions, evicted, "capacity")
	counter(c.evictions, l.swept.expired.Load(), "idle")
	counter(c.displaced, displaced)
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(l.Len()))
	for t := range numTiers {
		ch <- prometheus.MustNewConstMetric(c.tiers, prometheus.GaugeValue, float64(l.swept.tiers[t].Load()), t.String())
		for u := range numTiers {
			if v := trans[t*numTiers+u]; v > 0 {
				counter(c.transitions, v, t.String(), u.String())
			}
		}
	}
}
