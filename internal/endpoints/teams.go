package endpoints

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jellydator/ttlcache/v3"

	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/keypart"
	"github.com/capturegate/gate/internal/limit"
)

// Team view defaults: GET /v1/teams?top=N.
const (
	defaultTop = 20
	// MaxTop is the most teams ?top=N (and gate team -top N) answers with.
	MaxTop = 1000
	// topCacheTTL is how long an answer to GET /v1/teams?top=N is served again: ranking
	// sorts every cached team (tens of milliseconds at 300k teams), and a dashboard or a
	// few operators polling it must not cost that on each request.
	topCacheTTL = time.Second
	// topCacheEntries bounds the answers kept: one per N asked within a second.
	topCacheEntries = 64
)

// TeamAPI serves the read-only per-team view: GET /v1/teams/{team} and
// GET /v1/teams?top=N. It reads the limiter only; nothing it does counts a record or
// changes a decision. Answers to ?top=N are at most topCacheTTL old (by the limiter's
// clock); a single team's are computed on each request.
type TeamAPI struct {
	// rules are the limiters the view reads, asked on each request (a rules file's reload
	// replaces them): with GATE_RULES_FILE one entry per rule, without it one unnamed
	// entry, the limit and GATE_LIMITS' (FixedRules). A key has one row per limit of
	// each rule that has state for it.
	rules func() []gate.RuleLimits
	// tops holds the encoded answer per N with when it was computed; nil until first
	// used (NewTeamAPI). An answer expires twice topCacheTTL (wall clock) after it is
	// made and is deleted by a timer set with it (top); whether an answer is fresh is
	// decided by the limiter's clock, so tests drive it.
	tops *ttlcache.Cache[int, cachedTop]
	// gate names the limits this gate enforces, so an answer says whose it is.
	gate GateJSON
	// notReady is /readyz's reasons (nil: not known, as without a Readiness): a gate not
	// ready may have cached no team because it reads nothing yet, and a 404 or an empty
	// ?top=N says so rather than blame the team's traffic.
	notReady func() []string
}

// FixedRules is the view's limiters of a gate without rules: lim, then extra.
func FixedRules(lim *limit.Limiter, extra ...*limit.Limiter) func() []gate.RuleLimits {
	rs := []gate.RuleLimits{{Lims: append([]*limit.Limiter{lim}, extra...)}}
	return func() []gate.RuleLimits { return rs }
}

// GateJSON names the gate that answers and the fleet it counts in: gates share a limit
// exactly when they share a Redis prefix, so an operator reading one gate's view (or
// setting an override, whose key is under the prefix) knows which fleet it is about.
type GateJSON struct {
	RedisPrefix   string `json:"redis_prefix"`
	ConsumerGroup string `json:"consumer_group"`
}

// cachedTop is one encoded answer to ?top=N and the limiter-clock time it was made.
type cachedTop struct {
	at   time.Time
	body []byte
}

// NewTeamAPI returns the team view over the limiters rules gives, answered as gate g.
func NewTeamAPI(g GateJSON, rules func() []gate.RuleLimits) *TeamAPI {
	return &TeamAPI{rules: rules, tops: newTopCache(), gate: g}
}

func newTopCache() *ttlcache.Cache[int, cachedTop] {
	return ttlcache.New(
		ttlcache.WithTTL[int, cachedTop](2*topCacheTTL),
		ttlcache.WithCapacity[int, cachedTop](topCacheEntries),
		ttlcache.WithDisableTouchOnHit[int, cachedTop](),
	)
}

