// Package durtext prints a time.Duration as an operator writes it: time.Duration's String
// without its trailing zero units, so 1h rather than 1h0m0s, 7m rather than 7m0s, 1h2m
// rather than 1h2m0s. It is for the text people read (errors, warnings, log messages),
// not for wire or API formats, which keep String's form.
//
// What it guarantees: String(d) parses back to d with time.ParseDuration, for every d.
// It imports nothing of the gate's, so any package can use it.
package durtext

import (
	"strings"
	"time"
)

// String is d as an operator writes it: time.Duration's String without its trailing zero
// units (1h, 48h, 1h30m, 90s as 1m30s), where String gives 1h0m0s and 48h0m0s. A zero unit
// between others stays (1h0m1s), and so does 0s.
func String(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
