package limit

import (
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
	"time"
)

// rotationCfg: floor 100 records (threshold 10,000), at most 1,000 keys a team a window.
func rotationCfg(a CardinalityAction) Config {
	return Config{Window: time.Minute, Threshold: 10_000, SketchWidth: DefaultSketchWidth, KeyCardinality: 1000, OnCardinality: a}
}

// rotate checks n fresh keys of team, from *seq on, at now; it returns the decisions of
// the last one.
func rotate(l *Limiter, now time.Time, team string, n int, seq *int) (last Decision) {
	for range n {
		*seq++
		last = l.CheckAt(now, fmt.Sprintf("%s:id-%d", team, *seq), 1)
	}
	return last
}

// A team minting a key per record is found rotating once it has more keys in a window
// than the bound, logged once (a Rotations event), and from then on its keys under the
// floor count as one key, the team's, which its threshold limits as one user's; a team
// of 50 steady users beside it is neither found nor limited, and no key of either is
// cached but the collapsed one.
func TestRotatingTeamCollapsed(t *testing.T) {
	l, _, reg := newTest(t, rotationCfg(CardinalityCollapse))
	now := at(time.Second)
	seq := 0
	steady := func() {
		for u := range 50 {
			if d := l.CheckAt(now, fmt.Sprintf("ok:user-%d", u), 1); d.Limited || d.Rotating {
				t.Fatalf("steady team's user %d: %+v", u, d)
			}
		}
	}
	for range 40 {
		steady()
		rotate(l, now, "rot", 50, &seq)
	}
	sw := sweep(t, l, at(2*time.Second))
	if len(sw.Rotations) != 1 || !sw.Rotations[0].Started || sw.Rotations[0].Team != "rot" {
		t.Fatalf("rotations %+v, want rot started (2,000 keys against a bound of 1,000)", sw.Rotations)
	}
	if got := l.Rotating(); len(got) != 1 || got[0].Team != "rot" || got[0].Keys < 1000 {
		t.Errorf("Rotating() = %+v, want rot with over 1,000 keys", got)
	}
	now = at(3 * time.Second)
	if d := rotate(l, now, "rot", 10_001, &seq); !d.Limited {
		t.Errorf("rot after 10,001 more fresh keys, collapsed into one at a threshold of 10,000: %+v, want limited", d)
	}
	steady()
	if n := l.Len(); n != 1 {
		t.Errorf("cached %d keys, want the collapsed rot: alone", n)
	}
	if got := metricValue(t, reg, "gate_limiter_rotations_detected_total", nil); got != 1 {
		t.Errorf("gate_limiter_rotations_detected_total = %v, want 1", got)
	}
	if got := metricValue(t, reg, "gate_limiter_rotation_records_total", map[string]string{"on_cardinality": "collapse"}); got != 10_001 {
		t.Errorf("gate_limiter_rotation_records_total = %v, want 10,001", got)
	}
	// A window later with a handful of keys: no longer rotating.
	sweep(t, l, at(61*time.Second))
	rotate(l, at(62*time.Second), "rot", 10, &seq)
	sw = sweep(t, l, at(121*time.Second))
	if len(sw.Rotations) != 1 || sw.Rotations[0].Started {
		t.Errorf("rotations %+v, want rot stopped after a window of 10 keys", sw.Rotations)
	}
	if got := l.Rotating(); len(got) != 0 {
		t.Errorf("Rotating() = %+v, want none", got)
	}
}

// overflow and tag: a rotating team's keys under the floor are answered Rotating, limited
// for overflow, counted nowhere.
func TestRotatingTeamOverflowOrTag(t *testing.T) {
	for _, a := range []CardinalityAction{CardinalityOverflow, CardinalityTag} {
		t.Run(a.String(), func(t *testing.T) {
			l, _, _ := newTest(t, rotationCfg(a))
			seq := 0
			rotate(l, at(time.Second), "rot", 2000, &seq)
			sweep(t, l, at(2*time.Second))
			d := rotate(l, at(3*time.Second), "rot", 1, &seq)
			if !d.Rotating || d.Limited != (a == CardinalityOverflow) {
				t.Errorf("%+v, want rotating, limited %v", d, a == CardinalityOverflow)
			}
			if d := l.CheckAt(at(3*time.Second), "other:u", 1); d.Rotating || d.Limited {
				t.Errorf("another team: %+v", d)
			}
		})
	}
}