// TeamJSON is one team on this gate: one entry in Limits per limit (GATE_WINDOW's first,
// then GATE_LIMITS' in order), and Limited when any of them is, but a shadow rule's. A team rotating
// identities under a rule (Rotating) has, under on_cardinality collapse, its collapsed
// key's rows as its rows of that rule, and is Limited under overflow; so does a user key
// of it that is not cached (its records are checked so), besides its own under_floor row.
type TeamJSON struct {
	Gate *GateJSON `json:"gate,omitempty"` // GET /v1/teams/{team} only: ?top=N says it once
	Team string    `json:"team"`
	// TeamQuoted is Team in Go syntax when it is not UTF-8 (a binary record key), which
	// JSON cannot hold: encoding/json writes each such byte U+FFFD, so "t\xff" and
	// "t\xfe" both read "t\ufffd", a key no gate counts.
	TeamQuoted string      `json:"team_quoted,omitempty"`
	Limited    bool        `json:"limited"`
	Limits     []LimitJSON `json:"limits"`
	// Rotating: the rules under which the team (a key's first field) rotates identities.
	Rotating []RotatingJSON `json:"rotating,omitempty"`
}

type LimitJSON struct {
	Rule string `json:"rule,omitempty"` // with rules: the rule this row is of
	// Shadow: the rule is a shadow rule. Limited says what it would do; it limits
	// nothing, and the team's Limited leaves it out.
	Shadow bool   `json:"shadow,omitempty"`
	Window string `json:"window"`
	// Unit is what Threshold, Level, GlobalEstimate and Pending count: "events", or
	// "bytes" of value (GATE_COST, a rule's cost).
	Unit      string  `json:"unit"`
	Threshold int64   `json:"threshold"`
	Override  bool    `json:"override"`
	Level     float64 `json:"level"`
	Pressure  float64 `json:"pressure"`
	// GlobalEstimate is the fleet-wide estimate at the last read from Redis, and
	// EstimateAgeSeconds its age (null: never read, the level is this gate's counts only).
	// EstimateLocal: that read failed (Redis out of reach), and the estimate is this
	// gate's own rebuild then, its age the rebuild's.
	GlobalEstimate     float64  `json:"global_estimate"`
	EstimateAgeSeconds *float64 `json:"estimate_age_seconds"`
	EstimateLocal      bool     `json:"estimate_local"`
	Pending            int64    `json:"pending"`
	Tier               string   `json:"tier"`
	Limited            bool     `json:"limited"`
	// Forced: the key is in the rule's force list (GATE_FORCE_OVERFLOW without rules), so
	// every record of it takes the rule's action whatever its level: Limited is true.
	Forced bool `json:"forced,omitempty"`
	// SecondsUntilUnder is how long the level takes to drain under the threshold if the
	// team sends nothing more (0 when it is under, and under the event clock, where that
	// depends on the partitions' event time).
	SecondsUntilUnder float64 `json:"seconds_until_under"`
	// FleetShare is this gate's share of the team's traffic as its reads measured it.
	FleetShare float64 `json:"fleet_share"`
	// DivertedSince is when the team was first held in overflow (GATE_DIVERT_HOLD), here
	// or by another gate, and ReleaseAt when its hold ends if its level stays under the
	// release level from now on; both null when it is not held.
	DivertedSince *time.Time `json:"diverted_since"`
	ReleaseAt     *time.Time `json:"release_at"`
	// ThresholdMode is GATE_THRESHOLD_MODE for this limit (static or adaptive: the primary
	// limit only), ThresholdSource where Threshold comes from (static, learned, override).
	// In adaptive mode, LearnedThreshold is the team's learned threshold and Baseline its
	// usual volume in this window (both null until learned), SpikeSince when its current
	// spike started and SpikeEnds when that spike ends by re-learning the team at its new
	// volume if it stays over (GATE_ADAPTIVE_MAX_SPIKE; both null: none), RelearnedAt when
	// a spike last ended so (null: never), PatternHoursUTC the hours of the day learned as
	// a daily pattern (a nightly import), whose thresholds follow their highest windows.
	// UnderFloor: the key is under its floor on this gate (a rule keyed by several
	// fields): counted in the rule's sketch, neither cached nor written to Redis nor read.
	// Level is then the sketch's count of it (at least its records), Floor the floor in
	// records a window; the other figures are zero.
	UnderFloor       bool       `json:"under_floor,omitempty"`
	Floor            int64      `json:"floor,omitempty"`
	ThresholdMode    string     `json:"threshold_mode"`
	ThresholdSource  string     `json:"threshold_source"`
	LearnedThreshold *int64     `json:"learned_threshold,omitempty"`
	Baseline         *float64   `json:"baseline,omitempty"`
	SpikeSince       *time.Time `json:"spike_since,omitempty"`
	SpikeEnds        *time.Time `json:"spike_ends,omitempty"`
	RelearnedAt      *time.Time `json:"relearned_at,omitempty"`
	PatternHoursUTC  []int      `json:"pattern_hours_utc,omitempty"`
}

