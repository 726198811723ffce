package endpoints

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
)

// TestReadinessWarnsWhenTheCauseChanges: a gate started before its Redis (a pod
// scheduled first) warns that it cannot connect; Redis then comes up and refuses the
// gate's password. The refusal is the operator's to fix (GATE_REDIS_PASSWORD), and /readyz
// names it, so the log must too, at warning level, once. Before, every attempt after the
// first was logged at debug: the only warning said "connection refused", sending the
// operator to the network.
func TestReadinessWarnsWhenTheCauseChanges(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Password: "right"})
	srv.Stop(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var logs faulttest.Buffer
	r := &Readiness{kafka: func() []string { return nil }, clients: []redis.UniversalClient{c}, urls: []string{"redis://" + srv.Addr()},
		timeout: 10 * time.Second, up: make([]bool, 1), log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in 30s; log:\n%s", what, logs.String())
			}
		}
	}
	waitUntil("first warning", func() bool { return strings.Contains(logs.String(), "level=WARN") })
	srv.Restart(t)
	waitUntil("refusal in /readyz", func() bool { return strings.Contains(strings.Join(r.waiting(), ";"), "WRONGPASS") })
	// The probe records the refusal before it logs it: the line may follow.
	waitUntil("line naming the refusal", func() bool { return strings.Contains(logs.String(), "WRONGPASS") })
	// Two more attempts refused (each logged at debug), not warned of again: counted, not
	// slept for, which a loaded machine may pass with no attempt made.
	refusals := func() int {
		n := 0
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "WRONGPASS") {
				n++
			}
		}
		return n
	}
	first := refusals()
	waitUntil("two more attempts refused", func() bool { return refusals() >= first+2 })
	var warns []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") {
			warns = append(warns, line)
		}
	}
	if len(warns) != 2 || strings.Contains(warns[0], "WRONGPASS") || !strings.Contains(warns[1], "WRONGPASS") {
		t.Errorf("warnings %q; want two: that Redis cannot be reached, then that it refuses the password (WRONGPASS)", warns)
	}
	// Each says what it is: a Redis not reached, then one that answers and refuses (it was
	// "not reachable yet" too, sending the operator to the network).
	if len(warns) == 2 && (!strings.Contains(warns[0], "redis not reachable yet") || !strings.Contains(warns[1], "redis answers but refuses the gate's PING")) {
		t.Errorf("warnings %q; want the first to say Redis is not reachable, the second that it refuses", warns)
	}
}
