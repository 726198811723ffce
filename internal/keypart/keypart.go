// Package keypart is how a composite key's parts are written and read back: one field's
// value with '%' as %25 and ':' as %3A, everything else as is. The ':' between a
// composite key's fields is then its only ':', and each part reads back to its value
// alone: two distinct tuples of values never share a key (route's FuzzCompositeKey).
//
// One definition for the router, which writes the keys, and for what reads them back
// from outcome rows (gate outcomes, gate replay), which would otherwise drift apart.
// Likewise OddAtEdge, what the places an operator writes a key refuse at its ends.
package keypart

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Append appends v to buf as a part of a composite key. A value holding neither ':' nor
// '%', the usual case, is appended unchanged in one copy.
func Append(buf []byte, v string) []byte {
	if strings.IndexByte(v, ':') < 0 && strings.IndexByte(v, '%') < 0 {
		return append(buf, v...)
	}
	for {
		i := strings.IndexAny(v, ":%")
		if i < 0 {
			return append(buf, v...)
		}
		buf = append(buf, v[:i]...)
		if v[i] == ':' {
			buf = append(buf, "%3A"...)
		} else {
			buf = append(buf, "%25"...)
		}
		v = v[i+1:]
	}
}

// Escape is v as a part of a composite key (Append), v itself when it needs no escape.
func Escape(v string) string {
	if strings.IndexByte(v, ':') < 0 && strings.IndexByte(v, '%') < 0 {
		return v
	}
	return string(Append(nil, v))
}

// Value is the value a part was written from, Append's inverse. A part that Append does
// not write (a '%' that is no escape of ':' or '%', such as a team keyed alone whose id
// is "acme%20inc" or "%41") is returned as it is: only %3A and %25 are read back, and only
// where Escape of the result gives the part again.
func Value(part string) string {
	if strings.IndexByte(part, '%') < 0 {
		return part
	}
	if v, err := url.PathUnescape(part); err == nil && Escape(v) == part {
		return v
	}
	return part
}

// OddAtEdge returns the character key starts or ends with that editors, terminals and
// logs show as nothing or as an ASCII space, and what it is: "a non-ASCII space"
// (unicode.IsSpace beyond ASCII: U+00A0, U+3000) or "an invisible character" (a format
// character, category Cf: U+200B, U+2060, U+FEFF); 0 and "" for neither. Copied with a
// team id from a page or a chat, one names a key no record has. For the places an
// operator writes a key (GATE_OVERRIDES, GATE_FORCE_OVERFLOW, gate overrides), which
// refuse it; ASCII spaces there are the callers' (trimmed, or shown quoted).
func OddAtEdge(key string) (rune, string) {
	first, _ := utf8.DecodeRuneInString(key)
	last, _ := utf8.DecodeLastRuneInString(key)
	for _, r := range []rune{first, last} {
		if key != "" && Odd(r) {
			return r, OddKind(r)
		}
	}
	return 0, ""
}

// Odd reports whether r is one of OddAtEdge's characters: a non-ASCII space or an
// invisible (format, Cf) character. The rules file refuses them at a match value's edge
// and at each composite part's (internal/rules).
func Odd(r rune) bool {
	return r > unicode.MaxASCII && unicode.IsSpace(r) || unicode.Is(unicode.Cf, r)
}

// OddKind says what an Odd character is: "a non-ASCII space" or "an invisible character".
func OddKind(r rune) string {
	if unicode.IsSpace(r) {
		return "a non-ASCII space"
	}
	return "an invisible character"
}
