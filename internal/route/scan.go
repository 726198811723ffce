package route

import (
	"math/bits"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file reads the members of a JSON object in one pass, to find where a key's fields
// are and whether any of them appears more than once. It works on the value as a string,
// never decodes it, and allocates nothing.
//
// The scanner reads an object's members strictly (a quoted name, ':', a value, then ',' or
// '}') but skips a nested object or array by counting brackets outside strings, without
// checking what is inside, as gjson.Get does: on a valid value it agrees with a JSON
// decoder, and on an invalid one it either reports it malformed or reads it the way the
// brackets say. Without validation (KeyFrom.lax) that is all the checking a value gets.

// scanMalformed is what the scanning functions return for a value they cannot read.
const scanMalformed = -1

// members reads the members of the object whose '{' is at js[i]. For each member whose
// name, unescaped, equals names[j], it sets at[j] to the index of the member's value the
// first time and to -1 (appears more than once) after; at must hold zeros on entry and be
// as long as names; every index it sets is inside js. It returns the index just past the
// object's closing '}', or scanMalformed; or, when it stopped early, the index of the last
// name's value.
//
// It stops early once every name has been seen and nothing after can be a member by any
// of them (noMemberAfter): a field near the start of a large event is then read without
// walking the rest, member by member, to its end. The answer in at is the same as the
// whole walk's, since that walk would find no other member by those names.
//
// ends, when not nil (as long as names), gets, for each name's member it walked past, the
// index just past its value: a reader of that value need not find its end again (a
// 36-byte id costs a scan of its own). A value it did not walk past (where it stopped
// early) is left as it was: ends must hold zeros on entry, as at.
//
// ahead, when not nil, is told the first name's value as soon as every name has been
// seen, before the rest is looked through (touchAhead).
func members(js string, i int, names []memberName, at, ends []int, ahead *touchAhead) int {
	i = skipSpace(js, i+1)
	if i < len(js) && js[i] == '}' {
		return i + 1
	}
	tried := false // whether stopping early was tried (and failed): once is enough
	// The lengths of names, a bit each (63: any longer): a member whose name, without
	// escapes, has none of them is none of names, told without comparing it to each.
	var lens uint64
	for _, n := range names {
		lens |= 1 << min(len(n.s), 63)
	}
	for {
		if i >= len(js) || js[i] != '"' {
			return scanMalformed
		}
		end, esc := keyEnd(js, i+1)
		if end < 0 {
			return scanMalformed
		}
		name := js[i+1 : end]
		i = skipSpace(js, end+1)
		if i >= len(js) || js[i] != ':' {
			return scanMalformed
		}
		i = skipSpace(js, i+1)
		if i >= len(js) {
			return scanMalformed // cut off after the name: no value to point at
		}
		hit := -1 // which of names the member is, if any
		if esc || lens&(1<<min(len(name), 63)) != 0 {
			for j, want := range names {
				if nameIs(name, esc, want.s) {
					hit = j
					if at[j] == 0 {
						at[j] = i
					} else {
						at[j] = -1
					}
				}
			}
		}
		if hit >= 0 && !tried && !slices.Contains(at, 0) {
			tried = true
			if ahead != nil {
				ahead.touch(js, at[0])
			}
			if allAbsentAfter(js[i:], names) {
				return i
			}
		}
		if i = skipValue(js, i); i < 0 {
			return scanMalformed
		}
		if hit >= 0 && ends != nil {
			ends[hit] = i
		}
		i = skipSpace(js, i)
		if i >= len(js) {
			return scanMalformed
		}
		switch js[i] {
		case ',':
			i = skipSpace(js, i+1)
		case '}':
			return i + 1
		default:
			return scanMalformed
		}
	}
}

// allAbsentAfter reports whether rest holds no member named by any of names.
func allAbsentAfter(rest string, names []memberName) bool {
	for _, n := range names {
		if !noMemberAfter(rest, n) {
			return false
		}
	}
	return true
}

// memberName is a member name a key reads, with what noMemberAfter needs of it worked
// out once, when the key source is parsed.
type memberName struct {
	s string
	// rare is the index in s of the byte least common in JSON text (see byteRank): the
	// one noMemberAfter looks for.
	rare int
	// short is whether s holds a byte JSON can write as an escape other than \uXXXX:
	// '"', '\\', '/' and the control bytes.
	short bool
}

func newMemberName(s string) memberName {
	n := memberName{s: s}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c == '/' || c < 0x20 {
			n.short = true
		}
		if byteRank(s[i]) >= byteRank(s[n.rare]) {
			n.rare = i
		}
	}
	return n
}

