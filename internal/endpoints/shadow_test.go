package endpoints

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/gate"
)

// A key over a shadow rule only is not limited: the rule never changes where a record
// goes. The view said "limited": true for it (gate team printed LIMITED) and ranked it
// above the keys an enforced rule limits, so that ?top=N could leave out a team whose
// records go to overflow. The shadow rule's row still says what the rule would do, and
// that it is a shadow's.
func TestTeamViewShadowRuleLimitsNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	body := "rules:\n  - {name: trial, key: json:team_id, limits: [1m:10], shadow: true}\n  - {name: team, key: json:team_id, limits: [1m:100]}\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1", // never dialled: gate.New connects to nothing
		"GATE_REDIS_URLS":    "redis://127.0.0.1:1/0",
		"GATE_RULES_FILE":    path,
		"GATE_TEAM_API":      "true",
	}
	cfg, err := config.Load(func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	g, err := gate.New(cfg, log, gate.Options{Writer: "shadow-view"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Consumer.Close(); g.CloseRedis(log) })
	rs := g.CurrentRules()
	trial, team := rs[0].Lims[0], rs[1].Lims[0]
	now := time.Now()
	for range 50 {
		trial.CheckAt(now, "tried", 1) // 5 x the shadow rule's threshold
	}
	for range 150 {
		team.CheckAt(now, "over", 1) // 1.5 x the enforced rule's
	}
	mux := NewMux(prometheus.NewRegistry(), nil, TeamsFor(cfg, g))
	get := func(path string, v any) {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	var tried struct {
		Limited bool
		Limits  []map[string]any
	}
	get("/v1/teams/tried", &tried)
	if tried.Limited || len(tried.Limits) != 1 || tried.Limits[0]["limited"] != true || tried.Limits[0]["shadow"] != true {
		t.Errorf("a key over a shadow rule only: %+v; want limited false, its row limited (what the rule would do) and shadow", tried)
	}
	var top TopAnswer
	get("/v1/teams?top=2", &top)
	if len(top.Teams) != 2 || top.Teams[0].Team != "over" || !top.Teams[0].Limited || top.Teams[1].Limited {
		t.Errorf("?top=2: %+v; want over (limited by rule team) first, then tried (over the shadow rule only, not limited)", top.Teams)
	}
}
