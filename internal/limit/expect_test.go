package limit

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// A key Expect marks is read at the next sweep whatever its level (ReadPrimed, with its
// hold flag), once, counted nowhere: one not cached (put in, and under the sketch not
// demoted before its read), and one cached but never read (a gate taking a dead peer's
// partitions over had met the team on its own, under the sync floor: a review's gate
// accepted 998 of a held team's 1,500 waiting records so). Before Expect, a key of a few
// records was never read: under the sync floor, first contact until this gate alone had
// counted the floor.
func TestExpectedKeyIsReadAtTheNextSweep(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"floor", Config{Window: time.Minute, Threshold: 1000, SyncInterval: 8 * time.Second, DivertHold: time.Minute}},
		// Under the sketch, a cached key far under its floor is demoted at the next sweep:
		// not one put in by Expect before its read.
		{"sketch", func() Config { c := sketchCfg(); c.DivertHold = time.Minute; return c }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _, _ := newTest(t, tc.cfg)
			now := at(time.Second)
			l.CheckAt(now, "seen", 1) // cached (or under the sketch, counted there), never read
			for _, k := range []string{"whale", "seen"} {
				if !l.Expect(now, k) {
					t.Errorf("Expect(%q) marked nothing", k)
				}
			}
			if l.Len() != 2 {
				t.Fatalf("%d keys cached, want 2 (seen, whale)", l.Len())
			}
			sw := sweep(t, l, now)
			for _, k := range []string{"whale", "seen"} {
				if r := findRead(sw, k); r == nil || r.Reason != ReadPrimed || !r.Hold {
					t.Errorf("%s's read at the next sweep: %+v, want reason primed with its hold flag", k, r)
				}
			}
			r := findRead(sw, "whale")
			if n := sumCounts(sw, "whale"); n != 0 {
				t.Errorf("expected key counted %d records, want none", n)
			}
			// Its read made: the fleet has it at 3 × its threshold. (Applied to the entry
			// planned: had the sweep demoted it, nothing would be, and the check below
			// would be first contact.)
			l.ApplyRead(r, 3*l.Config().Threshold, 0, now)
			if d := l.CheckAt(now, "whale", 1); !d.Limited {
				t.Errorf("after its read, the whale's first record: %+v, want limited", d)
			}
			next := now.Add(time.Second)
			if r := findRead(sweep(t, l, next), "whale"); r != nil && r.Reason == ReadPrimed {
				t.Errorf("read again as primed: %+v", r)
			}
			// Read within the last tick (the sweeps a second apart): not marked again.
			if l.Expect(now.Add(500*time.Millisecond), "whale") {
				t.Error("Expect marked a key read within the last tick")
			}
			if !l.Expect(next.Add(5*time.Second), "whale") {
				t.Error("Expect did not mark a key last read 6 s ago")
			}
		})
	}
}

// An expected key whose read is not applied before the next sweep (a tick that failed
// to plan it, say) is not primed again, nor left behind in the shard's list: Expect's
// mark lasts one sweep.
func TestExpectLastsOneSweep(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000, SyncInterval: 8 * time.Second})
	now := at(time.Second)
	l.Expect(now, "a")
	if r := findRead(sweep(t, l, now), "a"); r == nil || r.Reason != ReadPrimed {
		t.Fatalf("first sweep: %+v, want a primed read", r)
	}
	if r := findRead(sweep(t, l, now.Add(time.Second)), "a"); r != nil {
		t.Errorf("second sweep: %+v, want none (under the floor, never read)", r)
	}
	for i := range l.shards {
		if n := len(l.shards[i].expect); n != 0 {
			t.Errorf("shard %d keeps %d expected keys after its sweep", i, n)
		}
	}
}

// Under the event clock Expect does nothing: reads go by each record's window.
func TestExpectUnderTheEventClockDoesNothing(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000, Clock: EventClock, MaxEventAge: time.Hour})
	l.Expect(at(time.Second), "a")
	if l.Len() != 0 {
		t.Errorf("%d keys cached, want 0", l.Len())
	}
}

// Pressing lists the keys held, at their threshold or at minLevel or more, the most
// pressing first, at most n, and no other.
func TestPressingListsKeysNearOrOverTheirLimits(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 100, Overrides: map[string]int64{"big": 1000}})
	now := at(time.Second)
	l.CheckAt(now, "over", 150)
	l.CheckAt(now, "near", 60)
	l.CheckAt(now, "low", 10)
	l.CheckAt(now, "big", 300) // 0.3 of its override: over minLevel all the same
	if got, want := l.Pressing(now, 50, 10), []string{"over", "near", "big"}; !slices.Equal(got, want) {
		t.Errorf("Pressing(50, 10) = %q, want %q", got, want)
	}
	if got, want := l.Pressing(now, 50, 2), []string{"over", "near"}; !slices.Equal(got, want) {
		t.Errorf("Pressing(50, 2) = %q, want %q", got, want)
	}
	if got, want := l.Pressing(now, 1000, 10), []string{"over"}; !slices.Equal(got, want) {
		t.Errorf("Pressing(1000, 10) = %q, want %q (at its threshold)", got, want)
	}
}

// A cached key idle past GATE_CACHE_IDLE_TIMEOUT when Expect marks it is read at the next
// sweep, not dropped as idle: the sweep expired it before looking at the mark, and
// cleared the mark with the others, so no primed read was made and the backlog's first
// records of the key met it as first contact (a review).
func TestExpectedKeyIdlePastTheTimeoutIsRead(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000, SyncInterval: 8 * time.Second, IdleTimeout: 10 * time.Second})
	l.CheckAt(at(time.Second), "idle", 1)
	sweep(t, l, at(5*time.Second))
	now := at(12 * time.Second)
	if !l.Expect(now, "idle") {
		t.Fatal("Expect marked nothing")
	}
	sw := sweep(t, l, now)
	if r := findRead(sw, "idle"); r == nil || r.Reason != ReadPrimed {
		t.Errorf("the read of a key idle 11 s under a 10 s timeout, marked by Expect: %+v (expired %d, cached %d); want primed", r, sw.Expired, l.Len())
	}
}

// TestExpectedKeyNotEvictedByTheCapacity: a key Expect marked, in a cache at its
// capacity that new keys keep filling (a takeover's backlog of many teams), stays
// cached until its read: uncounted and seen in the second the others are, it was the
// eviction's first choice, its mark left naming a key no sweep found (a review).
func TestExpectedKeyNotEvictedByTheCapacity(t *testing.T) {
	l, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 1000, Capacity: 10})
	now := at(time.Second)
	for i := range 10 {
		l.CheckAt(now, fmt.Sprintf("team-%d", i), 1)
	}
	if !l.Expect(now, "waiting") {
		t.Fatal("Expect marked nothing")
	}
	for i := 10; i < 200; i++ {
		l.CheckAt(now, fmt.Sprintf("team-%d", i), 1)
	}
	if !cached(l, "waiting") {
		t.Fatalf("the key marked was evicted by 190 new keys in a cache of 10")
	}
	if r := findRead(sweep(t, l, now), "waiting"); r == nil || r.Reason != ReadPrimed {
		t.Errorf("the read of the key marked: %+v, want primed", r)
	}
}
