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
