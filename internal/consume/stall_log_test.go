package consume

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A stall past StallNotReady makes the gate not ready; like every other not-ready
// condition an operator must act on, it should say so in the log (once), not only in
// the /readyz body, which no log collector sees.
// A gate stalled past GATE_STALL_NOT_READY (no poll, commit or transaction end while
// records wait) says so in its log once, as every other not-ready condition does: it goes
// not ready and is then restarted (GATE_STALL_RESTART), and its log was the one place left
// to say why.
func TestStallIsLogged(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 200
	env := newEnv(t, parts)
	var logs logSink
	env.logs = &logs
	env.ccfg.StallNotReady = 300 * time.Millisecond
	env.ccfg.StallRestart = 600 * time.Millisecond
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	hangProduce(t, env.cluster)
	// The gate's stop at the end waits this out (the produce never answers); not what is
	// tested.
	env.ccfg.ShutdownTimeout = time.Second
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "not ready for want of progress", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), "no progress for")
	})
	waitFor(t, 20*time.Second, "the stall logged", func() bool { return strings.Contains(logs.String(), "no progress") })
	for range 3 { // probes asking again: logged once a stall, not once a probe
		g.c.NotReady()
	}
	if n := strings.Count(logs.String(), "kafka: no progress while records wait"); n != 1 {
		t.Fatalf("the stall logged %d times, want once (not ready %q, not live %v):\n%s", n, g.c.NotReady(), g.c.Live(), logs.String())
	}
}

// A gate stalled past GATE_STALL_RESTART says so in its log once, when /healthz first
// fails: with GATE_STALL_NOT_READY off (0) nothing else logs the stall, and the restart
// that follows left `kubectl logs --previous` without a word of why.
func TestStallRestartIsLogged(t *testing.T) {
	t.Parallel()
	const parts, n = 2, 200
	env := newEnv(t, parts)
	var logs logSink
	env.logs = &logs
	env.ccfg.StallNotReady = -1 // off: GATE_STALL_NOT_READY=0
	env.ccfg.StallRestart = 300 * time.Millisecond
	recs := make([]*kgo.Record, n)
	for id := range recs {
		recs[id] = inputRecord(id, "team-"+strconv.Itoa(id%7))
	}
	produceAll(t, producer(t, env.cluster), recs)
	hangProduce(t, env.cluster)
	env.ccfg.ShutdownTimeout = time.Second
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "not live for want of progress", func() bool { return g.c.Live() != nil })
	for range 3 { // probes asking again: logged once a stall, not once a probe
		_ = g.c.Live()
	}
	if n := strings.Count(logs.String(), "GATE_STALL_RESTART"); n != 1 {
		t.Fatalf("the stall past GATE_STALL_RESTART logged %d times, want once (not live %v):\n%s", n, g.c.Live(), logs.String())
	}
}
