package tick

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestSplitTickReadsSeeTheWholeFleet: when every gate writes before any reads (Run's
// aligned ticks), each gate's read holds every gate's counts of the tick. With whole ticks
// one after another, the first gate to tick reads the second's counts a tick late.
func TestSplitTickReadsSeeTheWholeFleet(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	run := func(t *testing.T, split bool) (first, second float64) {
		clk := clock.NewFake(epochStart.Add(30 * time.Second))
		lc := limit.Config{Window: time.Minute, Threshold: 1000}
		prefix := "whole"
		if split {
			prefix = "split"
		}
		a := newGate(t, clk, lc, Config{KeyPrefix: prefix}, srv)
		b := newGate(t, clk, lc, Config{KeyPrefix: prefix}, srv)
		a.l.Check("team", 10)
		b.l.Check("team", 30)
		clk.Advance(time.Second)
		if split {
			a.tk.WritePhase(ctx)
			b.tk.WritePhase(ctx)
			a.tk.ReadPhase(ctx)
			b.tk.ReadPhase(ctx)
		} else {
			a.tk.Tick(ctx)
			b.tk.Tick(ctx)
		}
		sa, _ := a.l.Snapshot(clk.Now(), "team")
		sb, _ := b.l.Snapshot(clk.Now(), "team")
		return sa.Estimate, sb.Estimate
	}
	if a, b := run(t, true); a != 40 || b != 40 {
		t.Errorf("split ticks: estimates %g and %g, want both 40 (10 + 30)", a, b)
	}
	if a, b := run(t, false); a != 10 || b != 40 {
		t.Errorf("whole ticks one after another: estimates %g and %g, want 10 (the second gate's count not yet written) and 40", a, b)
	}
}

// TestReadPhaseFollowsItsWritePhase: reads a write phase planned are made before anything
// else the tick does (a Tick, a Flush, the next write phase), so that none is left
// unapplied: an unapplied read would count the records it covers twice, in its pending
// count and in the shared count.
func TestReadPhaseFollowsItsWritePhase(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, next := range []string{"tick", "flush", "write phase"} {
		t.Run(next, func(t *testing.T) {
			clk := clock.NewFake(epochStart.Add(30 * time.Second))
			g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 1000}, Config{KeyPrefix: next}, srv)
			g.l.Check("team", 25)
			clk.Advance(time.Second)
			if r := g.tk.WritePhase(ctx); r.Writes != 1 || r.Errors != 0 {
				t.Fatalf("write phase = %+v, want one write", r)
			}
			switch next {
			case "tick":
				g.tk.Tick(ctx)
			case "flush":
				if err := g.tk.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			default:
				g.tk.WritePhase(ctx)
			}
			if r := g.tk.ReadPhase(ctx); r.Reads != 0 {
				t.Errorf("a second read phase made %d reads, want none (the first already made)", r.Reads)
			}
			st, _ := g.l.Snapshot(clk.Now(), "team")
			if st.Level != 25 || st.Pending != 0 || st.ReadAt.IsZero() {
				t.Errorf("after the write phase and a %s: level %g, pending %d, read at %v; want 25, 0, read", next, st.Level, st.Pending, st.ReadAt)
			}
		})
	}
}

// lateAnswerClock is the host's wall clock off by off, whose second reading and after
// come rtt later than the real clock has them: the real round trip, plus rtt. Not rtt
// alone: Redis reads its clock somewhere in the real round trip, and a clock stopped
// at its first reading then measured a loaded host's 70 ms answer as a 70 ms offset
// (a run with four test packages at once on two cores: -3.070 s for -3 s).
type lateAnswerClock struct {
	off, rtt time.Duration
	read     bool
}

func (c *lateAnswerClock) Now() time.Time {
	if !c.read {
		c.read = true
		return time.Now().Add(c.off)
	}
	return time.Now().Add(c.off + c.rtt)
}

// TestTickBoundaries: Run's ticks fall on the wall clock's multiples of the interval, the
// same instants on every gate whatever its start time, so that their writes land together
// before their reads.
func TestTickBoundaries(t *testing.T) {
	base := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		now      time.Time
		interval time.Duration
		want     time.Time
	}{
		{base, time.Second, base.Add(time.Second)},
		{base.Add(1), time.Second, base.Add(time.Second)},
		{base.Add(999 * time.Millisecond), time.Second, base.Add(time.Second)},
		{base.Add(1234 * time.Millisecond), 500 * time.Millisecond, base.Add(1500 * time.Millisecond)},
		{base.Add(7 * time.Second), 5 * time.Second, base.Add(10 * time.Second)},
	} {
		if got := nextTick(c.now, c.interval); !got.Equal(c.want) {
			t.Errorf("nextTick(%s, %s) = %s, want %s", c.now.Format(time.StampMilli), c.interval, got.Format(time.StampMilli), c.want.Format(time.StampMilli))
		}
	}
}