// Checks of teams that are not candidates allocate nothing, and those of a rotating one
// neither, counted at once or through a tally.
func TestRotationCheckAllocs(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
	seq := 0
	rotate(l, at(time.Second), "rot", 2000, &seq)
	sweep(t, l, at(2*time.Second))
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("rot:x-%d", i)
	}
	i := 0
	now := at(3 * time.Second)
	if n := testing.AllocsPerRun(1000, func() {
		l.CheckAt(now, keys[i%len(keys)], 1)
		l.CheckAt(now, "ok:u", 1)
		i++
	}); n != 0 {
		t.Errorf("%v allocations a check, want 0", n)
	}
	// Through a tally, the router's way: the rotating keys' sketch adds queued in it.
	var tally Tally
	if n := testing.AllocsPerRun(1000, func() {
		l.CheckTally(now, keys[i%len(keys)], 1, &tally)
		l.CheckTally(now, "ok:u", 1, &tally)
		if i++; i%100 == 0 {
			l.AddTally(&tally)
		}
	}); n != 0 {
		t.Errorf("%v allocations a check through a tally, want 0", n)
	}
}

// An empty key, which the router never checks but a caller could, is a key like any
// other: counted, not a crash in the rotation check (it read the key's last byte).
func TestEmptyKeyUnderTheFloor(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
	if d := l.CheckAt(at(time.Second), "", 1); d.Limited || d.Rotating {
		t.Errorf("empty key: %+v", d)
	}
}

// collapsedKey is what a check asks before it fetches a key's sketch lines: true for a
// collapsed key (a rotating team's, always cached), false for any key a record makes,
// and on a limiter without a bound on a team's keys.
func TestCollapsedKey(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
	for key, want := range map[string]bool{"rot:": true, "rot:id-1": false, "ok:user-1": false, "": false} {
		if got := l.collapsedKey(key); got != want {
			t.Errorf("collapsedKey(%q) = %v, want %v", key, got, want)
		}
	}
	plain, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 10_000, SketchWidth: DefaultSketchWidth})
	if plain.collapsedKey("rot:") {
		t.Error("collapsedKey on a limiter without KeyCardinality = true, want false")
	}
}

// A key of a rotating team under its floor is counted as the team's collapsed key while
// the team rotates, and as its own in the sketch too: when the rotation ends, a user that
// sent 9,000 records in the window before (threshold 10,000) is admitted what its sliding
// window leaves, not a whole threshold more (as it was while the sketch held nothing of
// its records from the rotation). Checked at once, and through a Tally, the router's way:
// there a rotating key's own counts are added a few of the team's checks late
// (Tally.deferAdd), and every one of them by AddTally, here every 1,000 records, a count
// the queue's length does not divide.
func TestRotationReleaseKeepsCollapsedRecords(t *testing.T) {
	for _, tallied := range []bool{false, true} {
		t.Run(fmt.Sprint("tally=", tallied), func(t *testing.T) {
			l, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
			var tally Tally
			check := func(now time.Time, i int) Decision {
				if !tallied {
					return l.CheckAt(now, "rot:heavy", 1)
				}
				d := l.CheckTally(now, "rot:heavy", 1, &tally)
				if i%1000 == 999 {
					l.AddTally(&tally)
				}
				return d
			}
			startRotation(t, l)
			sweep(t, l, at(61*time.Second)) // window 1: still rotating (window 0 had 2,000 keys)
			// The rotation stops; one user of the team sends 9,000 records, late in window 1.
			for i := range 9000 {
				if d := check(at(100*time.Second), i); d.Limited {
					t.Fatalf("rot:heavy limited at its record %d of 9,000 (threshold 10,000)", i)
				}
			}
			l.AddTally(&tally)
			sw := sweep(t, l, at(120*time.Second)) // window 2: window 1 had one key, released
			if len(sw.Rotations) != 1 || sw.Rotations[0].Started {
				t.Fatalf("rotations %+v, want rot released", sw.Rotations)
			}
			// At 121 s the sliding window still covers 59/60 of window 1: 8,850 of
			// rot:heavy's records. Room is left for 1,150 more (3% over: 1,450).
			var admitted int
			for i := range 10_000 {
				if d := check(at(121*time.Second), i); !d.Limited {
					admitted++
				}
			}
			l.AddTally(&tally)
			if admitted > 1450 {
				t.Errorf("rot:heavy admitted %d more records after 9,000 in the window before, threshold 10,000: want at most 1,450", admitted)
			}
		})
	}
}

