package tick

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestLiveKeyNamesTheRules: the tick of a gate with a rules file (Config.LiveRules) marks
// its fleet live with its rules' names beside its writer, which gate overrides reads to
// warn an operator who writes a hash none of them reads; one without rules, with its
// writer alone, as before.
func TestLiveKeyNamesTheRules(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	ctx := context.Background()
	for _, rules := range [][]string{nil, {"team-user", "team"}} {
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, clock.NewFake(epochStart), nil)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := New(l, []redis.UniversalClient{rc}, Config{Writer: "host-1", LiveRules: rules}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		tk.markLive(ctx, time.Now())
		v, err := rc.Get(ctx, LiveKeyFor(DefaultKeyPrefix)).Result()
		if err != nil {
			t.Fatal(err)
		}
		got, withRules := LiveRulesOf(v)
		if withRules != (rules != nil) || !slices.Equal(got, rules) || v != LiveValue("host-1", rules) || rules == nil && v != "host-1" {
			t.Errorf("rules %v: the live key holds %q, read as rules %v (%v)", rules, v, got, withRules)
		}
	}
}