// RotatingJSON is a team found rotating identities under a rule: more distinct keys in a
// window than the rule's max_keys.
type RotatingJSON struct {
	Rule string `json:"rule"`
	// Keys is the estimate of its distinct keys in the current window on this gate.
	Keys          int64     `json:"keys"`
	Since         time.Time `json:"since"`
	OnCardinality string    `json:"on_cardinality"`
	// Shadow: the rule is a shadow rule, whose on_cardinality sends nothing away.
	Shadow bool `json:"shadow,omitempty"`
}

// now is the limiters' clock's time.
func (a *TeamAPI) now() time.Time { return a.rules()[0].Lims[0].Clock().Now() }

// view is key's entry: a row per limit of each rule that has state for it. A key is
// checked against every limit of its rule at once, so it is cached in each, but a limiter
// may have evicted or expired it on its own: then that row is left out.
func (a *TeamAPI) view(now time.Time, rs []gate.RuleLimits, key string) (TeamJSON, bool) {
	v := TeamJSON{Team: key}
	if !utf8.ValidString(key) {
		v.TeamQuoted = strconv.Quote(key)
	}
	// A rule records a rotating team as its keys' first field, escaped (keypart): team
	// a:b as a%3Ab. It is asked for by its id (the team rule's key), or by that field
	// (as the rotation's log line names it).
	field := keypart.Escape(key)
	for _, rl := range rs {
		keys := []string{key}
		// A forced key takes the action on every record, its level and threshold
		// whatever: limited, as its records are, not "under its limits".
		forced := slices.Contains(rl.Force, key)
		// A user key of a rotating team, not cached: its checks answer as the team's
		// rotation says (on_cardinality), not by its own count under the floor.
		member, isMember := rl.Lims[0].RotatingFor(key)
		for _, rt := range rl.Lims[0].Rotating() {
			// The collapsed key (the field and ':'), which ?top=N names under
			// on_cardinality collapse, is the rotating team's too.
			collapsed := rt.Team + ":"
			if rt.Team != field && rt.Team != key && key != collapsed && (!isMember || member.Team != rt.Team) {
				continue
			}
			v.Rotating = append(v.Rotating, RotatingJSON{Rule: rl.Name, Keys: rt.Keys, Since: rt.Since.UTC(), OnCardinality: rt.Action.String(), Shadow: rl.Shadow})
			switch {
			case rt.Action == limit.CardinalityOverflow && !rl.Shadow:
				// The checks of its keys under the floor answer limited.
				v.Limited = true
			case rt.Action == limit.CardinalityCollapse && key != collapsed:
				// Its keys under the floor are checked as the collapsed key: that key's
				// rows are the team's under this rule, limited when its records are.
				keys = append(keys, collapsed)
			}
		}
		for _, l := range rl.Lims {
			for _, k := range keys {
				if s, ok := l.Snapshot(now, k); ok {
					row := limitView(now, l, s)
					row.Rule, row.Unit, row.Shadow = rl.Name, rl.Cost.String(), rl.Shadow
					if forced && k == key {
						row.Forced, row.Limited = true, true
					}
					v.Limits = append(v.Limits, row)
					v.Limited = v.Limited || row.Limited && !rl.Shadow
				} else if n, floor, ok := l.Untracked(now, k); ok && n > 0 && k == key {
					thr := l.Config().Threshold
					v.Limits = append(v.Limits, LimitJSON{Rule: rl.Name, Window: l.Config().Window.String(), Unit: rl.Cost.String(), Threshold: thr,
						Level: float64(n), Pressure: float64(n) / float64(thr), Tier: limit.TierOf(float64(n) / float64(thr)).String(),
						FleetShare: 1, UnderFloor: true, Floor: floor, ThresholdMode: "static", ThresholdSource: limit.SourceStatic.String(),
						Forced: forced, Limited: forced, Shadow: rl.Shadow})
					v.Limited = v.Limited || forced && !rl.Shadow
				}
			}
		}
	}
	if v.Limits == nil {
		v.Limits = []LimitJSON{} // a team only rotating: [] as ?top=N gives it, not null
	}
	return v, len(v.Limits) > 0 || len(v.Rotating) > 0
}

