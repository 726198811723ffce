package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/capturegate/gate/internal/limit"
)

// Team view defaults: GET /v1/teams?top=N.
const (
	defaultTop = 20
	maxTop     = 1000
)

// teamAPI serves the read-only per-team view: GET /v1/teams/{team} and
// GET /v1/teams?top=N. It reads the limiter only; nothing it does counts a record or
// changes a decision.
type teamAPI struct {
	lim *limit.Limiter
}

// teamJSON is one team on this gate. Limits is a list so that a gate with several limits
// per team reports each; today there is one.
type teamJSON struct {
	Team    string      `json:"team"`
	Limited bool        `json:"limited"`
	Limits  []limitJSON `json:"limits"`
}

type limitJSON struct {
	Window    string  `json:"window"`
	Threshold int64   `json:"threshold"`
	Override  bool    `json:"override"`
	Level     float64 `json:"level"`
	Pressure  float64 `json:"pressure"`
	// GlobalEstimate is the fleet-wide estimate at the last read from Redis, and
	// EstimateAgeSeconds its age (null: never read, the level is this gate's counts only).
	GlobalEstimate     float64  `json:"global_estimate"`
	EstimateAgeSeconds *float64 `json:"estimate_age_seconds"`
	Pending            int64    `json:"pending"`
	Tier               string   `json:"tier"`
	Limited            bool     `json:"limited"`
	// SecondsUntilUnder is how long the level takes to drain under the threshold if the
	// team sends nothing more (0 when it is under).
	SecondsUntilUnder float64 `json:"seconds_until_under"`
}

func (a *teamAPI) view(now time.Time, s limit.TeamState) teamJSON {
	l := limitJSON{
		Window:            a.lim.Config().Window.String(),
		Threshold:         s.Threshold,
		Override:          s.Override,
		Level:             s.Level,
		Pressure:          s.Pressure(),
		GlobalEstimate:    s.Estimate,
		Pending:           s.Pending,
		Tier:              s.Tier.String(),
		Limited:           s.Limited,
		SecondsUntilUnder: s.UnderIn.Seconds(),
	}
	if !s.ReadAt.IsZero() {
		age := now.Sub(s.ReadAt).Seconds()
		l.EstimateAgeSeconds = &age
	}
	return teamJSON{Team: s.Team, Limited: s.Limited, Limits: []limitJSON{l}}
}

func (a *teamAPI) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/teams/{team}", a.team)
	mux.HandleFunc("GET /v1/teams", a.top)
}

func (a *teamAPI) team(w http.ResponseWriter, r *http.Request) {
	now := a.lim.Clock().Now()
	s, ok := a.lim.Snapshot(now, r.PathValue("team"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{
			"error": "team not cached on this gate: it has sent nothing here lately (each gate sees the teams of the partitions it owns)",
		})
		return
	}
	writeJSON(w, http.StatusOK, a.view(now, s))
}

func (a *teamAPI) top(w http.ResponseWriter, r *http.Request) {
	n := defaultTop
	if v := r.URL.Query().Get("top"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > maxTop {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "top must be a whole number from 1 to " + strconv.Itoa(maxTop)})
			return
		}
	}
	now := a.lim.Clock().Now()
	out := struct {
		Teams []teamJSON `json:"teams"`
	}{Teams: []teamJSON{}}
	for _, s := range a.lim.Top(now, n) {
		out.Teams = append(out.Teams, a.view(now, s))
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