// TestClockOffsetMeasured: the tick measures this host's clock against Redis's, sets
// gate_limiter_clock_offset_seconds, and warns when the offset is more than its aligned
// ticks absorb; within it, it stays quiet. Redis reads its clock somewhere in TIME's round
// trip, so an offset that half the round trip explains is no evidence: with an answer
// 60 ms late (a loaded host, as a CI run under -race on two cores had one: 44 ms) and a
// right clock, the midpoint's estimate is 30 ms off, past a 100 ms tick's 12.5 ms limit,
// and it warned; it must not (the estimate still goes to the gauge), while an offset past
// the limit by more than that still warns.
func TestClockOffsetMeasured(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct {
		off, rtt, tick time.Duration
		warn           bool
	}{
		{2 * time.Second, 0, 0, true}, {-3 * time.Second, 0, 0, true}, {0, 0, 0, false},
		{0, 60 * time.Millisecond, 100 * time.Millisecond, false},
		{2 * time.Second, 60 * time.Millisecond, 100 * time.Millisecond, true},
		{-2 * time.Second, 60 * time.Millisecond, 100 * time.Millisecond, true},
	} {
		t.Run(fmt.Sprintf("%s rtt %s", c.off, c.rtt), func(t *testing.T) {
			var logs bytes.Buffer
			reg := prometheus.NewRegistry()
			l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, nil, reg)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := New(l, []redis.UniversalClient{srv.Client(t)}, Config{TickInterval: c.tick}, reg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			tk.clockCheck.wall = &lateAnswerClock{off: c.off, rtt: c.rtt}
			began := time.Now()
			tk.checkClock(context.Background())
			// The estimate is off by at most half the real round trip, which the call
			// bounds.
			tol := max(0.005, time.Since(began).Seconds()/2)
			if got, want := testutil.ToFloat64(tk.m.clockOffset), (c.off + c.rtt/2).Seconds(); math.Abs(got-want) > tol {
				t.Errorf("gate_limiter_clock_offset_seconds = %.3f, want the estimate, %.3f within %.3f", got, want, tol)
			}
			if warned := strings.Contains(logs.String(), "clock is off"); warned != c.warn {
				t.Errorf("warned %v, want %v; log:\n%s", warned, c.warn, logs.String())
			}
		})
	}
}

// TestRunAlignsTicks: Run writes at the wall clock's multiples of the interval, never
// before, and reads a quarter interval later, never sooner; a gate stopped between the two
// halves makes the planned reads in its final flush, with no failure logged.
func TestRunAlignsTicks(t *testing.T) {
	srv := redistest.Start(t)
	const interval = 100 * time.Millisecond
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 1000}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(l, []redis.UniversalClient{srv.Client(t)}, Config{TickInterval: interval, TickTimeout: 10 * time.Second, KeyPrefix: "run"}, reg, slog.New(slog.NewTextHandler(&logs, nil))) // a timeout far past 3/4 of the interval: a late answer on a loaded machine logged a warning
	if err != nil {
		t.Fatal(err)
	}
	type phase struct {
		part     int
		boundary time.Time
		at       time.Time
	}
	phases := make(chan phase, 100)
	ctx, cancel := context.WithCancel(context.Background())
	writes := 0
	tk.onPhase = func(part int, boundary time.Time, ended bool) {
		if part == partWrites && ended {
			if writes == 5 {
				cancel() // stopped between the fifth tick's halves
			}
			return
		}
		phases <- phase{part, boundary, time.Now()}
		if part == partWrites {
			if writes++; writes == 5 {
				l.Check("team", 300) // written by the fifth write phase, read by the final flush
			}
		}
	}
	done := make(chan struct{})
	go func() { tk.Run(ctx); close(done) }()
	<-done
	close(phases)
	var last phase
	n := 0
	for p := range phases {
		n++
		if p.boundary.UnixNano()%int64(interval) != 0 {
			t.Errorf("tick boundary %s is not a multiple of %s", p.boundary.Format(time.StampMicro), interval)
		}
		switch p.part {
		case partWrites:
			if p.at.Before(p.boundary) {
				t.Errorf("write phase at %s, before its boundary %s", p.at.Format(time.StampMicro), p.boundary.Format(time.StampMicro))
			}
		case partReads:
			if last.part != partWrites || !last.boundary.Equal(p.boundary) {
				t.Errorf("read phase of %s not right after its write phase", p.boundary.Format(time.StampMicro))
			}
			if p.at.Before(p.boundary.Add(interval / 4)) {
				t.Errorf("read phase at %s, sooner than a quarter interval after %s", p.at.Format(time.StampMicro), p.boundary.Format(time.StampMicro))
			}
		}
		last = p
	}
	if n != 9 {
		t.Errorf("%d phases, want 9 (four whole ticks and a write phase)", n)
	}
	st, _ := l.Snapshot(time.Now(), "team")
	if st.Pending != 0 || st.Estimate != 300 {
		t.Errorf("after Run stopped: estimate %g, pending %d; want 300 read back, none pending", st.Estimate, st.Pending)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("stopping between a tick's halves logged a warning:\n%s", logs.String())
	}
}

