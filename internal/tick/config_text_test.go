package tick

import (
	"strings"
	"testing"
	"time"
)

// The configuration's errors print durations as an operator writes them (-1m, -2h), not
// as time.Duration's String does (-1m0s, -2h0m0s).
func TestConfigErrorsWriteDurations(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{TickInterval: -time.Minute}, "tick interval -1m: must be positive"},
		{Config{KeepConfirmed: -2 * time.Hour}, "keep confirmed -2h: must be positive"},
		{Config{TickTimeout: -time.Minute}, "tick timeout -1m: must be positive"},
	} {
		if _, err := tc.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
