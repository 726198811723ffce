package endpoints

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
)

// topOf asks mux for ?top=n and returns the team names, in order.
func topOf(t testing.TB, mux http.Handler, n int) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams?top="+strconv.Itoa(n), nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET ?top=%d: %d %s", n, rec.Code, rec.Body)
	}
	var out struct{ Teams []TeamJSON }
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tm := range out.Teams {
		names = append(names, tm.Team)
	}
	return names
}

// An answer to ?top=N is served again for up to a second of the limiter's clock, per N;
// after that the ranking is computed afresh.
func TestTeamTopCachedForASecond(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewFake(t0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		lim.CheckAt(t0, "first", 1)
	}
	mux := NewMux(prometheus.NewRegistry(), nil, NewTeamAPI(GateJSON{}, FixedRules(lim)))
	if got := topOf(t, mux, 1); len(got) != 1 || got[0] != "first" {
		t.Fatalf("top 1 = %v, want [first]", got)
	}
	// A team overtakes it: within the second the cached answer stands.
	for range 90 {
		lim.CheckAt(t0, "second", 1)
	}
	clk.Advance(999 * time.Millisecond)
	if got := topOf(t, mux, 1); len(got) != 1 || got[0] != "first" {
		t.Errorf("top 1 within the second = %v, want the cached [first]", got)
	}
	// Another N is its own answer, computed now.
	if got := topOf(t, mux, 2); len(got) != 2 || got[0] != "second" {
		t.Errorf("top 2 = %v, want second first", got)
	}
	// A second after it was made, the answer is made again.
	clk.Advance(time.Millisecond)
	if got := topOf(t, mux, 1); len(got) != 1 || got[0] != "second" {
		t.Errorf("top 1 after a second = %v, want [second]", got)
	}
	// A clock set back does not serve an answer from its future.
	clk.Set(t0)
	if got := topOf(t, mux, 1); len(got) != 1 {
		t.Errorf("top 1 after the clock went back = %v", got)
	}
}

// BenchmarkTeamTop: GET /v1/teams?top=20 over 300k cached teams, computed on each request
// (uncached) and served from the one-second cache (cached).
func BenchmarkTeamTop(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	lim, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, clock.NewFake(t0), nil)
	if err != nil {
		b.Fatal(err)
	}
	const teams = 300_000
	for i := range teams {
		lim.CheckAt(t0, "team-"+strconv.Itoa(i), int64(1+i%997))
	}
	for _, bc := range []struct {
		name string
		api  *TeamAPI
	}{
		{"uncached", &TeamAPI{rules: FixedRules(lim)}},
		{"cached", NewTeamAPI(GateJSON{}, FixedRules(lim))},
	} {
		b.Run(bc.name+"/teams=300k", func(b *testing.B) {
			mux := NewMux(prometheus.NewRegistry(), nil, bc.api)
			for b.Loop() {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/teams?top=20", nil))
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}

// An answer to ?top=N is let go once it can no longer be served (twice topCacheTTL of
// the wall clock), whether or not that N is asked again. ttlcache drops an expired item
// only when asked for it or displaced by topCacheEntries others, its cleanup goroutine not
// being run: every N asked once stayed in memory for good, 64 answers of ?top=937 to
// ?top=1000 of a gate with three limits holding 97 MB.
func TestTeamTopAnswersFreed(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	lim := minuteLimiter(t, t0, "a")
	api := NewTeamAPI(GateJSON{}, FixedRules(lim))
	mux := NewMux(prometheus.NewRegistry(), nil, api)
	const asked = 5
	for n := range asked {
		topOf(t, mux, n+1)
	}
	deadline := time.Now().Add(2*topCacheTTL + 3*time.Second)
	for api.tops.Metrics().Evictions < asked {
		if time.Now().After(deadline) {
			t.Fatalf("%s after %d answers to ?top=N were made, %d of them freed; want all, expired %s after they were made",
				2*topCacheTTL+3*time.Second, asked, api.tops.Metrics().Evictions, 2*topCacheTTL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