// A Tally's queued sketch adds land when the tally is added (AddTally), the last rotDefer
// of them too, and an add queued for a window whose slot has since been cleared for another is
// dropped with that window rather than counted in the new one.
func TestTallyDeferredAdds(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
	keyOf := func(i int) string { return fmt.Sprintf("rot:id-%d", i) }
	keyHash := func(i int) uint64 { return maphash.String(l.seed, keyOf(i)) }
	r := &rotation{team: "rot", collapsed: "rot:"}
	r.rotating.Store(true)
	sk := l.sk
	sk.prepare(5)
	sl := sk.slot(5)
	var tally Tally
	for i := range 2*rotDefer + 3 {
		tally.deferAdd(l, r, sl, 5, 5*int64(time.Minute), keyHash(i), sk.cells(keyHash(i)), keyOf(i), 2)
	}
	for i := range 2*rotDefer + 3 {
		got := sl.estimate(sk.cells(keyHash(i)))
		if applied := i < rotDefer+3; applied != (got == 2) || got > 2 {
			t.Errorf("key %d: count %d before AddTally's drain, want %d", i, got, map[bool]int{true: 2}[applied])
		}
	}
	tally.rotated = 1 // AddTally skips a zero tally; a rotating key's add comes with its count
	l.AddTally(&tally)
	for i := range 2*rotDefer + 3 {
		if got := sl.estimate(sk.cells(keyHash(i))); got != 2 {
			t.Errorf("key %d: count %d after the drain, want 2", i, got)
		}
	}
	tally = Tally{}
	tally.deferAdd(l, r, sl, 5, 5*int64(time.Minute), keyHash(99), sk.cells(keyHash(99)), keyOf(99), 7)
	sk.prepare(7) // clears window 5's slot for window 8
	sk.prepare(8)
	tally.applyDeferred()
	if s8 := sk.slot(8); s8 == nil || s8.estimate(sk.cells(keyHash(99))) != 0 {
		t.Errorf("a late add of window 5 counted in window 8's slot")
	}
}

// A rotating key's sketch adds still queued in a routing goroutine's tally when the rotation
// ends and another goroutine's check promotes the key were carried by no one: the
// promotion read the sketch without them, and they landed in it after the key was cached.
// They are counted in its entry now: what the tick is handed of the key is what it sent.
func TestDeferredAddsCarriedOnPromotionAfterRelease(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityCollapse)) // floor 100
	startRotation(t, l)
	sweep(t, l, at(61*time.Second))
	var tally Tally // a routing goroutine's, its batch spanning the tick's sweep
	sent := int64(0)
	for range 200 {
		l.CheckTally(at(100*time.Second), "rot:heavy", 1, &tally)
		sent++
	}
	if sw := sweep(t, l, at(120*time.Second)); len(sw.Rotations) != 1 || sw.Rotations[0].Started {
		t.Fatalf("rotations %+v, want rot released", sw.Rotations)
	}
	l.CheckAt(at(121*time.Second), "rot:heavy", 1) // another goroutine: promoted
	sent++
	l.AddTally(&tally) // the batch ends
	var all Sweep
	l.SweepAll(at(122*time.Second), &all)
	if written := sumCounts(&all, "rot:heavy"); written < sent {
		t.Errorf("rot:heavy sent %d records; its counts handed to the tick: %d", sent, written)
	}
}

// A rotating team's records checked through a Tally (the router's way) are counted in
// gate_limiter_rotation_records_total when the tally is added, none lost.
func TestRotationRecordsCountedThroughTally(t *testing.T) {
	l, _, reg := newTest(t, rotationCfg(CardinalityCollapse))
	startRotation(t, l)
	var tally Tally
	for i := range 300 {
		l.CheckTally(at(3*time.Second), fmt.Sprintf("rot:fresh-%d", i), 1, &tally)
	}
	rotated := func() float64 {
		return metricValue(t, reg, "gate_limiter_rotation_records_total", map[string]string{"on_cardinality": "collapse"})
	}
	if got := rotated(); got != 0 {
		t.Errorf("before AddTally: %v, want 0 (counted in the tally)", got)
	}
	l.AddTally(&tally)
	if got := rotated(); got != 300 {
		t.Errorf("after AddTally: %v, want 300", got)
	}
}