func limitView(now time.Time, lim *limit.Limiter, s limit.TeamState) LimitJSON {
	l := LimitJSON{
		Window:            lim.Config().Window.String(),
		Threshold:         s.Threshold,
		Override:          s.Override,
		Level:             s.Level,
		Pressure:          s.Pressure(),
		GlobalEstimate:    s.Estimate,
		Pending:           s.Pending,
		Tier:              s.Tier.String(),
		Limited:           s.Limited,
		SecondsUntilUnder: s.UnderIn.Seconds(),
		FleetShare:        s.FleetShare,
		ThresholdMode:     "static",
		ThresholdSource:   s.Source.String(),
	}
	if s.Adaptive {
		l.ThresholdMode = "adaptive"
		if s.Learned > 0 {
			lt, b := s.Learned, s.Baseline
			l.LearnedThreshold, l.Baseline = &lt, &b
		}
		if !s.SpikeSince.IsZero() {
			since, ends := s.SpikeSince.UTC(), s.SpikeEnds.UTC()
			l.SpikeSince, l.SpikeEnds = &since, &ends
		}
		if !s.Relearned.IsZero() {
			at := s.Relearned.UTC()
			l.RelearnedAt = &at
		}
		l.PatternHoursUTC = s.PatternHours
	}
	if !s.HeldSince.IsZero() {
		since, rel := s.HeldSince.UTC(), s.ReleaseAt.UTC()
		l.DivertedSince, l.ReleaseAt = &since, &rel
	}
	if !s.ReadAt.IsZero() {
		age := now.Sub(s.ReadAt).Seconds()
		l.EstimateAgeSeconds, l.EstimateLocal = &age, s.Local
	}
	return l
}

func (a *TeamAPI) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/teams/{team}", a.team)
	mux.HandleFunc("GET /v1/teams", a.top)
	// Any other path under it (/v1/teams/, /v1/teams/whale/): a 404 in JSON, as the view's
	// other answers are, giving its forms, not the router's plain "404 page not found".
	mux.HandleFunc("GET /v1/teams/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no team view at " + strconv.Quote(r.URL.EscapedPath()) +
			": a team is one path segment, /v1/teams/{team} (a / in it written %2F), and /v1/teams?top=N lists the teams"})
	})
	// Any other method: a 405 in JSON with the Allow the router sets on its own plain-text
	// "Method Not Allowed", which a script reading .error could not parse. These patterns
	// name no method, so the GET ones above win for GET and HEAD.
	notAllowed := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method " + strconv.Quote(r.Method) +
			" not allowed: the team view is read-only, GET /v1/teams/{team} and GET /v1/teams?top=N"})
	}
	mux.HandleFunc("/v1/teams", notAllowed)
	mux.HandleFunc("/v1/teams/{rest...}", notAllowed)
}