// byteRank orders bytes from common in JSON events (0: the quote) to rare (every byte
// not listed): a rough order of English text, JSON's punctuation and event names, enough
// to pick a byte of a name that the text around it seldom holds.
func byteRank(c byte) int {
	const common = `"e:,tao_insrl.d$cuhpm-/0123456789{}gfybwvk[]TSCAEPIRMNLDBOFHGUWVYKjxqzJXQZ`
	if i := strings.IndexByte(common, c); i >= 0 {
		return i
	}
	return len(common)
}

// noMemberAfter reports whether rest cannot hold a member named n, written plainly or
// with escapes. Conservative: true only when rest holds no '"', n and '"' in a row, and
// no escape that could spell a byte of n: \uXXXX can spell any byte, so rest must hold
// no "\u", and a name with a short escape (memberName.short) needs rest free of
// backslashes altogether.
//
// Both searches are strings.IndexByte's vector loop, for a backslash and for the name's
// rarest byte: on a 200-byte event about 50 ns, where strings.Index on the name (which
// stops at every byte like its first, a 't' in most text) took 115 and a loop reading
// eight bytes at a time 230.
func noMemberAfter(rest string, n memberName) bool {
	if n.short {
		if strings.IndexByte(rest, '\\') >= 0 {
			return false
		}
	} else {
		for off := 0; off < len(rest); { // a backslash last sets off past the end
			p := strings.IndexByte(rest[off:], '\\')
			if p < 0 {
				break
			}
			if p += off; p+1 < len(rest) && rest[p+1] == 'u' {
				return false
			}
			off = p + 2
		}
	}
	if n.s == "" {
		return !strings.Contains(rest, `""`)
	}
	c := n.s[n.rare]
	for off := n.rare; off < len(rest); {
		p := strings.IndexByte(rest[off:], c)
		if p < 0 {
			return true
		}
		p += off
		// Where the name would start and end if this byte were its rare one.
		if start, end := p-n.rare, p-n.rare+len(n.s); start > 0 && end < len(rest) &&
			rest[start-1] == '"' && rest[end] == '"' && rest[start:end] == n.s {
			return false
		}
		off = p + 1
	}
	return true
}

// element returns the index of element n (counting from 0) of the array whose '[' is at
// js[i], 0 if the array is shorter, or scanMalformed.
func element(js string, i int, n uint64) int {
	i = skipSpace(js, i+1)
	if i < len(js) && js[i] == ']' {
		return 0
	}
	for k := uint64(0); ; k++ {
		if i >= len(js) {
			return scanMalformed
		}
		if k == n {
			return i
		}
		if i = skipValue(js, i); i < 0 {
			return scanMalformed
		}
		i = skipSpace(js, i)
		if i >= len(js) {
			return scanMalformed
		}
		switch js[i] {
		case ',':
			i = skipSpace(js, i+1)
		case ']':
			return 0
		default:
			return scanMalformed
		}
	}
}

