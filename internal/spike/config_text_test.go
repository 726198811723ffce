package spike

import (
	"strings"
	"testing"
	"time"
)

// The configuration's errors print durations as an operator writes them (7m, 1h30m), not
// as time.Duration's String does (7m0s, 1h30m0s).
func TestConfigErrorsWriteDurations(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Window: 7 * time.Minute}, "window 7m must divide an hour"},
		{Config{Window: time.Minute, LevelHalfLife: 30 * time.Second}, "level half-life 30s (at least a window), season half-life 72h (at least a day), min history 24h"},
		{Config{Window: time.Minute, WeekHalfLife: 48 * time.Hour}, "week half-life 48h, want at least a week"},
		{Config{Window: 30 * time.Minute, MaxSpike: 90 * time.Minute}, "max spike 1h30m, want from 2h (a fold period and two windows) to a week"},
	} {
		if _, err := tc.cfg.WithDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