// A per-user rule whose floor is under 2 records (threshold 1,000 over 10 gates: 1% of it ÷
// 10 is 1) keeps no key in the sketch and caches every key. A team minting a key per
// record is still found, and its keys not cached collapse into one: the cache and the
// tick's writes stop growing with its keys once it is found. It was never found, and each
// of its keys was cached and written to Redis, as before the sketch (PostHog #83004).
func TestRotationFoundWithoutAFloor(t *testing.T) {
	cfg := rotationCfg(CardinalityCollapse)
	cfg.Threshold = 1000
	l, _, reg := newTest(t, cfg)
	l.SetFleetSize(10)
	if f := l.untrackedFloor.Load(); f != 0 {
		t.Fatalf("floor %d, want 0 (every key cached)", f)
	}
	seq := 0
	rotate(l, at(time.Second), "rot", 2000, &seq)
	sw := sweep(t, l, at(2*time.Second))
	if len(sw.Rotations) != 1 || !sw.Rotations[0].Started || sw.Rotations[0].Team != "rot" {
		t.Fatalf("rotations %+v, want rot started (2,000 keys against a bound of 1,000)", sw.Rotations)
	}
	if got := metricValue(t, reg, "gate_limiter_rotating_teams", nil); got != 1 {
		t.Errorf("gate_limiter_rotating_teams = %v, want 1", got)
	}
	cached := l.Len()
	if d := rotate(l, at(3*time.Second), "rot", 1001, &seq); !d.Limited {
		t.Errorf("rot after 1,001 more fresh keys, collapsed into one at a threshold of 1,000: %+v, want limited", d)
	}
	if n := l.Len(); n != cached+1 {
		t.Errorf("cached %d keys after 1,001 more fresh keys, want %d: the collapsed rot: alone more", n, cached+1)
	}
	sw = sweep(t, l, at(4*time.Second))
	if len(sw.Counts) != 1 || sw.Counts[0].Team != "rot:" {
		t.Errorf("the tick writes %d counts (first %+v), want rot:'s alone", len(sw.Counts), sw.Counts[:min(len(sw.Counts), 1)])
	}
	if d := l.CheckAt(at(4*time.Second), "ok:user", 1); d.Limited || d.Rotating {
		t.Errorf("another team's user: %+v", d)
	}
}

// A limiter that took over another's rotating teams (a rules reload: InheritRotation) keeps
// them rotating, and nominating one of them again adds no second candidate: its hash is the
// new limiter's (which hashes by the old one's seed).
func TestInheritRotation(t *testing.T) {
	old, _, _ := newTest(t, rotationCfg(CardinalityOverflow))
	startRotation(t, old)
	l, _, _ := newTest(t, rotationCfg(CardinalityOverflow))
	l.InheritRotation(old)
	sweep(t, l, at(3*time.Second)) // its sketch's windows ready, as a tick's first sweep makes them
	if rs := l.Rotating(); len(rs) != 1 || rs[0].Team != "rot" {
		t.Fatalf("rotating after the takeover: %+v, want rot", rs)
	}
	if d := l.CheckAt(at(3*time.Second), "rot:fresh", 1); !d.Rotating {
		t.Errorf("a fresh key of rot: %+v, want it checked as the rotating team's", d)
	}
	l.nominate("rot", maphash.String(l.seed, "rot"), 0)
	if n := len(l.card.cands.Load().list); n != 1 {
		t.Errorf("%d candidates after rot was nominated again, want 1", n)
	}
}

// startRotation has team "rot" send 2,000 fresh keys at 1s and l's sweep at 2s find it
// rotating.
func startRotation(t *testing.T, l *Limiter) {
	t.Helper()
	seq := 0
	rotate(l, at(time.Second), "rot", 2000, &seq)
	if sw := sweep(t, l, at(2*time.Second)); len(sw.Rotations) != 1 {
		t.Fatalf("rotations %+v, want rot started", sw.Rotations)
	}
}

