package durtext

import (
	"math"
	"testing"
	"time"
)

func TestString(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 48 * time.Hour: "48h", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s",
		time.Minute: "1m", 500 * time.Millisecond: "500ms", time.Hour + time.Second: "1h0m1s", 10 * time.Minute: "10m", 0: "0s",
		7 * time.Minute: "7m", time.Hour + 2*time.Minute: "1h2m", -time.Hour: "-1h", -90 * time.Second: "-1m30s",
	} {
		if got := String(d); got != want {
			t.Errorf("String(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestStringParsesBack checks the package's guarantee: what String prints, time.ParseDuration
// reads back as the same duration.
func TestStringParsesBack(t *testing.T) {
	for _, d := range []time.Duration{
		0, 1, time.Microsecond, 1500 * time.Microsecond, 500 * time.Millisecond, time.Second,
		time.Minute + 500*time.Millisecond, time.Hour + time.Second, time.Hour + time.Minute,
		time.Hour + 500*time.Millisecond, 48 * time.Hour, 90 * time.Minute, 7 * time.Minute,
		-1, -time.Hour, -time.Hour - time.Second, -90 * time.Minute, -500 * time.Millisecond,
		math.MaxInt64, math.MinInt64 + 1,
	} {
		s := String(d)
		got, err := time.ParseDuration(s)
		if err != nil {
			t.Errorf("String(%d) = %q, which does not parse: %v", int64(d), s, err)
			continue
		}
		if got != d {
			t.Errorf("String(%d) = %q, which parses as %d", int64(d), s, int64(got))
		}
	}
}
