package keypart

import (
	"strings"
	"testing"
)

// FuzzRoundTrip checks the grammar the package documents: Escape writes no ':' and
// writes '%' only as %25 or %3A, Value reads Escape's output back to the value, and
// Value reads back only what Escape writes (any other part is returned as it is).
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a:b", "50%", "%3A", "%25", "%3a", "acme%20inc", "%41", "a%3Ab%41", "%", "%%3A", "\xff:%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		e := Escape(v)
		if strings.Contains(e, ":") {
			t.Fatalf("Escape(%q) = %q holds ':'", v, e)
		}
		if got := string(Append([]byte("x"), v)); got != "x"+e {
			t.Fatalf("Append(%q) = %q, Escape %q", v, got, e)
		}
		if got := Value(e); got != v {
			t.Fatalf("Value(Escape(%q)) = %q", v, got)
		}
		// v as a part: read back to a value only when Escape of that value is v.
		if got := Value(v); got != v && Escape(got) != v {
			t.Fatalf("Value(%q) = %q, whose Escape is %q", v, got, Escape(got))
		}
	})
}
