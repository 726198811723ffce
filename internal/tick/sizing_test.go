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
	t.Parallel()
	const teams = 20_000
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	clk := clock.NewFake(epochStart)
	// A minute for a tick's Redis round trip: this measures memory, not time. With the
	// default (3/4 of the 1 s tick) a loaded machine's pipeline of 20,000 writes under
	// -race outlasted every tick's deadline, and none was written in ten (three test
	// packages at once on two cores).
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 1000}, Config{TickTimeout: time.Minute}, srv)
	name := func(i int) string { return fmt.Sprintf("team-%07d", i) } // 12 characters

	before := usedMemory(t, c)
	for i := range teams {
		g.l.CheckAt(clk.Now(), name(i), 1)
	}
	// Ticked until every team is written: a tick that fails carries its writes to the
	// next.
	for written, ticks := 0, 0; written < teams; ticks++ {
		if ticks == 10 {
			t.Fatalf("%d of %d teams written after %d ticks", written, teams, ticks)
		}
		clk.Advance(time.Second)
		written += g.tk.Tick(ctx).Writes
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

// TestRedisCountersPerTeamEventClockAsDocumented: docs/operations.md's `oom` runbook said
// a team sending in every window holds 2 or 3 counters a limit, 350 MB a million teams,
// whatever the clock; under GATE_CLOCK=event each counter lives GATE_MAX_EVENT_AGE longer,
// as the tick writes it, so such a team holds 17 or 18 with the defaults (a minute's
// window, 15 minutes), seven times the memory. The runbook must give the event clock's
// count, as the TTL the tick sets implies, and the memory it takes.
func TestRedisCountersPerTeamEventClockAsDocumented(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	clk := clock.NewFake(epochStart)
	g := newGate(t, clk, limit.Config{Clock: limit.EventClock}, Config{}, srv) // the defaults
	g.l.CheckEventAt(clk.Now(), clk.Now(), "team-0000001", 1)
	clk.Advance(time.Second)
	if r := g.tk.Tick(context.Background()); r.Writes != 1 || r.Errors != 0 {
		t.Fatalf("tick = %+v, want 1 write", r)
	}
	key := KeyFor(ModeStandalone, DefaultKeyPrefix, "team-0000001", g.l.Epoch(epochStart))
	life, err := c.PTTL(context.Background(), key).Result()
	if err != nil || life <= 0 {
		t.Fatalf("PTTL %s = %v, %v", key, life, err)
	}
	// A counter made at each window's start, living life: floor or ceil of life ÷ window
	// of them at once.
	w := limit.DefaultWindow
	lo, hi := int(life/w), int((life+w-1)/w)
	if lo == hi {
		hi++
	}

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
	flat := strings.Join(strings.Fields(item), " ")
	m := regexp.MustCompile("GATE_CLOCK=event`[^;)]*?(\\d+) or (\\d+) with the defaults").FindStringSubmatch(flat)
	if m == nil {
		t.Fatalf("docs/operations.md's `oom` item gives no count of a team's counters under GATE_CLOCK=event (%d or %d with the defaults: each lives %s):\n%s", lo, hi, life.Round(time.Second), item)
	}
	if m[1] != strconv.Itoa(lo) || m[2] != strconv.Itoa(hi) {
		t.Errorf("docs/operations.md: %q: a team sending in every window holds %d or %d counters (each lives %s)", m[0], lo, hi, life.Round(time.Second))
	}
	// A million teams: the documented bytes a counter, times the counters a team holds.
	bytes := regexp.MustCompile(`counters \((?:about )?(\d+) bytes`).FindStringSubmatch(flat)
	gb := regexp.MustCompile("about ([\\d.]+) GB with `GATE_CLOCK=event`").FindStringSubmatch(flat)
	if bytes == nil || gb == nil {
		t.Fatalf("docs/operations.md's `oom` item gives no memory for a million teams' counters under GATE_CLOCK=event:\n%s", item)
	}
	per, _ := strconv.ParseFloat(bytes[1], 64)
	want := 1e6 * per * float64(lo+hi) / 2 / 1e9
	if got, _ := strconv.ParseFloat(gb[1], 64); got < 0.9*want || got > 1.1*want {
		t.Errorf("docs/operations.md: %q: a million teams' counters take %.2f GB under GATE_CLOCK=event (%s bytes × %.1f)", gb[0], want, bytes[1], float64(lo+hi)/2)
	}
}
