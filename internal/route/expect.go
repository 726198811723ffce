package route

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Which keys Expect marks: those of at least expectMinRecords of
// the records it is given, at most expectMaxKeys of them (the keys of most records
// first), found among the first expectMaxTracked distinct keys.
const (
	expectMinRecords = 2
	expectMaxKeys    = 4096
	expectMaxTracked = 1 << 16
)

// Expect marks the keys by which the router's enforced rules would check recs for a read
// at the limiters' next tick whatever their level, putting them in the caches, uncounted,
// if they are not there (limit.Limiter.Expect), and returns how many it marked (a key
// whose read a limiter applied within the last tick is not). A gate calls it, then the
// tick's TickNow, before routing the records waiting in partitions it takes over: a team
// the fleet holds in overflow, or has over its limit, is then limited from its first
// waiting record, where it was first contact (or judged on what this gate alone had
// seen of it), admitted by this gate's own count until the tick's next read, its backlog
// routed in the meanwhile (up to its whole threshold, docs/design.md).
//
// Only the keys of at least two of recs are marked, at most 4,096, those of most records
// first: a team that sends a fresh key on every record (a distinct_id a record) fills no
// cache, nor costs a read, and a key of one waiting record is judged as first contact,
// one record. Keys are read as RouteInto reads them (a rule's match, then its key; a
// record no rule can read is skipped), each rule as if it were the only one: a rule a
// record would not be checked by (an earlier one sends it away) still has its key read,
// which costs a read and changes nothing. Shadow rules are left out. It counts nothing,
// in the limiters or the metrics, and changes nothing of where recs go; under the event
// clock it does nothing (limit.Limiter.Expect). s is the caller's Scratch, as
// RouteInto's, and holds nothing of it after.
func (r *Router) Expect(now time.Time, recs []*kgo.Record, s *Scratch) int {
	if r.event {
		return 0 // the limiters read by each record's window: they expect nothing
	}
	s.own(r)
	type ruleKey struct {
		rule int
		key  string
	}
	// Counts by pointer: assigning to a string key present already stores the new key's
	// string in the map, which here would be the record's bytes, not the copy.
	counts := map[ruleKey]*int{}
	for _, rec := range recs {
		s.touchedRule, s.ahead.ok, s.hashed = -1, false, 0
		var js string
		noJSON := false
		if r.plan.shared {
			var failed reasonCode
			if js, failed = r.rulesJSON(rec, s); failed != reasonNone {
				if r.plan.enforcedJSON {
					continue // dead-lettered: no rule checks it
				}
				noJSON = true
			}
		}
		for i := range r.rules {
			st := &r.rules[i]
			if st.Shadow {
				continue
			}
			if len(st.Match) > 0 {
				if matched, mf, _ := r.matchOf(st, rec, js, noJSON, s); !matched || mf != reasonNone {
					continue
				}
			}
			key, kf := r.read(&st.Key, rec, js, noJSON, s, r.maxKey)
			if kf != reasonNone {
				continue
			}
			if n, ok := counts[ruleKey{i, key}]; ok {
				*n++
			} else if len(counts) < expectMaxTracked {
				// A copy: key may alias the record or s's buffers.
				counts[ruleKey{i, strings.Clone(key)}] = new(1)
			}
		}
	}
	keys := make([]ruleKey, 0, len(counts))
	for k, n := range counts {
		if *n >= expectMinRecords {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b ruleKey) int {
		return cmp.Or(cmp.Compare(*counts[b], *counts[a]), cmp.Compare(a.rule, b.rule), strings.Compare(a.key, b.key))
	})
	marked := 0
	for _, k := range keys[:min(len(keys), expectMaxKeys)] {
		m := false
		for _, l := range r.rules[k.rule].Limiters {
			m = l.Expect(now, k.key) || m
		}
		if m {
			marked++
		}
	}
	return marked
}
