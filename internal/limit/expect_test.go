package limit

import (
	"slices"
	"testing"
	"time"
)

// A key Expect puts in the cache is read at the next sweep whatever its level (ReadPrimed,
// with its hold flag), once, counted nowhere; one cached already is left to its tier.
// Before Expect, a key of a few records was never read: under the sync floor, first
// contact until this gate alone had counted the floor.
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
			l.CheckAt(now, "seen", 1) // cached, under the floor: not read
			l.Expect(now, "whale")
			l.Expect(now, "seen")
			if l.Len() != 2 {
				t.Fatalf("%d keys cached, want 2 (seen, whale)", l.Len())
			}
			sw := sweep(t, l, now)
			r := findRead(sw, "whale")
			if r == nil || r.Reason != ReadPrimed || !r.Hold {
				t.Fatalf("expected key's read at the next sweep: %+v, want reason primed with its hold flag", r)
			}
			// Under the sketch "seen" was counted there, not cached, and Expect caches it
			// with its count (a promotion).
			if r := findRead(sw, "seen"); tc.name == "floor" && r != nil {
				t.Errorf("a key cached before Expect read as %v: want it left to its tier", r.Reason)
			}
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
			if r := findRead(sweep(t, l, now.Add(time.Second)), "whale"); r != nil && r.Reason == ReadPrimed {
				t.Errorf("read again as primed: %+v", r)
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