// query is r's query parameters, each of them one of known; else it answers 400, naming
// the query that does not decode or the first parameter the endpoint does not take, and
// returns false. takes says what the endpoint takes. A parameter it ignored would leave a
// mistake unseen: ?tpo=100 (a typo) answered with the default 20 teams, read as all the
// gate has; /v1/teams/a?b (a key's ? not written %3F) answered for team a.
func query(w http.ResponseWriter, r *http.Request, takes string, known ...string) (url.Values, bool) {
	// URL.Query drops a pair it cannot decode (a bad escape, a ';'): a top lost so would be
	// answered as no top at all, with the default.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "query " + strconv.Quote(r.URL.RawQuery) + ": " + err.Error()})
		return nil, false
	}
	names := slices.Sorted(maps.Keys(q))
	if i := slices.IndexFunc(names, func(k string) bool { return !slices.Contains(known, k) }); i >= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unknown query parameter " + strconv.Quote(names[i]) + ": " + takes})
		return nil, false
	}
	return q, true
}

func (a *TeamAPI) team(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r, "/v1/teams/{team} takes none (a ?, # or % in a team is written %3F, %23 or %25)"); !ok {
		return
	}
	now := a.now()
	v, ok := a.view(now, a.rules(), r.PathValue("team"))
	if !ok {
		msg := "team not cached on this gate: it has sent nothing here lately (each gate sees the teams of the partitions it owns)"
		if hint := keyHint(a.rules(), r.PathValue("team")); hint != "" {
			msg += "; " + hint
		}
		if why := a.notReadyReasons(); len(why) > 0 {
			msg += "; this gate is not ready (/readyz): " + strings.Join(why, "; ")
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": msg})
		return
	}
	v.Gate = &a.gate
	writeJSON(w, http.StatusOK, v)
}

func (a *TeamAPI) top(w http.ResponseWriter, r *http.Request) {
	n := defaultTop
	q, ok := query(w, r, "/v1/teams takes top only", "top")
	if !ok {
		return
	}
	// A top given empty (?top=, a dashboard's unset variable) or more than once is refused
	// as a bad one is, not answered with the default or the first of them.
	if vs, ok := q["top"]; ok {
		var err error
		if len(vs) != 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "top given " + strconv.Itoa(len(vs)) + " times: give it once"})
			return
		}
		if n, err = strconv.Atoi(vs[0]); err != nil || n < 1 || n > MaxTop {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "top must be a whole number from 1 to " + strconv.Itoa(MaxTop)})
			return
		}
	}
	now := a.now()
	if a.tops != nil {
		if it := a.tops.Get(n); it != nil {
			if c := it.Value(); !now.Before(c.at) && now.Sub(c.at) < topCacheTTL {
				writeBody(w, http.StatusOK, c.body)
				return
			}
		}
	}
	ans := a.rank(now, n)
	ans.NotReady = a.notReadyReasons()
	body := encodeJSON(ans)
	if a.tops != nil {
		a.tops.Set(n, cachedTop{at: now, body: body}, ttlcache.DefaultTTL)
		// ttlcache deletes an expired answer only when that N is asked again or
		// topCacheEntries others displace it (its cleanup goroutine, Start, needs a life
		// the view does not have): each N asked once was held for good, up to 64
		// answers of 1.5 MB (?top=1000 at three limits).
		time.AfterFunc(3*topCacheTTL, a.tops.DeleteExpired) // topCacheTTL after it expires
	}
	writeBody(w, http.StatusOK, body)
}

// notReadyReasons is why the gate is not ready, nil when it is or that is not known.
func (a *TeamAPI) notReadyReasons() []string {
	if a.notReady == nil {
		return nil
	}
	return a.notReady()
}

// TopAnswer is the body of GET /v1/teams?top=N.
type TopAnswer struct {
	Gate  GateJSON   `json:"gate"`
	Teams []TeamJSON `json:"teams"`
	// NotReady is /readyz's reasons while the gate is not ready: a gate starting (not
	// joined to its group yet) or stopped on a partition caches no team, or fewer, for
	// that reason and not because the teams sent nothing.
	NotReady []string `json:"not_ready,omitempty"`
}

