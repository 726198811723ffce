package limit

import (
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/spike"
)

// The configuration's errors print durations as an operator writes them (1m, 2h), not as
// time.Duration's String does (1m0s, 2h0m0s).
func TestConfigErrorsWriteDurations(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Window: -time.Minute}, "window -1m: must be at least 1ms"},
		{Config{MaxEventAge: -time.Hour}, "max event age -1h: must be positive"},
		{Config{SyncInterval: -time.Minute}, "sync interval -1m: must be positive"},
		{Config{Window: time.Minute, ColdWriteInterval: 2 * time.Minute}, "cold write interval 2m: must not exceed the window 1m"},
		{Config{Window: time.Minute, Clock: EventClock, DivertHold: 2 * time.Minute}, "divert hold 2m, release 1: not supported with the event clock"},
		{Config{Window: time.Minute, Adaptive: &spike.Config{Window: 30 * time.Minute}}, "adaptive thresholds: window 30m, limiter's 1m: must be the same"},
		{Config{TTL: -time.Hour}, "ttl -1h, idle timeout 5m: must be positive"},
		{Config{IdleTimeout: 500 * time.Millisecond}, "idle timeout 500ms: must be at least 1s"},
		{Config{Window: time.Millisecond, Clock: EventClock, MaxEventAge: 2000 * time.Hour}, "max event age 2000h: at most 1048576 windows of 1ms"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