// arrayIndex reads a path part as an array index, as gjson does: digits only, leading
// zeros allowed; an index too large for a uint64 matches no element.
func arrayIndex(part string) (uint64, bool) {
	if part == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(part); i++ {
		c := part[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (1<<64-1-9)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// skipValue returns the index just past the value that starts at js[i], or scanMalformed.
// Numbers are read loosely (their characters, not their grammar), and nested objects and
// arrays by their brackets only.
func skipValue(js string, i int) int {
	if i >= len(js) {
		return scanMalformed
	}
	switch c := js[i]; c {
	case '"':
		if end := stringEnd(js, i+1); end >= 0 {
			return end + 1
		}
		return scanMalformed
	case '{', '[':
		return skipNested(js, i)
	case 't':
		return skipLiteral(js, i, "true")
	case 'f':
		return skipLiteral(js, i, "false")
	case 'n':
		return skipLiteral(js, i, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return numberEnd(js, i)
		}
	}
	return scanMalformed
}

func skipLiteral(js string, i int, lit string) int {
	if strings.HasPrefix(js[i:], lit) {
		return i + len(lit)
	}
	return scanMalformed
}

// numberEnd returns the index just past the number that starts at js[i].
func numberEnd(js string, i int) int {
	for i++; i < len(js); i++ {
		switch c := js[i]; {
		case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
		default:
			return i
		}
	}
	return i
}

// skipNested returns the index just past the object or array that starts at js[i], found
// by counting brackets outside strings, or scanMalformed if it does not end. tooDeep has
// bounded the nesting; this needs no stack anyway. It reads eight bytes at a time and
// handles each quote or bracket among them in turn, in a string or not (see zeroBytes): a
// nested value is mostly other bytes.
func skipNested(js string, i int) int {
	depth, inString, start := 0, false, 0 // start: where the current string's contents start
	for ; i < len(js); i += 8 {
		var w uint64
		if i+8 <= len(js) {
			w = load64(js, i)
		} else {
			w = partialWord(js, i)
		}
		// '[' and ']' are '{' and '}' less 0x20: one test finds both kinds.
		wl := w | ones*0x20
		for m := zeroBytes(w^(ones*'"')) | zeroBytes(wl^(ones*'{')) | zeroBytes(wl^(ones*'}')); m != 0; m &= m - 1 {
			p := i + bits.TrailingZeros64(m)/8
			c := js[p]
			if inString {
				if c == '"' && !escaped(js, start, p) {
					inString = false
				}
				continue
			}
			switch c {
			case '"':
				inString, start = true, p+1
			case '{', '[':
				depth++
			default: // '}', ']'
				if depth--; depth == 0 {
					return p + 1
				}
			}
		}
	}
	return scanMalformed
}

// stringEnd returns the index of the '"' that closes the string whose contents start at
// js[i], or scanMalformed: the first quote not escaped, that is not preceded by an odd
// number of backslashes. It reads eight bytes at a time for quotes (see zeroBytes): on
// strings full of escaped quotes, such as JSON embedded in a string, about twice as fast
// as strings.IndexByte from quote to quote or gjson's byte loop (BenchmarkStringEnd).
func stringEnd(js string, i int) int {
	start := i
	for ; i < len(js); i += 8 {
		var w uint64
		if i+8 <= len(js) {
			w = load64(js, i)
		} else {
			w = partialWord(js, i)
		}
		for m := zeroBytes(w ^ (ones * '"')); m != 0; m &= m - 1 {
			if q := i + bits.TrailingZeros64(m)/8; !escaped(js, start, q) {
				return q
			}
		}
	}
	return scanMalformed
}

// escaped reports whether the quote at js[q] is escaped: preceded, back to start, by an
// odd number of backslashes.
func escaped(js string, start, q int) bool {
	n := 0
	for j := q - 1; j >= start && js[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// ones has 1 in every byte: ones*c has c in every byte.
const ones = 0x0101010101010101

// partialWord is load64 for the last bytes of s, fewer than eight: the bytes past the end
// of s read as zeros, and a zero byte is none of the bytes the scanner looks for.
func partialWord(s string, i int) uint64 {
	var w uint64
	for k := len(s) - 1; k >= i; k-- {
		w = w<<8 | uint64(s[k])
	}
	return w
}

// load64 reads the eight bytes at s[i:] as a little-endian word: one load where the
// compiler can.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// zeroBytes returns w with the top bit of each byte set where that byte of w is zero, and
// every other bit clear. Exact (no carry crosses a byte), so each set bit is a match:
// w^(ones*c) has zero bytes exactly where w has c.
func zeroBytes(w uint64) uint64 {
	const low7 = 0x7F7F7F7F7F7F7F7F
	return ^((w&low7 + low7) | w | low7)
}

// keyEnd is stringEnd for a member name, short as names are: it also reports whether the
// name holds a backslash escape.
func keyEnd(js string, i int) (int, bool) {
	esc := false
	for ; i < len(js); i++ {
		switch js[i] {
		case '"':
			return i, esc
		case '\\':
			esc = true
			i++
		}
	}
	return scanMalformed, esc
}

// skipSpace returns the index of the first byte at or after i that is not JSON white space.
func skipSpace(js string, i int) int {
	for ; i < len(js); i++ {
		switch js[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return i
}

// nameIs reports whether the raw member name (between its quotes; esc if it holds a
// backslash) means want once unescaped. Without escapes that is plain equality, the usual
// case; an escaped name ("team\u005fid") is decoded on the fly, as a JSON decoder would.
func nameIs(raw string, esc bool, want string) bool {
	if !esc {
		return raw == want
	}
	if len(raw) <= len(want) { // every escape is longer than what it stands for
		return false
	}
	return unescapedIs(raw, want)
}

// unescapedIs reports whether the JSON string contents raw, unescaped, equal want. It
// decodes as encoding/json does: a lone or malformed UTF-16 surrogate becomes U+FFFD.
func unescapedIs(raw, want string) bool {
	var buf [utf8.UTFMax]byte
	j := 0 // how much of want has matched
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			if j >= len(want) || want[j] != c {
				return false
			}
			i++
			j++
			continue
		}
		r, next, ok := unescapeAt(raw, i)
		if !ok {
			return false
		}
		i = next
		n := utf8.EncodeRune(buf[:], r)
		if j+n > len(want) || want[j:j+n] != string(buf[:n]) {
			return false
		}
		j += n
	}
	return j == len(want)
}

// unescape returns the JSON string contents raw with its escapes decoded as encoding/json
// decodes them (unescapedIs), every other byte as it is. ok is false when raw holds an
// escape that is none (\q, a short \u): the string cannot be read. gjson stopped there,
// and at a control byte, so that "a\qb" and "a\qc" both read "a", another team's key.
// One allocation: the decoded string is never longer than raw.
func unescape(raw string) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		r, next, ok := unescapeAt(raw, i)
		if !ok {
			return "", false
		}
		b.WriteRune(r)
		i = next
	}
	return b.String(), true
}

// unescapeAt decodes the escape at raw[i] (a backslash): the rune it stands for and the
// index just past it, a valid surrogate pair being one escape; a lone or malformed
// surrogate is U+FFFD, as encoding/json reads it (so "u\ud800", "u\udbff" and "u\ufffd"
// are one key: docs/rules.md), and the escape after it is left to be read on its own.
func unescapeAt(raw string, i int) (rune, int, bool) {
	if i+1 >= len(raw) {
		return 0, 0, false
	}
	switch raw[i+1] {
	case '"', '\\', '/':
		return rune(raw[i+1]), i + 2, true
	case 'b':
		return '\b', i + 2, true
	case 'f':
		return '\f', i + 2, true
	case 'n':
		return '\n', i + 2, true
	case 'r':
		return '\r', i + 2, true
	case 't':
		return '\t', i + 2, true
	case 'u':
		r, ok := hex4(raw, i+2)
		if !ok {
			return 0, 0, false
		}
		if !utf16.IsSurrogate(r) {
			return r, i + 6, true
		}
		if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
			if r2, ok := hex4(raw, i+8); ok {
				if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
					return dec, i + 12, true
				}
			}
		}
		return unicode.ReplacementChar, i + 6, true
	}
	return 0, 0, false
}

// jsonString reports whether the contents of a JSON string the lax scanner read to its
// closing quote hold no raw control byte, which JSON requires escaped: without
// validation "2<LF>" was read as a key of its own beside "2" (a review).
func jsonString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			return false
		}
	}
	return true
}

// jsonNumber reports whether s, a number's text as the lax scanner reads it (numberEnd:
// any run of digits, '.', 'e', 'E', '+' and '-'), is one by JSON's grammar: an optional
// '-', 0 or a digit 1-9 and more digits, then optionally '.' and digits, then optionally
// 'e' or 'E', a sign and digits. Without validation 02, -02 and 1-2 were each a key of
// their own beside 2 and -2 (a review), which no JSON decoder downstream reads.
func jsonNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i++; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for i = j; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		}
		if i == j {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := i
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		}
		if i == j {
			return false
		}
	}
	return i == len(s)
}

// hex4 reads the four hexadecimal digits at s[i:].
func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for k := i; k < i+4; k++ {
		c := s[k]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
