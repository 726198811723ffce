package main

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalSentTwiceIsOneSignal: coreutils' timeout sends its SIGTERM to the gate and
// then to the gate's process group, which holds it, two signals an instant apart; the
// gate took the second for an operator's and cut its shutdown short at once (exit 143:
// uncommitted records routed again, counts not written to Redis; reproduced with
// `timeout --preserve-status 6 gate serve` under exactly-once). A signal within half a
// second of the first is that one sent twice now; one later ends the process as before.
func TestSignalSentTwiceIsOneSignal(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	sigs := make(chan os.Signal, 3)
	exited := make(chan int, 1)
	var stderr bytes.Buffer
	stamps := []time.Duration{0, 10 * time.Millisecond, 499 * time.Millisecond, 500 * time.Millisecond}
	clockAt := 0
	clk := func() time.Time {
		now = t0.Add(stamps[min(clockAt, len(stamps)-1)])
		clockAt++
		return now
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		exitOnSecondSignal(sigs, true, clk, &stderr, func(code int) { exited <- code })
	}()
	// The first, then the same twice more within half a second (timeout's, a group kill's).
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGTERM
	select {
	case code := <-exited:
		t.Fatalf("exited %d on a signal within half a second of the first", code)
	case <-time.After(100 * time.Millisecond): // nothing is to happen: a bound, not a wait for an event
	}
	// An operator's second, half a second on.
	sigs <- syscall.SIGINT
	select {
	case code := <-exited:
		if code != 130 {
			t.Errorf("exit status %d on a second SIGINT, want 130", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit on a signal half a second after the first")
	}
	<-done
	if !strings.Contains(stderr.String(), "second signal (interrupt)") {
		t.Errorf("stderr %q, want the second signal's line", stderr.String())
	}
}
