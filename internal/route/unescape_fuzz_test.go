package route

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// unescape decodes a JSON string's escapes as encoding/json does, lone surrogates included.
func FuzzUnescape(f *testing.F) {
	f.Add(`a\u0041\ud800\u0041\n\"\\\/x`)
	f.Add(`\ud83d\ude00`)
	f.Fuzz(func(t *testing.T, s string) {
		raw := `"` + s + `"`
		var want string
		if json.Unmarshal([]byte(raw), &want) != nil || !utf8.ValidString(s) {
			return
		}
		if got, ok := unescape(s); !ok || got != want {
			t.Fatalf("%s: %q, encoding/json %q", raw, got, want)
		}
	})
}

// unescape makes one allocation, the string it returns (make test runs it without -race:
// test-norace).
func TestUnescapeAllocatesOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	raw := strings.Repeat(`team \u00e9\n\ud83d\ude00 \"x\"`, 4) // past what a slice made on the stack holds
	if n := testing.AllocsPerRun(100, func() { _, _ = unescape(raw) }); n != 1 {
		t.Errorf("unescape allocated %v times, want 1", n)
	}
}
