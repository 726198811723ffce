package rules

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// syntaxProblem is the Problem of a file yaml.v3 cannot read (err, from reading data):
// its message without the library's "yaml: line N: " prefix, at the line and column
// syntaxPlace finds (the library gives no column), or else at the library's line,
// column 1. A tab there is named: the library's message for most tabs ("found character
// that cannot start any token") does not say which character, and a tab looks like spaces.
func syntaxProblem(file string, data []byte, err error) *Problem {
	msg, line := yamlMessage(err)
	col := 1
	if l, c, at := syntaxPlace(data, msg); l > 0 {
		line, col = l, c
		switch {
		case at == '\t' && !strings.Contains(msg, "tab"):
			msg += " (a tab: YAML indents with spaces only)"
		case msg == msgControl && at == 0 && bytes.Count(data, []byte{0}) >= len(data)/4:
			// NULs (a control character is never at a line's end, at's other 0), about
			// every other byte: UTF-16 without the byte order mark the library reads it by.
			msg += " (U+0000, a NUL: a file in UTF-16 without its byte order mark? save it as UTF-8)"
		case msg == msgControl:
			// Which, as for a tab: the library does not say, and it shows as nothing.
			msg += fmt.Sprintf(" (U+%04X)", at)
		}
	}
	return &Problem{File: file, Line: max(line, 1), Col: col, Msg: msg}
}

// yamlMessage splits a yaml.v3 error, "yaml: line N: MESSAGE" or "yaml: MESSAGE", into
// MESSAGE (on one line) and N (0 when there is none).
func yamlMessage(err error) (string, int) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if v, err := strconv.Atoi(n); err == nil && v > 0 {
				msg, line = after, v
			}
		}
	}
	return strings.Join(strings.Fields(msg), " "), line
}

// syntaxSearchBytes bounds what syntaxPlace has the YAML parser read, all its reads
// together: under a tenth of a second at the slowest (a long list in flow style, each cut
// read to its end). MaxRules rules in flow style, their closing ']' left out, are a
// quarter of it; in block style a cut fails where the file breaks, soon.
const syntaxSearchBytes = 512 << 10

// msgControl is the library's message for a character YAML does not allow.
const msgControl = "control characters are not allowed"

// msgKeyColon is the library's message for a cut inside a key of a block mapping.
const msgKeyColon = "could not find expected ':'"