// A reload raising the bound (max_keys 1,000 → 2,000) early in a window keeps a team still
// minting over the new bound (3,000 keys a window) rotating: the window that ended counts,
// not only the current one's keys since its first sweep. Judged on those (51 a second into
// the window), the team was released at the reload, its fresh keys let through
// unflagged (2,250 of them), and found and reported rotating again 45 s later.
func TestInheritRotationRaisedBoundEarlyInAWindow(t *testing.T) {
	old, clk, _ := newTest(t, rotationCfg(CardinalityOverflow))
	seq := 0
	for s := time.Duration(0); s < 61*time.Second; s += time.Second { // 50 keys a second
		rotate(old, at(s), "rot", 50, &seq)
		sweep(t, old, at(s+time.Second))
	}
	if rs := old.Rotating(); len(rs) != 1 {
		t.Fatalf("rotating before the reload: %+v, want rot", rs)
	}
	clk.Set(at(61 * time.Second))
	cfg := rotationCfg(CardinalityOverflow)
	cfg.KeyCardinality = 2000
	l, _, _ := newTest(t, cfg)
	l.InheritRotation(old)
	let, found := 0, 0
	for s := 61 * time.Second; s < 2*time.Minute; s += time.Second {
		for range 50 {
			seq++
			if d := l.CheckAt(at(s), fmt.Sprintf("rot:id-%d", seq), 1); !d.Rotating {
				let++
			}
		}
		found += len(sweep(t, l, at(s+time.Second)).Rotations)
	}
	if let != 0 || found != 0 {
		t.Errorf("after max_keys 1,000 -> 2,000 a second into a window, a team of 3,000 keys a window: %d fresh keys not rotating, %d rotations started or ended; want 0 and 0", let, found)
	}
}

// A reload that lengthens the rule's window (1m → 1h) keeps the keys the rotating team had
// in the minute: they are keys of the hour holding it too. So the hour ends over the bound
// and the team stays rotating through the next one, as a limiter on the hour all along
// would have it; it is released when an hour ends under the bound, and then stops being a
// candidate: its last window over half the bound is an hour, not a minute.
func TestInheritRotationLongerWindow(t *testing.T) {
	old, _, _ := newTest(t, rotationCfg(CardinalityOverflow))
	startRotation(t, old) // 2,000 keys in the first minute, bound 1,000
	cfg := rotationCfg(CardinalityOverflow)
	cfg.Window = time.Hour
	l, _, _ := newTest(t, cfg)
	l.InheritRotation(old)
	sweep(t, l, at(3*time.Second))
	seq := 1_000_000
	if d := rotate(l, at(10*time.Minute), "rot", 300, &seq); !d.Rotating {
		t.Fatalf("rot in the first hour after the reload: %+v, want rotating", d)
	}
	if sw := sweep(t, l, at(time.Hour)); len(sw.Rotations) != 0 {
		t.Errorf("rotations at the end of the first hour %+v, want none: it had 2,300 keys, bound 1,000", sw.Rotations)
	}
	if rs := l.Rotating(); len(rs) != 1 {
		t.Fatalf("rotating in the second hour: %+v, want rot", rs)
	}
	rotate(l, at(time.Hour+time.Minute), "rot", 10, &seq)
	if sw := sweep(t, l, at(2*time.Hour)); len(sw.Rotations) != 1 || sw.Rotations[0].Started {
		t.Errorf("rotations at the end of the second hour %+v, want rot released (10 keys)", sw.Rotations)
	}
	if p := l.card.cands.Load(); p != nil {
		t.Errorf("candidates after the release: %d, want none (no hour since the first had 500 keys)", len(p.list))
	}
}

// A reload that shortens the rule's window (1h → 1m) has no evidence of the team's keys in
// a minute (the hour's are more): the team stays rotating to the end of the current minute
// only, released then on that minute's keys.
func TestInheritRotationShorterWindow(t *testing.T) {
	cfg := rotationCfg(CardinalityOverflow)
	cfg.Window = time.Hour
	old, _, _ := newTest(t, cfg)
	startRotation(t, old)
	l, _, _ := newTest(t, rotationCfg(CardinalityOverflow))
	l.InheritRotation(old)
	sweep(t, l, at(3*time.Second))
	if rs := l.Rotating(); len(rs) != 1 {
		t.Fatalf("rotating after the reload: %+v, want rot", rs)
	}
	seq := 1_000_000
	rotate(l, at(10*time.Second), "rot", 10, &seq)
	if sw := sweep(t, l, at(time.Minute)); len(sw.Rotations) != 1 || sw.Rotations[0].Started {
		t.Errorf("rotations at the end of the first minute %+v, want rot released (10 keys)", sw.Rotations)
	}
}

