package keypart

import "testing"

func TestAppendEscapesAndValueReadsBack(t *testing.T) {
	for _, c := range []struct{ v, part string }{
		{"0190a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b", "0190a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b"},
		{"a:b", "a%3Ab"},
		{"50%", "50%25"},
		{"user:1%:x", "user%3A1%25%3Ax"},
		{"", ""},
	} {
		if got := string(Append([]byte("k:"), c.v)); got != "k:"+c.part {
			t.Errorf("Append(%q) = %q, want %q", c.v, got, "k:"+c.part)
		}
		if got := Escape(c.v); got != c.part {
			t.Errorf("Escape(%q) = %q, want %q", c.v, got, c.part)
		}
		if got := Value(c.part); got != c.v {
			t.Errorf("Value(%q) = %q, want %q", c.part, got, c.v)
		}
	}
}

// TestOddAtEdge: a non-ASCII space or a format character at either end of a key is
// reported with its code point; inside a key, an ASCII space at an end, or none, is not.
func TestOddAtEdge(t *testing.T) {
	for _, c := range []struct {
		key  string
		r    rune
		what string
	}{
		{"42", 0, ""},
		{"", 0, ""},
		{"4\u200b2", 0, ""},
		{" 42 ", 0, ""},
		{"42\u200b", 0x200b, "an invisible character"},
		{"\u206042", 0x2060, "an invisible character"},
		{"\ufeff42", 0xfeff, "an invisible character"},
		{"\u00a042", 0xa0, "a non-ASCII space"},
		{"42\u3000", 0x3000, "a non-ASCII space"},
		{"\u200b", 0x200b, "an invisible character"},
	} {
		if r, what := OddAtEdge(c.key); r != c.r || what != c.what {
			t.Errorf("OddAtEdge(%q) = %U, %q; want %U, %q", c.key, r, what, c.r, c.what)
		}
	}
}
