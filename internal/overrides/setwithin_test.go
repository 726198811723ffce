package overrides

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/redistest"
)

// SetWithin refuses a new team to a hash at the maximum, saying how many it holds, takes
// a team already in it (its limit changes, the count does not), and a Redis refusing
// writes refuses it with its own reason.
func TestSetWithinKeepsTheMaximum(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	for _, team := range []string{"a", "b"} {
		if _, err := SetWithin(ctx, c, key, team, 5, time.Now(), 2); err != nil {
			t.Fatalf("set %s: %v", team, err)
		}
	}
	if n, err := SetWithin(ctx, c, key, "c", 5, time.Now(), 2); !errors.Is(err, ErrTooLarge) || n != 2 ||
		!strings.Contains(err.Error(), "holds 3 teams, more than the 2 allowed") {
		t.Errorf("a third team at a maximum of 2: %d, %v; want 2 and ErrTooLarge", n, err)
	}
	if _, err := SetWithin(ctx, c, key, "b", 9, time.Now(), 2); err != nil {
		t.Errorf("a team already in a full hash: %v", err)
	}
	// The version counts the writes made, not the one refused.
	if h, err := c.HGetAll(ctx, key).Result(); err != nil || len(h) != 4 || h["b"] != "9" || h[MarkerField] == "" || h[VersionField] != "3" {
		t.Errorf("hash %v (%v), want a=5, b=9, the marker and version 3", h, err)
	}
	// A delete raises it too, one of an absent team does not.
	for _, team := range []string{"a", "a"} {
		if _, err := Delete(ctx, c, key, team, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := c.HGet(ctx, key, VersionField).Result(); err != nil || v != "4" {
		t.Errorf("version after a delete %q (%v), want 4", v, err)
	}
	if err := c.Set(ctx, "gate:other", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := SetWithin(ctx, c, "gate:other", "a", 5, time.Now(), 2); !errors.Is(err, ErrNotHash) {
		t.Errorf("SetWithin on a string: %v, want ErrNotHash", err)
	}
	srv.RefuseWrites(t, redistest.RefuseReadOnly)
	if _, err := SetWithin(ctx, c, key, "a", 6, time.Now(), 2); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("SetWithin on a replica: %v, want Redis's READONLY", err)
	}
}

// setOverride writes one team's live limit as gate overrides set does (SetWithin), under
// the default maximum of teams.
func setOverride(ctx context.Context, c redis.UniversalClient, key, team string, lim int64, now time.Time) error {
	_, err := SetWithin(ctx, c, key, team, lim, now, 0)
	return err
}
