package rules

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// syntaxProblem is the Problem of a file yaml.v3 cannot read (err, from reading data):
// its message without the library's "yaml: line N: " prefix, at the line syntaxLine
// finds, column 1 (the library gives none).
func syntaxProblem(file string, data []byte, err error) *Problem {
	msg, line := yamlMessage(err)
	if l := syntaxLine(data, msg); l > 0 {
		line = l
	}
	return &Problem{File: file, Line: max(line, 1), Col: 1, Msg: msg}
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

// syntaxSearchBytes bounds what syntaxLine has the YAML parser read, all its reads
// together: under a tenth of a second at the slowest (a long list in flow style, each cut
// read to its end). MaxRules rules in flow style, their closing ']' left out, are a
// quarter of it; in block style a cut fails where the file breaks, soon.
const syntaxSearchBytes = 512 << 10

// syntaxLine is the line at which data stops being readable YAML, with the error msg:
// the line after the longest run of whole lines that reads without that error (cleanly,
// or cut inside a construct a later line closes); 0 if data is empty, or if finding it
// would read more than syntaxSearchBytes.
//
// The library's own line does not say that: for a parser error it is the 0-based line
// where the enclosing block or flow starts (a line 5 indented as no list item can be is
// "line 1", the rules: line), for a scanner error the 1-based line it stopped at, and
// none at all on the first line. A file the parser stops in reads the same up to that
// point whatever follows, so the last cut that does not fail as the whole file does is
// just before the line at fault. The cuts are tried from the end: one of a construct
// opened earlier and closed later (a list over several lines) can fail as the whole
// file does.
func syntaxLine(data []byte, msg string) int {
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
	r := &countingReader{}
	for i := len(ends) - 2; i >= -1; i-- {
		cut := 0
		if i >= 0 {
			cut = ends[i]
		}
		// A cut the parser fails in early costs what it read, not its length.
		r.b = data[:cut]
		// Every document of the cut: the error may be in a later one than the first.
		dec := yaml.NewDecoder(r)
		var err error
		for err == nil {
			var n yaml.Node
			err = dec.Decode(&n)
		}
		if r.n > syntaxSearchBytes {
			return 0
		}
		if errors.Is(err, io.EOF) {
			return i + 2
		}
		if m, _ := yamlMessage(err); m != msg {
			return i + 2
		}
	}
	return 0
}

// countingReader reads b, counting in n what it gave, b after b.
type countingReader struct {
	b []byte
	n int
}

func (r *countingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p, r.b)
	r.b = r.b[k:]
	r.n += k
	return k, nil
}
