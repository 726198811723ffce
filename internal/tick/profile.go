package tick

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/spike"
)

// Learned profiles (GATE_THRESHOLD_MODE=adaptive, limit.Config.Adaptive). A team's profile
// lives at ProfileKeyFor, in the slot of its counters. A read marked Read.Profile fetches
// it in the MGET the read goes in anyway, with the team's count of the window two back when
// this gate may fold it (Read.Fold); what ApplyProfile folds goes in the next tick's
// pipeline, in one profileScript per lane and KeysPerCommand keys, a compare-and-set on
// the stored profile's epoch. No tick makes a round trip it would not make in static mode.

// ProfileTTL is how long a profile outlives its last fold: a team silent for a week
// starts learning again.
const ProfileTTL = limit.ProfileTTL

// profileScript sets each KEYS[i] to ARGV[2i+1] (a spike.Profile's binary form) if the
// key is absent or its first 8 bytes (the epoch) are ARGV[2i] (empty: it was absent when
// read), and gives it a TTL of ARGV[1] ms. A gate that lost the race to another leaves
// the other's: both folded the same counts into the same profile, or the other folded a
// later window. Returns how many it set. A key of the wrong type (an operator's error) is
// left as it is, on its own (redis.pcall), as a counter's is: the other keys are set all
// the same, and its error is the reply, counted and logged with the pipeline's. A write
// refused (OOM, READONLY) stops the script at the first SET.
const profileScript = `
local n = 0
local err
for i, k in ipairs(KEYS) do
  local want = ARGV[2*i]
  local cur = redis.pcall('GET', k)
  if type(cur) == 'table' and cur.err then
    err = cur
  elseif not cur or (want ~= '' and string.sub(cur, 1, 8) == want) then
    redis.call('SET', k, ARGV[2*i+1], 'PX', ARGV[1])
    n = n + 1
  end
end
if err then return err end
return n
`

// ProfileKeyFor returns the key of team's learned profile for the given topology:
// {prefix}:{team}:profile, or in cluster mode {prefix}:{sN}:{team}:profile, in the slot of
// the team's counters and hold flag.
func ProfileKeyFor(m Mode, prefix, team string) string {
	return string(append(appendTeamKey(make([]byte, 0, len(prefix)+len(team)+24), m, prefix, team), ":profile"...))
}

// profileWrite is one folded profile to set, on a lane's node.
type profileWrite struct {
	lane int
	key  string
	old  string // the stored profile's epoch bytes when read; empty: absent
	val  string
}

// profileCmd is one profileScript sent, for n profiles.
type profileCmd struct {
	cmd  *redis.Cmd
	n    int
	lane int
}

// planProfiles puts every limiter's folded profiles into the plans of their lanes'
// instances. They were folded by the last tick's reads.
func (t *Ticker) planProfiles() {
	for li := range t.limits {
		ls := &t.limits[li]
		for _, w := range ls.profiles {
			b, _ := w.Profile.MarshalBinary()
			var old string
			if w.Exists {
				old = string(binary.LittleEndian.AppendUint64(nil, uint64(w.Old))) // as MarshalBinary starts
			}
			ln := t.laneFor(w.Team)
			p := &t.plans[t.lanes[ln].inst]
			p.profiles = append(p.profiles, profileWrite{ln, ProfileKeyFor(t.cfg.Mode, ls.prefix, w.Team), old, string(b)})
		}
		clear(ls.profiles)
		ls.profiles = ls.profiles[:0]
	}
}