// A rules reload mid-window (InheritRotation) does not count twice the keys a candidate
// team had before it: a team of 700 steady users, a candidate under a bound of 1,000,
// whose users send again after the reload, still has 700 keys in the window, and is not
// taken for rotating (its users then limited as one).
func TestInheritRotationCountsAKeyOnce(t *testing.T) {
	users := func(l *Limiter, now time.Time) {
		for u := range 700 {
			if d := l.CheckAt(now, fmt.Sprintf("big:user-%d", u), 1); d.Limited || d.Rotating {
				t.Fatalf("big's user %d: %+v", u, d)
			}
		}
	}
	old, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
	for range 3 {
		users(old, at(time.Second))
	}
	if sw := sweep(t, old, at(2*time.Second)); len(sw.Rotations) != 0 {
		t.Fatalf("rotations before the reload %+v, want none", sw.Rotations)
	}
	if p := old.card.cands.Load(); p == nil || len(p.list) != 1 {
		t.Fatalf("big not a candidate before the reload")
	}
	l, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
	l.InheritRotation(old)
	sweep(t, l, at(3*time.Second))
	users(l, at(4*time.Second))
	if sw := sweep(t, l, at(5*time.Second)); len(sw.Rotations) != 0 {
		t.Errorf("rotations after the reload %+v, want none: big has 700 keys, bound 1,000", sw.Rotations)
	}
}

// A window that ends with more keys than the bound finds its team rotating, though the
// keys that took it over the bound came after the window's last sweep: the next sweep
// judges the window that ended, not only the one that starts.
func TestRotationFoundAtTheWindowsEnd(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityOverflow))
	seq := 0
	rotate(l, at(10*time.Second), "rot", 600, &seq) // a candidate from about the 500th
	if sw := sweep(t, l, at(11*time.Second)); len(sw.Rotations) != 0 {
		t.Fatalf("rotations %+v, want none yet", sw.Rotations)
	}
	rotate(l, at(59*time.Second), "rot", 1500, &seq)
	if sw := sweep(t, l, at(61*time.Second)); len(sw.Rotations) != 1 || !sw.Rotations[0].Started {
		t.Errorf("rotations %+v, want rot started: its window ended with 1,600 keys, bound 1,000", sw.Rotations)
	}
	if d := rotate(l, at(62*time.Second), "rot", 1, &seq); !d.Rotating {
		t.Errorf("a fresh key of rot: %+v, want rotating", d)
	}
}

// A rotating team's record under on_cardinality overflow or tag is answered without the
// cache (no key is looked up and found, none inserted): neither a hit nor a miss of
// gate_limiter_cache_total, as a check answered from the sketch is not. Each was counted
// a hit: 1,000 of them here, where no check ever found its key cached.
func TestRotatingChecksAreNoCacheHits(t *testing.T) {
	for _, a := range []CardinalityAction{CardinalityOverflow, CardinalityTag} {
		t.Run(a.String(), func(t *testing.T) {
			l, _, reg := newTest(t, rotationCfg(a))
			startRotation(t, l)
			seq := 10_000
			rotate(l, at(3*time.Second), "rot", 1000, &seq)
			var tally Tally
			for i := range 1000 {
				l.CheckTally(at(3*time.Second), fmt.Sprintf("rot:tallied-%d", i), 1, &tally)
			}
			l.AddTally(&tally)
			if got := metricValue(t, reg, "gate_limiter_rotation_records_total", map[string]string{"on_cardinality": a.String()}); got != 2000 {
				t.Fatalf("gate_limiter_rotation_records_total = %v, want 2,000", got)
			}
			if got := metricValue(t, reg, "gate_limiter_cache_total", map[string]string{"result": "hit"}); got != 0 {
				t.Errorf("gate_limiter_cache_total{result=hit} = %v, want 0: no check found its key cached", got)
			}
		})
	}
}

