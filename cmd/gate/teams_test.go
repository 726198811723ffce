package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
)

func TestTeamAPI(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100, Overrides: map[string]int64{"whale": 10}}, clock.NewFake(t0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		lim.CheckAt(t0, "whale", 1)
	}
	for range 5 {
		lim.CheckAt(t0, "minnow", 1)
	}
	mux := newMux(prometheus.NewRegistry(), nil, &teamAPI{lim: lim})
	get := func(path string, v any) int {
		t.Helper()
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if v != nil {
			if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
				t.Fatalf("GET %s: %v\n%s", path, err, rec.Body)
			}
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET %s: content type %q", path, ct)
		}
		return rec.Code
	}

	var whale teamJSON
	if code := get("/v1/teams/whale", &whale); code != http.StatusOK {
		t.Fatalf("GET /v1/teams/whale: %d", code)
	}
	l := whale.Limits[0]
	if whale.Team != "whale" || !whale.Limited || len(whale.Limits) != 1 || l.Window != "1m0s" || l.Threshold != 10 ||
		!l.Override || l.Level != 40 || l.Pressure != 4 || l.Pending != 40 || l.Tier != "hot" || !l.Limited ||
		l.EstimateAgeSeconds != nil || l.SecondsUntilUnder != 180 {
		t.Errorf("whale: %+v", whale)
	}

	var top struct{ Teams []teamJSON }
	if code := get("/v1/teams?top=1", &top); code != http.StatusOK || len(top.Teams) != 1 || top.Teams[0].Team != "whale" {
		t.Errorf("top 1: %d %+v", code, top)
	}
	if code := get("/v1/teams", &top); code != http.StatusOK || len(top.Teams) != 2 || top.Teams[1].Team != "minnow" {
		t.Errorf("top: %d %+v", code, top)
	}
	var e map[string]string
	for _, bad := range []string{"0", "-1", "x", fmt.Sprint(maxTop + 1)} {
		if code := get("/v1/teams?top="+bad, &e); code != http.StatusBadRequest || e["error"] == "" {
			t.Errorf("top=%s: %d %v", bad, code, e)
		}
	}
	if code := get("/v1/teams/nobody", &e); code != http.StatusNotFound || e["error"] == "" {
		t.Errorf("unknown team: %d %v", code, e)
	}
	if lim.Len() != 2 {
		t.Errorf("the view cached a team: %d cached", lim.Len())
	}
}