// queueProfiles adds p's profile writes to the pipelines: one script per lane and
// KeysPerCommand profiles.
func (t *Ticker) queueProfiles(ctx context.Context, pipes []redis.Pipeliner, p *plan) {
	if len(p.profiles) == 0 {
		return
	}
	byLane := make(map[int][]profileWrite)
	for _, w := range p.profiles {
		byLane[w.lane] = append(byLane[w.lane], w)
	}
	ttl := ProfileTTL.Milliseconds()
	for ln, ws := range byLane {
		for len(ws) > 0 {
			n := min(len(ws), t.cfg.KeysPerCommand)
			keys := make([]string, n)
			args := make([]any, 1, 1+2*n)
			args[0] = ttl
			for i, w := range ws[:n] {
				keys[i] = w.key
				args = append(args, w.old, w.val)
			}
			p.pcmds = append(p.pcmds, profileCmd{pipes[t.partOf[ln]].Eval(ctx, profileScript, keys, args...), n, ln})
			ws = ws[n:]
		}
	}
}

// profileResults counts the profile writes set and lost. One that failed is not counted
// here: its error is one of the pipeline's causes (execute), counted once a pipeline and
// cause. A write lost or failed is harmless: the fold is not taken up, and the team's next
// fold covers both periods (spike.FoldScheduled).
func (t *Ticker) profileResults(p *plan) {
	for _, c := range p.pcmds {
		set, err := c.cmd.Int()
		if err != nil {
			continue
		}
		t.m.profiles.WithLabelValues("set").Add(float64(set))
		t.m.profiles.WithLabelValues("lost").Add(float64(c.n - int(set)))
	}
}

// readKeys is how many keys a read takes in an MGET, at most: its two counters and hold
// flag, and its profile and count of two windows back when it asks for them.
func readKeys(r *limit.Read) int {
	if r.Profile {
		return 5
	}
	return 3
}

// readCost is how many keys r's MGET carries (appendReadKeys), as the tick's key budget
// counts them.
func readCost(r *limit.Read) int {
	n := 2
	for _, b := range [...]bool{r.Hold, r.Profile, r.Fold} {
		if b {
			n++
		}
	}
	return n
}

// appendReadKeys appends the keys rr reads, in the order applyRead takes them.
func (t *Ticker) appendReadKeys(keys []string, rr readRef) []string {
	r := rr.r
	prefix := t.limits[rr.lim].prefix
	keys = append(keys, t.key(rr.lim, r.Team, r.Epoch), t.key(rr.lim, r.Team, r.Epoch-1))
	if r.Hold {
		keys = append(keys, HoldKeyFor(t.cfg.Mode, prefix, r.Team))
	}
	if r.Profile {
		keys = append(keys, ProfileKeyFor(t.cfg.Mode, prefix, r.Team))
	}
	if r.Fold {
		keys = append(keys, t.key(rr.lim, r.Team, r.Epoch-2))
	}
	return keys
}

// profileVals is how many of a read's values are its profile's: the profile, and the
// count folded.
func profileVals(r *limit.Read) int {
	switch {
	case r.Fold:
		return 2
	case r.Profile:
		return 1
	}
	return 0
}

// applyProfile hands the profile a read fetched (vals: the profile, then the count of two
// windows back when the read asked for it) to the limiter, and keeps what it folded for
// the next tick's pipeline. instance is where they were read (laneInstance).
func (t *Ticker) applyProfile(instance string, rr readRef, vals []any, now time.Time) {
	ls := &t.limits[rr.lim]
	var p spike.Profile
	found := false
	switch v := vals[0].(type) {
	case nil:
	case string:
		if err := p.UnmarshalBinary([]byte(v)); err != nil {
			t.unreadable(instance, valueProfile, ProfileKeyFor(t.cfg.Mode, ls.prefix, rr.r.Team), v, err)
			ls.l.RefuseProfile(rr.r) // looked at again a fold period on
			return
		}
		found = true
	default:
		t.unreadable(instance, valueProfile, ProfileKeyFor(t.cfg.Mode, ls.prefix, rr.r.Team), v, nil)
		ls.l.RefuseProfile(rr.r)
		return
	}
	var count int64
	if rr.r.Fold {
		c, err := counterValue(vals[1])
		if err != nil {
			t.unreadable(instance, valueCounter, t.key(rr.lim, rr.r.Team, rr.r.Epoch-2), vals[1], nil)
			ls.l.RefuseProfile(rr.r)
			return
		}
		count = c
	}
	if w, ok := ls.l.ApplyProfile(rr.r, p, found, count, now); ok && !t.withholdProfile(ls) {
		ls.profiles = append(ls.profiles, w)
	}
}