// syntaxPlace is the line and column at which data stops being readable YAML, with the
// error msg, and the character there (0 at the line's end): 0, 0 if data is empty, or if
// finding the line would read more than syntaxSearchBytes; column 1 if finding the column
// would.
//
// The line is the one after the longest run of whole lines that reads without that error
// (cleanly, or cut inside a construct a later line closes). The library's own line does
// not say that: for a parser error it is the 0-based line where the enclosing block or
// flow starts (a line 5 indented as no list item can be is "line 1", the rules: line),
// for a scanner error the 1-based line it stopped at, and none at all on the first line.
// A file the parser stops in reads the same up to that point whatever follows, so the
// last cut that does not fail as the whole file does is just before the line at fault.
// The cuts are tried from the end: one of a construct opened earlier and closed later (a
// list over several lines) can fail as the whole file does.
//
// The column is found the same way within that line, cut after each of its characters
// from its end: it is the one just after the longest part of the line that, after the
// lines before it, reads without the error or is cut inside a construct. It is counted as
// the library counts a field's (yaml.Node.Column): from 1, in characters (a tab is one),
// a byte order mark that starts the file none (the library takes it for the encoding).
func syntaxPlace(data []byte, msg string) (line, col int, at rune) {
	// Lines and columns are counted in what the library reads.
	data, ok := asUTF8(data)
	if !ok {
		return 0, 0, 0
	}
	// ends[i] is the end of line i+1, its line break included: LF, CR LF or CR alone, as
	// YAML breaks lines (a file saved with CR alone would be one line otherwise).
	var ends []int
	for off := 0; off < len(data); {
		n := bytes.IndexAny(data[off:], "\r\n")
		if n < 0 {
			ends = append(ends, len(data))
			break
		}
		off += n + 1
		if data[off-1] == '\r' && off < len(data) && data[off] == '\n' {
			off++
		}
		ends = append(ends, off)
	}
	s := &syntaxSearch{data: data}
	for i := len(ends) - 2; i >= -1 && line == 0; i-- {
		cut := 0
		if i >= 0 {
			cut = ends[i]
		}
		m := s.read(cut, "")
		if s.r.n > syntaxSearchBytes {
			return 0, 0, 0
		}
		if m != msg {
			line = i + 2
		}
	}
	if line == 0 {
		return 0, 0, 0
	}
	start := 0
	if line >= 2 {
		start = ends[line-2]
	}
	text := bytes.TrimRight(data[start:ends[line-1]], "\r\n")
	from := 0
	if line == 1 && bytes.HasPrefix(text, []byte("\uFEFF")) {
		from = len("\uFEFF")
	}
	// A cut inside a list or mapping in flow style fails at its end as the parser wants
	// more there: a ',' or the closing bracket after an entry ([1m of [1m:5], cut so), a
	// value after '[', ',' or ':'. When the whole file fails so too (its ']' left out), a
	// cut that fails as it does and yet reads, or fails otherwise, with a closing bracket
	// after it is one inside a construct. (A cut inside a quoted value stays in it, and a
	// quote that nothing closes is at fault.)
	var probes []string
	switch msg {
	case "did not find expected ',' or ']'", "did not find expected ',' or '}'", "did not find expected node content":
		probes = []string{" ]", " }"}
	}
	inside := func(cut int) bool {
		for _, p := range probes {
			if s.read(cut, p) != msg {
				return true
			}
		}
		return false
	}
	// The cut at the line's start reads without the error (the line search found it so):
	// column 1 at worst.
	first, _ := utf8.DecodeRune(text[from:])
	for k := len(text); k > from; {
		m := s.read(start+k, "")
		ok := m != msg || inside(start+k)
		if s.r.n > syntaxSearchBytes {
			return line, 1, first
		}
		if ok {
			// The library knows a key of a block mapping for one only at its ':', and finds
			// it out of place only there: cut inside the key, it wants the ':'. The key is
			// at fault, from its first character (one indented as no item can be).
			for m == msgKeyColon && m != msg && k > from {
				_, w := utf8.DecodeLastRune(text[from:k])
				k -= w
				if m = s.read(start+k, ""); s.r.n > syntaxSearchBytes {
					return line, 1, first
				}
			}
			r, _ := utf8.DecodeRune(text[k:])
			return line, utf8.RuneCount(text[from:k]) + 1, r
		}
		_, w := utf8.DecodeLastRune(text[from:k])
		k -= w
	}
	return line, 1, first
}

// asUTF8 is data as the library reads it, in UTF-8: data itself, or, for text in UTF-16
// after its byte order mark, that text in UTF-8 without it. It is false for text in
// UTF-16 the library cannot read (an odd number of bytes, a surrogate without its pair).
func asUTF8(data []byte) ([]byte, bool) {
	var order binary.ByteOrder
	switch {
	case bytes.HasPrefix(data, []byte{0xFF, 0xFE}):
		order = binary.LittleEndian
	case bytes.HasPrefix(data, []byte{0xFE, 0xFF}):
		order = binary.BigEndian
	default:
		return data, true
	}
	if len(data)%2 != 0 {
		return nil, false
	}
	units := make([]uint16, 0, len(data)/2-1)
	for i := 2; i < len(data); i += 2 {
		units = append(units, order.Uint16(data[i:]))
	}
	var u []byte
	for _, r := range utf16.Decode(units) {
		if r == utf8.RuneError {
			return nil, false
		}
		u = utf8.AppendRune(u, r)
	}
	return u, true
}

// syntaxSearch reads cuts of data with the YAML parser, counting in r.n what it reads.
type syntaxSearch struct {
	data []byte
	r    countingReader
}

// read is the message of the error reading data[:cut] followed by more gives, "" if it
// reads cleanly. Every document is read: the error may be in a later one than the first.
func (s *syntaxSearch) read(cut int, more string) string {
	// A cut the parser fails in early costs what it read, not its length.
	s.r.b, s.r.more = s.data[:cut], []byte(more)
	dec := yaml.NewDecoder(&s.r)
	var err error
	for err == nil {
		var n yaml.Node
		err = dec.Decode(&n)
	}
	if errors.Is(err, io.EOF) {
		return ""
	}
	m, _ := yamlMessage(err)
	return m
}

// countingReader reads b then more, counting in n what it gave, b after b.
type countingReader struct {
	b, more []byte
	n       int
}

func (r *countingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		r.b, r.more = r.more, nil
	}
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p, r.b)
	r.b = r.b[k:]
	r.n += k
	return k, nil
}