// A further limit following the primary's rotations (FollowRotation) with no floor of its
// own keeps a rotating team's keys in its sketch, none cached, and when the rotation ends
// caches such a key with what it sent meanwhile: its window is not forgotten. Other
// teams' keys are cached as every key is without a floor.
func TestFollowRotationWithoutAFloor(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityOverflow))
	f, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 100, SketchWidth: DefaultSketchWidth}) // floor 1: none
	f.FollowRotation(l)
	if fl := f.untrackedFloor.Load(); fl != 0 {
		t.Fatalf("further limit's floor %d, want 0", fl)
	}
	startRotation(t, l)
	sweep(t, f, at(2*time.Second))
	for i := range 500 {
		k := fmt.Sprintf("rot:fresh-%d", i)
		l.CheckAt(at(3*time.Second), k, 1)
		f.CheckAt(at(3*time.Second), k, 1)
	}
	f.CheckAt(at(3*time.Second), "ok:u1", 1)
	sweep(t, l, at(61*time.Second))
	sweep(t, f, at(61*time.Second))
	for range 40 { // in window 1, which the sliding window still covers at 121 s
		f.CheckAt(at(100*time.Second), "rot:heavy", 1)
	}
	if n := f.Len(); n != 1 {
		t.Errorf("further limit cached %d keys, want ok:u1 alone", n)
	}
	if sw := sweep(t, l, at(121*time.Second)); len(sw.Rotations) != 1 || sw.Rotations[0].Started {
		t.Fatalf("rotations %+v, want rot released", sw.Rotations)
	}
	f.CheckAt(at(121*time.Second), "rot:heavy", 1)
	if s, ok := f.Snapshot(at(121*time.Second), "rot:heavy"); !ok || s.Pending < 41 {
		t.Errorf("rot:heavy after the rotation: cached %v, pending %d; want cached with its 41 records", ok, s.Pending)
	}
}

// A team minting keys at an even rate is found within two windows of its rotation's start,
// by 2.5 × the bound keys (and the count's error) at most: keys it sent before it became a
// candidate (half the bound of records) are not counted, so a team with 1 to 1.5 × the
// bound keys a window is found only in its second window, once it has the bound there
// (after about 2.3 and 2.45 × the bound keys here). Faster ones are found in their first.
// The docs said a team is found by 1.5 × the bound keys at most.
func TestRotationFoundWithinTwoWindows(t *testing.T) {
	for _, perWindow := range []int{1300, 1450, 3000} {
		t.Run(fmt.Sprint(perWindow), func(t *testing.T) {
			l, _, _ := newTest(t, rotationCfg(CardinalityOverflow)) // bound 1,000
			seq, found, perTick := 0, time.Duration(0), perWindow/60
			for s := time.Duration(0); s < 3*time.Minute && found == 0; s += time.Second {
				for j := range perTick {
					seq++
					l.CheckAt(at(s+time.Duration(j)*time.Second/time.Duration(perTick)), fmt.Sprintf("rot:id-%d", seq), 1)
				}
				if sw := sweep(t, l, at(s+time.Second)); len(sw.Rotations) > 0 {
					found = s + time.Second
				}
			}
			t.Logf("%d keys a window: found at %s, after %d keys (%.2f × the bound)", perWindow, found, seq, float64(seq)/1000)
			if found == 0 || found > 2*time.Minute || seq > 3000 {
				t.Errorf("%d keys a window: found at %s after %d keys, want within two windows and 2.5 × the bound (2,500 keys; 3,000 with the count's error)", perWindow, found, seq)
			}
			if perWindow >= 2000 && found >= time.Minute {
				t.Errorf("%d keys a window: found at %s, want in the first window (over 1.5 × the bound in it)", perWindow, found)
			}
		})
	}
}

