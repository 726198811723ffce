package route

import (
	"encoding/json"
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
		if got := unescape(s); got != want {
			t.Fatalf("%s: %q, encoding/json %q", raw, got, want)
		}
	})
}