// rank computes the answer to ?top=n at now.
func (a *TeamAPI) rank(now time.Time, n int) TopAnswer {
	out := TopAnswer{Gate: a.gate, Teams: []TeamJSON{}}
	// The top n of each limit, each key with all its rows, ranked by the highest
	// pressure over its rows.
	rs := a.rules()
	// A rotating team's collapsed key is shown as the team, by its id (view gives the team
	// that key's rows), not apart from it.
	collapsed := make(map[string]string)
	for _, rl := range rs {
		for _, rt := range rl.Lims[0].Rotating() {
			if rt.Action == limit.CardinalityCollapse {
				collapsed[rt.Team+":"] = keypart.Value(rt.Team)
			}
		}
	}
	seen := make(map[string]bool)
	add := func(key string) {
		if id, ok := collapsed[key]; ok {
			key = id
		}
		if !seen[key] {
			seen[key] = true
			if v, ok := a.view(now, rs, key); ok {
				out.Teams = append(out.Teams, v)
			}
		}
	}
	for _, rl := range rs {
		for _, l := range rl.Lims {
			for _, s := range l.Top(now, n) {
				add(s.Team)
			}
		}
		// A forced key is over whatever its level, ranked with the teams over their limits
		// (when this gate has state for it): Top, by pressure, may not name it.
		for _, k := range rl.Force {
			add(k)
		}
		// A team rotating identities may have no cached key for Top to name (under
		// on_cardinality overflow or tag its keys under the floor stay in the sketch), yet
		// overflow sends its records away: named by its id, as /v1/teams/{team} finds it.
		for _, rt := range rl.Lims[0].Rotating() {
			add(keypart.Value(rt.Team))
		}
	}
	// A shadow rule's rows rank nothing: the rule sends no record away.
	maxPressure := func(t TeamJSON) float64 {
		p := 0.0
		for _, l := range t.Limits {
			if l.Shadow {
				continue
			}
			p = max(p, l.Pressure)
			if l.Forced {
				p = math.Inf(1) // every record of it is sent away, as over its limit
			}
		}
		// Every record of its keys under the floor goes to overflow, whatever their level:
		// it is over its limit, ranked with the most pressed.
		for _, r := range t.Rotating {
			if r.OnCardinality == limit.CardinalityOverflow.String() && !r.Shadow {
				p = math.Inf(1)
			}
		}
		return p
	}
	slices.SortFunc(out.Teams, func(x, y TeamJSON) int {
		// A limited key first: one held in overflow (GATE_DIVERT_HOLD) sends every record
		// away though its pressure may have fallen near 0, as the runbook's "teams in
		// overflow" step expects to find it here.
		if x.Limited != y.Limited {
			if x.Limited {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(maxPressure(y), maxPressure(x)); c != 0 {
			return c
		}
		return cmp.Compare(x.Team, y.Team)
	})
	out.Teams = out.Teams[:min(n, len(out.Teams))]
	return out
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	writeBody(w, code, encodeJSON(v))
}

// encodeJSON is v as the view writes it: indented, with a final newline.
func encodeJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return b.Bytes()
}

func writeBody(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// keyHint says why key is no key a rule of rs builds, when it holds ':' and no rule keyed
// by several fields takes it (its values' ':' not written %3A, say): "" when one does, or
// no rule reads such keys. Asked for "phc_x:user:1", the view said the key had sent
// nothing lately, where `gate overrides` names its escaped forms.
func keyHint(rs []gate.RuleLimits, key string) string {
	if !strings.Contains(key, ":") {
		return ""
	}
	var first string
	for _, rl := range rs {
		if !rl.Key.Composite() {
			continue
		}
		err := rl.Key.CheckKey(key, 0)
		if err == nil {
			return ""
		}
		if first == "" {
			name := "GATE_KEY_FROM"
			if rl.Name != "" {
				name = "rule " + rl.Name
			}
			first = fmt.Sprintf("and it is no key %s builds: %v", name, err)
		}
	}
	return first
}
