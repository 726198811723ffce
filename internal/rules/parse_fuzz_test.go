package rules

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParse: whatever a rules file holds, Parse returns a set or problems and never
// panics (a reload reads the file an operator is still editing), and each problem is at a
// place in the file: FILE:LINE:COL with the file's own name, a line the file has (one past
// the last for a file that ends mid-construct) and a column from 1, with a message.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n"))
	f.Add([]byte("rules:\n  - name: a\n    key: json:team_id+distinct_id\n    limits: [1500ms:5, 1900ms:6]\n"))
	f.Add([]byte("rules:\n\t- name: a\n"))
	f.Add([]byte("---\n---\nrules: []\n"))
	f.Add([]byte("%YAML 1.2\nrules: []\n"))
	f.Add([]byte("\xff\xfer\x00u\x00l\x00e\x00s\x00:\x00 \x00[\x00]\x00"))
	f.Add([]byte("rules:\n  - name: x\n    key: json:a\n    limits: [1m:5]\n    action: topic:\n    force: [\"\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("rules.yaml", data, Options{Topics: topics})
		if err == nil {
			if s == nil {
				t.Fatal("no set and no error")
			}
			return
		}
		if !errors.Is(err, ErrRules) {
			t.Errorf("%v: does not wrap ErrRules", err)
		}
		var ps Problems
		if !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("%v: not a Problems", err)
		}
		// YAML's line breaks: LF, CRLF and a CR alone.
		lines := bytes.Count(data, []byte("\n")) + bytes.Count(data, []byte("\r")) - bytes.Count(data, []byte("\r\n")) + 1
		for _, e := range ps {
			var p *Problem
			if !errors.As(e, &p) {
				t.Fatalf("%v: not a Problem", e)
			}
			if p.File != "rules.yaml" || p.Line < 1 || p.Line > lines+1 || p.Col < 1 || p.Msg == "" {
				t.Errorf("%q: a problem at no place in the file (%d lines): %v", data, lines, p)
			}
		}
	})
}