// logSpikes logs the spikes a sweep saw start and end.
func (t *Ticker) logSpikes(ls *limitState) {
	for _, s := range ls.sweep.Spikes {
		if s.Started {
			t.log.Info("spike started: team over its learned threshold", "team", s.Team,
				"threshold", s.Threshold, "baseline", fmt.Sprintf("%.1f", s.Baseline))
			continue
		}
		if s.Relearned {
			t.log.Info("spike ended: it lasted GATE_ADAPTIVE_MAX_SPIKE, team re-learned at its new volume", "team", s.Team,
				"threshold", s.Threshold, "new_threshold", s.NewThreshold, "baseline", fmt.Sprintf("%.1f", s.Baseline),
				"duration", s.At.Sub(s.Since).Round(time.Second), slog.Time("since", s.Since))
			continue
		}
		t.log.Info("spike ended", "team", s.Team, "threshold", s.Threshold,
			"baseline", fmt.Sprintf("%.1f", s.Baseline), "duration", s.At.Sub(s.Since).Round(time.Second), slog.Time("since", s.Since))
	}
}

// logRotations logs the teams a sweep found rotating identities, or no longer: once each
// way, with the limiter's key prefix (a rule's: {prefix}:rule:{name}). now is the
// limiter's clock's, the one a rotation's Since is read on, which need not be the wall
// clock (time comes in as an argument: a fake clock's, say).
func (t *Ticker) logRotations(ls *limitState, now time.Time) {
	for _, r := range ls.sweep.Rotations {
		if r.Started {
			t.log.Warn("team rotating identities: more distinct keys in a window than the rule's max_keys; its keys under the floor now "+rotationDoes(r.Action),
				"key_prefix", ls.prefix, "team", r.Team, "keys", r.Keys, "on_cardinality", r.Action.String())
			continue
		}
		t.log.Info("team no longer rotating identities: a window ended under the rule's max_keys", "key_prefix", ls.prefix, "team", r.Team,
			"keys", r.Keys, "duration", now.Sub(r.Since).Round(time.Second))
	}
}

// overfullLogEvery is how often at most a limiter's cache growing past its capacity is
// logged: it grows for as long as the keys it may not evict last, and the metric counts
// every insert.
const overfullLogEvery = time.Hour

// logOverfull logs that ls's cache grew past its capacity since the last sweep (every key
// it looked at could be over its limit), once an hour at most. It gives the fullest
// cache's teams: the capacity bounds each window's cache under the event clock, and every
// window's added up (Sweep.Entries) made a cache look over it that was not.
func (t *Ticker) logOverfull(ls *limitState, now time.Time) {
	n := ls.sweep.Overfull
	grew := n > ls.overfull
	ls.overfull = n
	if !grew || !ls.overfullLogged.IsZero() && now.Sub(ls.overfullLogged) < overfullLogEvery {
		return
	}
	ls.overfullLogged = now
	t.log.Warn("limiter cache past its capacity: every key it looked at to evict could be over its limit; "+
		"it grows rather than forget one (gate_limiter_cache_overfull_total; logged once an hour at most)",
		"key_prefix", ls.prefix, "capacity", ls.l.Config().Capacity, "cached", ls.sweep.Fullest)
}

func rotationDoes(a limit.CardinalityAction) string {
	switch a {
	case limit.CardinalityOverflow:
		return "go to overflow"
	case limit.CardinalityTag:
		return "are tagged"
	}
	return "count as one key, the team's (TEAM:)"
}
