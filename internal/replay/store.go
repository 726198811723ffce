package replay

import (
	"strings"
	"time"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/spike"
)

// store is one limiter's shared store as a fleet of gates keeps it in Redis, in memory:
// each key's count per window, the hold flags and the learned profiles, each expiring
// as the tick sets it to. Replay sweeps
// its limiter on the tick's schedule (in event time) and applies every read planned from
// what the store holds, as the tick does, so a learned threshold is folded and a hold
// shared as the fleet would have them. Counting needs none of it: one process seeing
// every record counts every key exactly, and an entry never read judges on its own
// counts (limit's event.go).
type store struct {
	l        *limit.Limiter
	sw       limit.Sweep
	counts   map[int64]map[string]*int64 // epoch → key → the fleet's count
	holds    map[string]heldFlag
	profiles map[string]storedProfile
	pruneAt  time.Time // when forget next drops the profiles that expired
	hold     time.Duration
}

// storedProfile is a learned profile and when the store lets it expire: the tick writes
// each with limit.ProfileTTL, so a team silent for a week starts learning again.
type storedProfile struct {
	p       spike.Profile
	expires time.Time
}

// heldFlag is a hold flag and when the store lets it expire (it is set with the hold's
// lifetime, refreshed while the key is over its release level).
type heldFlag struct {
	f       limit.HoldFlag
	expires time.Time
}

func newStore(l *limit.Limiter) *store {
	return &store{l: l, counts: map[int64]map[string]*int64{}, holds: map[string]heldFlag{},
		profiles: map[string]storedProfile{}, hold: l.DivertHold()}
}

// writePhase is the first half of the tick's work at now: sweep, write the counts, set
// the hold flags. readPhase, the tick's read delay later, applies the reads with their
// flags and profiles, keeps the profiles folded, and forgets the windows no record may
// count in any more.
func (s *store) writePhase(now time.Time) {
	s.l.Sweep(now, &s.sw)
	s.write(now)
}

func (s *store) readPhase(now time.Time) {
	s.read(now)
	s.forget(now)
}

// flush is the final tick: every count written, cold keys' too.
func (s *store) flush(now time.Time) {
	s.l.SweepAll(now, &s.sw)
	s.write(now)
}

func (s *store) write(now time.Time) {
	for _, c := range s.sw.Counts {
		m := s.counts[c.Epoch]
		if m == nil {
			m = map[string]*int64{}
			s.counts[c.Epoch] = m
		}
		// A key's string aliases the limiter's table: the store keeps a copy of its own
		// (an assignment to m[c.Team] would put the alias in as the key), and adds
		// through the pointer.
		if n := m[c.Team]; n != nil {
			*n += c.N
		} else {
			n := c.N
			m[strings.Clone(c.Team)] = &n
		}
	}
	for _, f := range s.sw.Holds {
		f.Team = strings.Clone(f.Team)
		s.holds[f.Team] = heldFlag{f, now.Add(s.hold)}
	}
}

func (s *store) read(now time.Time) {
	adaptive := s.l.Adaptive() != nil
	for i := range s.sw.Reads {
		r := &s.sw.Reads[i]
		// Fresh: every count of the tick is in the store before any read, as when every
		// gate of a fleet writes before it reads.
		r.Fresh = true
		s.l.ApplyRead(r, s.count(r.Epoch, r.Team), s.count(r.Epoch-1, r.Team), now)
		// The profile before the hold flag, as the tick: a first look sets the learned
		// threshold a flag is judged by.
		if adaptive && r.Profile {
			sp, found := s.profiles[r.Team]
			found = found && now.Before(sp.expires)
			p := sp.p
			if !found {
				p = spike.Profile{}
			}
			var n int64
			if r.Fold {
				n = s.count(r.Epoch-2, r.Team)
			}
			// As the tick's script: set only if the stored profile is still the one folded.
			if w, ok := s.l.ApplyProfile(r, p, found, n, now); ok && found == w.Exists && (!found || p.Epoch == w.Old) {
				s.profiles[strings.Clone(w.Team)] = storedProfile{w.Profile, now.Add(limit.ProfileTTL)}
			}
		}
		if r.Hold {
			if h, ok := s.holds[r.Team]; ok && now.Before(h.expires) {
				s.l.ApplyHold(r, h.f)
			}
		}
	}
}

// count is the fleet's count of key in epoch.
func (s *store) count(epoch int64, key string) int64 {
	if n := s.counts[epoch][key]; n != nil {
		return *n
	}
	return 0
}

// forget drops the windows older than any the limiter still reads (a fold reads two
// back), and the hold flags and profiles that expired.
func (s *store) forget(now time.Time) {
	oldest := s.l.OldestEpoch(now) - 2
	for ep := range s.counts {
		if ep < oldest {
			delete(s.counts, ep)
		}
	}
	for k, h := range s.holds {
		if !now.Before(h.expires) {
			delete(s.holds, k)
		}
	}
	// Profiles, a team's each, once an hour: a read takes one that expired for none
	// (read), so this only bounds their memory, and a look at every team a tick would
	// cost a long replay of many teams more than its routing.
	if !now.Before(s.pruneAt) {
		for k, p := range s.profiles {
			if !now.Before(p.expires) {
				delete(s.profiles, k)
			}
		}
		s.pruneAt = now.Add(time.Hour)
	}
}
