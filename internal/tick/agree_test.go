package tick

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestFleetThatDisagreesOnLimitsIsToldOf: three gates under one prefix, one of which
// enforces other limits (a review gave one gate of three a rule in divert mode beside the
// others' cap: the team got 13 % of its limit, and nothing said why). Each gate adds its
// limits' hash to the minute's key once a minute and counts the minute before's: the
// gauge says 2 from the first count, the warning comes on the third minute running
// (a rules change splits a fleet for a minute or two), naming both hashes, and once the
// odd gate takes the others' limits an info line says they agree again.
func TestFleetThatDisagreesOnLimitsIsToldOf(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: time.Minute, Threshold: 100}
	mk := func(limits string) (*gate, *bytes.Buffer) {
		g := newGate(t, clk, lc, Config{KeyPrefix: "agree", LiveLimits: limits}, srv)
		var log bytes.Buffer
		g.tk.log = slog.New(slog.NewJSONHandler(&log, nil))
		return g, &log
	}
	a, alog := mk("rule team cap 1m:100")
	b, _ := mk("rule team cap 1m:100")
	odd, _ := mk("rule team divert 1m:100")
	gauge := func() float64 { return testutil.ToFloat64(a.tk.m.limitVariants) }
	minute := epochStart.Truncate(time.Minute)
	check := func(m int, gs ...*gate) {
		for _, g := range gs {
			g.tk.checkAgreement(t.Context(), minute.Add(time.Duration(m)*time.Minute+7*time.Second))
		}
	}
	check(0, a, b, odd)
	if gauge() != 0 || alog.Len() != 0 {
		t.Fatalf("nothing to compare in the first minute: gauge %v, log %q", gauge(), alog)
	}
	for m := 1; m <= 3; m++ {
		check(m, a, b, odd)
		if gauge() != 2 {
			t.Fatalf("minute %d: gauge %v, want 2 sets of limits", m, gauge())
		}
		if warned := strings.Contains(alog.String(), "enforce different limits"); warned != (m == 3) {
			t.Fatalf("minute %d: warned %v, want a warning on the third minute only:\n%s", m, warned, alog)
		}
	}
	hashA, hashOdd := LimitsHash("rule team cap 1m:100"), LimitsHash("rule team divert 1m:100")
	if !strings.Contains(alog.String(), `"limits_hash":"`+hashA+`"`) || !strings.Contains(alog.String(), `"other_hashes":["`+hashOdd+`"]`) {
		t.Errorf("the warning names neither this gate's hash %s nor the other %s:\n%s", hashA, hashOdd, alog)
	}
	// The odd gate is given the others' limits (its rules file fixed).
	fixed, _ := mk("rule team cap 1m:100")
	check(4, a, b, fixed)
	check(5, a, b, fixed)
	if gauge() != 1 || !strings.Contains(alog.String(), "enforce the same limits again") {
		t.Errorf("agreed again: gauge %v, log:\n%s", gauge(), alog)
	}
	if n := strings.Count(alog.String(), "enforce different limits"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, alog)
	}
}

// TestFleetDisagreementWarnedAcrossAReload: a gate's rules reload builds a new tick,
// whose first check comes at once, in the minute of the old tick's last. With
// Config.Warnings shared, that check counts nothing again and the run of checks goes on:
// the disagreement is warned on the third minute, as without the reload. Each tick's own
// run began again at a reload, and the warning came two minutes later (a fleet reloading
// every few minutes was never warned).
func TestFleetDisagreementWarnedAcrossAReload(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.NewFake(epochStart)
	lc := limit.Config{Window: time.Minute, Threshold: 100}
	shared := NewWarnings()
	var log bytes.Buffer // the gate's, whichever of its ticks writes it (not the odd one's)
	mk := func(limits string, w *Warnings) *gate {
		g := newGate(t, clk, lc, Config{KeyPrefix: "agree", LiveLimits: limits, Warnings: w}, srv)
		if w != nil {
			g.tk.log = slog.New(slog.NewJSONHandler(&log, nil))
		}
		return g
	}
	a := mk("rule team cap 1m:100", shared)
	odd := mk("rule team divert 1m:100", nil)
	minute := epochStart.Truncate(time.Minute)
	check := func(at time.Duration, gs ...*gate) {
		for _, g := range gs {
			g.tk.checkAgreement(t.Context(), minute.Add(at))
		}
	}
	check(10*time.Second, a, odd)
	check(time.Minute+10*time.Second, a, odd)
	check(2*time.Minute+10*time.Second, a, odd)
	// The gate's rules reloaded (another rule added) late in minute 2: the new tick
	// checks at once, then a minute apart.
	reloaded := mk("rule team cap 1m:100; rule other cap 1m:7", shared)
	check(2*time.Minute+50*time.Second, reloaded)
	if strings.Contains(log.String(), "enforce different limits") {
		t.Fatalf("warned in minute 2, before three minutes of disagreement:\n%s", &log)
	}
	check(3*time.Minute+10*time.Second, odd)
	check(3*time.Minute+50*time.Second, reloaded)
	if n := strings.Count(log.String(), "enforce different limits"); n != 1 {
		t.Fatalf("%d warnings in minute 3, the third minute of disagreement across the reload, want 1:\n%s", n, &log)
	}
}

// TestClockWarningNotRepeatedByANewTick: a gate's rules reload builds a new tick, whose
// clock check runs at once. With Config.Warnings shared, a warning the old tick gave
// within ten minutes is not given again.
func TestClockWarningNotRepeatedByANewTick(t *testing.T) {
	srv := redistest.Start(t)
	gate := dialGate(t, srv, "+time")
	shared := NewWarnings()
	logs := &logBuffer{}
	mk := func() *Ticker {
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := New(l, []redis.UniversalClient{gate}, Config{Warnings: shared}, nil, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	mk().checkClock(t.Context())
	mk().checkClock(t.Context())
	if n := len(logs.lines("clock check cannot run TIME")); n != 1 {
		t.Errorf("%d warnings of TIME refused by two ticks of one gate, want 1; log:\n%s", n, logs.buf.String())
	}
}

// TestLimitsHashTellsLimitsApart: the hash changes with the limits' text and only with it.
func TestLimitsHashTellsLimitsApart(t *testing.T) {
	a, again, b := LimitsHash("rule team cap"), LimitsHash(strings.Join([]string{"rule", "team", "cap"}, " ")), LimitsHash("rule team divert")
	if a != again || a == b || len(a) != 12 {
		t.Errorf("LimitsHash: %q, again %q, of other limits %q", a, again, b)
	}
}
