// What paces the clock check's warnings and counts the fleet's disagreement on limits,
// kept across a gate's rules reloads. Each rule set's tick had its own: a reload's new
// tick checks at once, so it repeated a clock warning the old one had just given, and it
// began the run of checks a disagreement is warned after again, so a fleet reloading
// every few minutes was never warned of gates enforcing other limits (a review).

package tick

import (
	"sync"
	"time"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/throttle"
)

// Warnings is the gate's pace of the clock check's warnings and its run of checks that
// found the fleet disagreeing (Config.Warnings), shared by its successive rule sets'
// ticks, two of which run together for a tick after a reload.
type Warnings struct {
	mu sync.Mutex
	// The clock check's paces (clockCheck), made at the first tick's first check, on
	// its wall clock.
	warnTime, warnSkew, warnProfiles *throttle.Every
	agree                            agreeRun
}

// NewWarnings returns the warnings' state to share between a gate's ticks.
func NewWarnings() *Warnings { return &Warnings{} }

// paces returns w's clock check paces, made on wall at the first call.
func (w *Warnings) paces(wall clock.Clock) (warnTime, warnSkew, warnProfiles *throttle.Every) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.warnTime == nil {
		w.warnTime, w.warnSkew, w.warnProfiles = newClockPaces(wall)
	}
	return w.warnTime, w.warnSkew, w.warnProfiles
}

// agreeRun is the fleet's agreement as the gate's checks last saw it (checkAgreement):
// the gate's, not a rule set's, as the minute keys it reads are the fleet's.
type agreeRun struct {
	mu     sync.Mutex
	split  int  // checks in a row that saw several hashes
	warned bool // a warning was logged since the fleet last agreed
	// read is the minute whose key (the one before it) the last check counted: a second
	// check in it (a reload's new tick's first, or a check retried in the minute) counts
	// nothing again, so a reload neither delays the warning nor hastens it.
	read int64
	warn *throttle.Every
}

// newClockPaces are the clock check's three warnings' paces, on wall.
func newClockPaces(wall clock.Clock) (warnTime, warnSkew, warnProfiles *throttle.Every) {
	return throttle.NewEvery(10*time.Minute, wall), throttle.NewEvery(10*time.Minute, wall), throttle.NewEvery(10*time.Minute, wall)
}
