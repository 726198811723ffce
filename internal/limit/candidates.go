package limit

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// smallCands is the most candidates a check finds its key's among by comparing the key's
// start with each: at a few, cheaper than hashing the key's team; past it, by the hash.
const smallCands = 8

// candSet is a limiter's candidate teams (cardinality.go) as its checks read them, without
// a lock: every check of a key under the floor asks it for the key's team. A lookup costs
// a few compares, or a hash of the team and a probe, however many candidates there are,
// and a nomination costs O(1) amortised. Candidacy is by records, not keys, so a lowered
// max_keys makes busy ordinary teams candidates by the thousand (max_keys 1,000 under
// 3,000 teams of 1,000 records a minute: 1,620), and a scan of them all was a check's
// whole cost (22 µs against 167 ns) while each nomination copied the list.
//
// Invariant: a published set never changes in a way its readers can tell, but for an
// empty slot of tab filled, which a reader then finds as it would in the next set (a
// candidate found a record earlier or later). list's array is shared with the next set,
// which appends past this one's length only. Writers hold cardinality.mu.
type candSet struct {
	list []*rotation // every candidate, in nomination order
	tab  []atomic.Pointer[rotation]
	// tab: nil while list has smallCands or fewer; else by the team's hash (rotation.h),
	// linear probing, a power of two long and at most half full, so a probe ends at an
	// empty slot.
	filled int          // tab's filled slots
	seed   maphash.Seed // the limiter's, which rotation.h is of
}

// newCandSet is a set of list, which it keeps.
func newCandSet(list []*rotation, seed maphash.Seed) *candSet {
	cs := &candSet{list: list, seed: seed}
	if len(list) > smallCands {
		cs.tab = make([]atomic.Pointer[rotation], 4<<bitsFor(len(list)))
		for _, r := range list {
			cs.put(r)
		}
	}
	return cs
}

// bitsFor is the bits that can count to n: 1<<bitsFor(n) > n.
func bitsFor(n int) uint {
	b := uint(0)
	for n>>b != 0 {
		b++
	}
	return b
}

// put puts r in tab, which has room.
func (cs *candSet) put(r *rotation) {
	mask := uint64(len(cs.tab) - 1)
	for i := r.h & mask; ; i = (i + 1) & mask {
		if cs.tab[i].Load() == nil {
			cs.tab[i].Store(r)
			cs.filled++
			return
		}
	}
}

// with is the set with r added, for the writer to publish; cs (nil: none) stays as its
// readers see it.
func (cs *candSet) with(r *rotation, seed maphash.Seed) *candSet {
	if cs == nil {
		return newCandSet([]*rotation{r}, seed)
	}
	list := append(cs.list, r)
	if cs.tab == nil || 2*(cs.filled+1) > len(cs.tab) {
		return newCandSet(list, seed)
	}
	next := &candSet{list: list, tab: cs.tab, filled: cs.filled, seed: seed}
	next.put(r)
	return next
}

// team is the candidate team (hash th) when there is one.
func (cs *candSet) team(team string, th uint64) *rotation {
	if cs.tab == nil {
		for _, c := range cs.list {
			if c.h == th && c.team == team {
				return c
			}
		}
		return nil
	}
	mask := uint64(len(cs.tab) - 1)
	for i := th & mask; ; i = (i + 1) & mask {
		c := cs.tab[i].Load()
		if c == nil || c.h == th && c.team == team {
			return c
		}
	}
}

// of is key's candidate, the team its first part is, when there is one; a collapsed key
// (the team followed by ':') is its team's. hashed reports whether it hashed the team
// (team, th) for that: a caller that needs the hash too has it.
func (cs *candSet) of(key string) (r *rotation, team string, th uint64, hashed bool) {
	if cs.tab == nil {
		for _, c := range cs.list {
			if strings.HasPrefix(key, c.collapsed) {
				return c, "", 0, false
			}
		}
		return nil, "", 0, false
	}
	i := strings.IndexByte(key, ':')
	if i < 0 {
		return nil, "", 0, false // a team alone: no key of a candidate's (they have a ':')
	}
	team = key[:i]
	th = maphash.String(cs.seed, team)
	return cs.team(team, th), team, th, true
}