// Many candidates (ordinary teams busy enough to be, under a lowered bound), past the few
// a check compares its key's start with: the candidates are found by their team's hash,
// each nominated once, the rotating team among them found and acted on (its fresh keys,
// and a further limit following it), the ordinary ones neither, and a candidate dropped
// by the sweep is gone from the lookup. The lookup had been a scan of every candidate,
// 2,964 ns a check under 1,000 of them (BenchmarkCheckUntracked/candidates).
func TestManyCandidatesFoundByTeam(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityOverflow)) // floor 100, bound 1,000
	f, _, _ := newTest(t, Config{Window: time.Minute, Threshold: 100, SketchWidth: DefaultSketchWidth})
	f.FollowRotation(l)
	const teams = 60
	now := at(time.Second)
	seq := 0
	// 100 users × 12 = 1,200 records a team, a user's 12 under the floor. A team is
	// nominated once the records of its keys the sketch samples (one key in eight, by
	// hash: 12.5 of 100 on average, each 12 records counted 8 times) reach half the
	// bound, 6 keys: nearly every team is. With 50 users a team (6.25 keys on average)
	// about 60% were, and once in some 200 runs fewer than half (24 of 60, in CI).
	for range 12 {
		for tm := range teams {
			for u := range 100 {
				if d := l.CheckAt(now, fmt.Sprintf("team-%d:user-%d", tm, u), 1); d.Limited || d.Rotating {
					t.Fatalf("team-%d:user-%d: %+v", tm, u, d)
				}
			}
		}
		rotate(l, now, "rot", 200, &seq)
	}
	cs := l.card.cands.Load()
	if cs == nil || cs.tab == nil || len(cs.list) < teams/2 {
		t.Fatalf("candidates %v, want most of the %d teams, looked up by hash", cs, teams)
	}
	seen := map[string]bool{}
	for _, r := range cs.list {
		if seen[r.team] {
			t.Errorf("%s a candidate twice", r.team)
		}
		seen[r.team] = true
		if c, _, _, _ := cs.of(r.team + ":someone"); c != r {
			t.Errorf("a key of %s finds %v", r.team, c)
		}
	}
	if !seen["rot"] {
		t.Fatal("rot is no candidate")
	}
	sw := sweep(t, l, at(2*time.Second))
	if len(sw.Rotations) != 1 || sw.Rotations[0].Team != "rot" || !sw.Rotations[0].Started {
		t.Fatalf("rotations %+v, want rot alone started", sw.Rotations)
	}
	now = at(3 * time.Second)
	if d := rotate(l, now, "rot", 1, &seq); !d.Rotating || !d.Limited {
		t.Errorf("rot's fresh key: %+v, want rotating, limited (overflow)", d)
	}
	if d := l.CheckAt(now, "team-7:user-new", 1); d.Rotating || d.Limited {
		t.Errorf("an ordinary candidate's new user: %+v", d)
	}
	if !l.card.rotatingKey("rot:fresh") || l.card.rotatingKey("rot:") || l.card.rotatingKey("team-7:user-1") || l.card.rotatingKey("rot") {
		t.Error("rotatingKey: want rot's keys alone, not its collapsed key or team")
	}
	// Two windows on, with rot alone still minting: the ordinary teams are dropped.
	sweep(t, l, at(61*time.Second))
	rotate(l, at(62*time.Second), "rot", 2000, &seq)
	sweep(t, l, at(121*time.Second))
	cs = l.card.cands.Load()
	if cs == nil || len(cs.list) != 1 || cs.list[0].team != "rot" {
		t.Fatalf("candidates after two quiet windows %v, want rot alone", cs)
	}
	if c, _, _, _ := cs.of("team-7:user-1"); c != nil {
		t.Errorf("team-7 found after it was dropped: %s", c.team)
	}
	if d := rotate(l, at(122*time.Second), "rot", 1, &seq); !d.Rotating {
		t.Errorf("rot's fresh key after the others were dropped: %+v, want rotating", d)
	}
}

// Nominations, lookups and sweeps at once (the race detector's test): checks on four
// goroutines make hundreds of teams candidates, the set growing its table and sharing its
// list with the next, while sweeps rebuild it and Rotating reads it.
func TestCandidatesChangedUnderChecks(t *testing.T) {
	l, _, _ := newTest(t, rotationCfg(CardinalityCollapse))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 30 {
				now := at(time.Duration(r) * time.Second)
				for tm := range 50 {
					for u := range 20 {
						l.CheckAt(now, fmt.Sprintf("t%d-%d:u%d", g, tm, u), 1)
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := 0; ; s++ {
			select {
			case <-stop:
				return
			default:
			}
			var sw Sweep
			l.Sweep(at(time.Duration(s%120)*time.Second), &sw)
			l.Rotating()
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	if cs := l.card.cands.Load(); cs != nil {
		seen := map[string]bool{}
		for _, r := range cs.list {
			if seen[r.team] {
				t.Errorf("%s a candidate twice", r.team)
			}
			seen[r.team] = true
		}
	}
}