// A limiter's cache past its capacity, every key it looks at to evict over half its
// threshold, is logged at the tick's sweep, once an hour at most, naming the limit and
// the capacity: the metric alone said it before, and the issue asked for a line.
func TestCacheOverfullLogged(t *testing.T) {
	srv := redistest.Start(t)
	var logs bytes.Buffer
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10, Capacity: 1, Shards: 1}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(l, []redis.UniversalClient{srv.Client(t)}, Config{KeyPrefix: "of"}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fill := func(keys ...string) {
		for _, k := range keys {
			for range 6 { // over half of 10: never evicted
				l.Check(k, 1)
			}
		}
	}
	const line = "limiter cache past its capacity"
	fill("a")
	tk.Tick(context.Background())
	if strings.Contains(logs.String(), line) {
		t.Fatalf("logged with the cache at its capacity, not past it:\n%s", logs.String())
	}
	fill("b", "c")
	tk.Tick(context.Background())
	if n := strings.Count(logs.String(), line); n != 1 || !strings.Contains(logs.String(), "capacity=1") {
		t.Fatalf("%d lines say the cache is past its capacity, want 1 naming it:\n%s", n, logs.String())
	}
	clk.Advance(time.Minute)
	fill("d")
	tk.Tick(context.Background())
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Errorf("logged again within the hour (%d lines)", n)
	}
	clk.Advance(time.Hour)
	tk.Tick(context.Background()) // the idle keys expire
	fill("a", "b", "c")
	tk.Tick(context.Background())
	if n := strings.Count(logs.String(), line); n != 2 {
		t.Errorf("%d lines after an hour more of it, want 2", n)
	}
}

// Under the event clock the capacity bounds each window's cache on its own, and the
// warning that a cache grew past it gives the fullest window's teams (as
// gate_limiter_cache_fullest_entries does), not every window's added up: 2 teams in the
// window before and 3 in this one, with a capacity of 2, said cached=5, a cache more than
// twice over its capacity where the fullest holds 3.
func TestCacheOverfullLoggedPerWindow(t *testing.T) {
	srv := redistest.Start(t)
	var logs bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	clk := clock.NewFake(now)
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10, Capacity: 2, Shards: 1,
		Clock: limit.EventClock, MaxEventAge: 10 * time.Minute}, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(l, []redis.UniversalClient{srv.Client(t)}, Config{KeyPrefix: "ofw"}, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fill := func(at time.Time, keys ...string) {
		for _, k := range keys {
			for range 6 { // over half of 10: never evicted
				l.CheckEventAt(now, at, k, 1)
			}
		}
	}
	fill(now.Add(-time.Minute), "a", "b") // the window before: at its capacity
	fill(now, "c", "d", "e")              // this one: past it
	clk.Advance(time.Second)
	tk.Tick(context.Background())
	const line = "limiter cache past its capacity"
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("%d lines say a cache is past its capacity, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "capacity=2 cached=3") {
		t.Errorf("want the capacity and the fullest window's 3 teams (capacity=2 cached=3):\n%s", logs.String())
	}
}

// TestSplitTickReadPastTheWindowsEnd: a tick interval that does not divide the window
// (7 s in a minute) puts a window's end between a write phase, whose sweep plans the reads
// of its window, and their read phase. The team's count of the window that ended (1000,
// at its threshold; 5000 the window before) then slides out through the new window, as
// the sliding estimate has it: before, the read set the level to that count whole,
// draining at the rate of the window before it, and six seconds on the team stood at 54 %
// of its threshold instead of 90 % (limit.TestApplyReadAfterTheBoundary).
func TestSplitTickReadPastTheWindowsEnd(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	clk := clock.NewFake(epochStart.Add(59500 * time.Millisecond))
	g := newGate(t, clk, limit.Config{Window: time.Minute, Threshold: 1000}, Config{KeyPrefix: "past", TickInterval: 7 * time.Second}, srv)
	ep := g.l.Epoch(clk.Now())
	rdb := srv.Client(t)
	for k, v := range map[string]int64{Key("past", "team", ep): 980, Key("past", "team", ep-1): 5000} {
		if err := rdb.Set(ctx, k, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g.l.CheckAt(clk.Now(), "team", 20)
	if r := g.tk.WritePhase(ctx); r.Writes != 1 || r.Errors != 0 {
		t.Fatalf("write phase = %+v, want one write", r)
	}
	clk.Set(epochStart.Add(time.Minute + 500*time.Millisecond)) // the read phase, past the window's end
	if r := g.tk.ReadPhase(ctx); r.Reads != 1 || r.Errors != 0 {
		t.Fatalf("read phase = %+v, want one read", r)
	}
	later := epochStart.Add(time.Minute + 6*time.Second)
	if got, want := g.l.CheckAt(later, "team", 0).Level, 900.0; math.Abs(got-want) > 1 {
		t.Errorf("6 s into the window after the read's: level %.1f, want %.1f (1000 × 54/60: the ended window's count sliding out)", got, want)
	}
}
