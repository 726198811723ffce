package tick

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/spike"
)

// usedMemory is INFO memory's used_memory: what Redis holds, keys, their expiries and
// the tables that index them included, as maxmemory counts it.
func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// TestRedisMemoryPerTeamAsDocumented: docs/operations.md's `oom` runbook, where an
// operator sizes maxmemory, gives the Redis memory of a counter and of an adaptive
// profile. It said a profile took 128 bytes a team (its value alone) and gave no figure
// for counters; measured with 20,000 teams of 12 characters written as the tick writes
// them, a counter takes about 140 bytes of used_memory and a profile about 300, more than
// twice the figure. The documented figures must be within a quarter of the measurement.
func TestRedisMemoryPerTeamAsDocumented(t *testing.T) {
	const teams = 20_000
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 1000}, Config{}, srv)
	name := func(i int) string { return fmt.Sprintf("team-%07d", i) } // 12 characters

	before := usedMemory(t, c)
	for i := range teams {
		g.l.CheckAt(clk.Now(), name(i), 1)
	}
	clk.Advance(time.Second)
	if r := g.tk.Tick(ctx); r.Writes != teams || r.Errors != 0 {
		t.Fatalf("tick = %+v, want %d writes", r, teams)
	}
	counter := float64(usedMemory(t, c)-before) / teams

	p := spike.Profile{Epoch: g.l.Epoch(clk.Now()), Windows: 1440, Level: 300}
	v, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	before = usedMemory(t, c)
	pipe := c.Pipeline()
	for i := range teams {
		// As profileScript stores it: SET key value PX ProfileTTL.
		pipe.Set(ctx, ProfileKeyFor(ModeStandalone, DefaultKeyPrefix, name(i)), v, ProfileTTL)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	profile := float64(usedMemory(t, c)-before) / teams
	t.Logf("Redis memory: %.0f bytes a counter, %.0f bytes a profile (%d bytes of it the value)", counter, profile, len(v))

	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), "\n- `oom`:")
	if i < 0 {
		t.Fatal("docs/operations.md has no `oom` runbook item")
	}
	item := string(doc[i+1:])
	item = item[:strings.Index(item, "\n- ")]
	for _, f := range []struct {
		what     string
		re       *regexp.Regexp
		measured float64
	}{
		{"a counter", regexp.MustCompile(`counters \((?:about )?(\d+) bytes`), counter},
		{"a profile", regexp.MustCompile(`profiles \((?:about )?(\d+) bytes`), profile},
	} {
		m := f.re.FindStringSubmatch(item)
		if m == nil {
			t.Errorf("docs/operations.md's `oom` item gives no Redis memory for %s (measured %.0f bytes):\n%s", f.what, f.measured, item)
			continue
		}
		documented, _ := strconv.ParseFloat(m[1], 64)
		if documented < 0.75*f.measured || documented > 1.25*f.measured {
			t.Errorf("docs/operations.md: %q: %s takes %.0f bytes of Redis memory (used_memory, %d teams of 12 characters)", m[0], f.what, f.measured, teams)
		}
	}
}
