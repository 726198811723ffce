package rules

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"go.yaml.in/yaml/v3"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// The three worked examples of the rules reference, as one file.
const example = `# PostHog-style: a team limit, and a limit per user within a team.
rules:
  - name: merge-events
    key: json:team_id
    match:
      - field: json:event
        in: [$identify, $create_alias, $merge_dangerously]
    limits: [1m:1000]
    action: topic:events_merges
    force: [team-9, "42"]
  - name: team-user
    key: json:team_id+distinct_id
    missing: skip
    limits: [1m:5000, 1h:100000]
    mode: cap
  - name: team
    key: json:team_id
    limits: [1m:100000]
    threshold_mode: adaptive
    cost: bytes
  - name: try-ip
    key: header:ip
    match:
      - field: header:source
        not_in: [internal]
    limits: ["10s:200"]
    action: tag
    shadow: true
`

var topics = map[string]string{"events": "GATE_INPUT_TOPIC", "events_accepted": "GATE_ACCEPTED_TOPIC",
	"events_overflow": "GATE_OVERFLOW_TOPIC", "events_dead_letter": "GATE_DEAD_LETTER_TOPIC"}

func TestParseExample(t *testing.T) {
	s, err := Parse("rules.yaml", []byte(example), Options{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "rules.yaml" || len(s.Rules) != 4 {
		t.Fatalf("%+v", s)
	}
	m, tu, team, ip := s.Rules[0], s.Rules[1], s.Rules[2], s.Rules[3]
	if m.Name != "merge-events" || m.Key.String() != "json:team_id" || len(m.Match) != 1 || m.Match[0].Not ||
		m.Match[0].Field.String() != "json:event" || strings.Join(m.Match[0].Values, ",") != "$identify,$create_alias,$merge_dangerously" ||
		m.Action != (Action{Kind: Topic, Topic: "events_merges"}) || strings.Join(m.Force, ",") != "team-9,42" || tu.Force != nil || m.Mode != limit.Divert || m.Cost != route.CostEvents || m.Adaptive || m.Shadow {
		t.Errorf("merge-events: %+v", m)
	}
	if tu.Key.String() != "json:team_id+distinct_id" || tu.Mode != limit.Cap || !tu.SkipMissing || m.SkipMissing || len(tu.Limits) != 2 ||
		tu.Limits[0] != (Limit{time.Minute, 5000}) || tu.Limits[1] != (Limit{time.Hour, 100000}) || tu.Action.Kind != Overflow {
		t.Errorf("team-user: %+v", tu)
	}
	if !team.Adaptive || team.Cost != route.CostBytes {
		t.Errorf("team: %+v", team)
	}
	if !ip.Shadow || ip.Action.Kind != Tag || !ip.Match[0].Not || ip.Key.String() != "header:ip" || ip.Limits[0] != (Limit{10 * time.Second, 200}) {
		t.Errorf("try-ip: %+v", ip)
	}
}

// Every problem is reported at once, each with its file, line, column and field.
func TestParseProblems(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"not yaml", "rules: [", []string{"rules.yaml:1:9: did not find expected node content"}},
		{"empty", "", []string{"rules.yaml:1:1: rules: the file is empty"}},
		// An empty document (a file of comments and ---) is an empty file: not a document
		// that is no mapping, at a line past the file's end (2:1, 4:1).
		{"only a document marker", "---\n", []string{"rules.yaml:1:1: rules: the file is empty"}},
		{"comments and a document marker", "# the gate's rules\n---\n# none yet\n", []string{"rules.yaml:1:1: rules: the file is empty"}},
		{"no rules", "rule: []\n", []string{`rules.yaml:1:1: rule: unknown field (want rules:, and team: if you choose it)`, "rules.yaml:1:1: rules: missing"}},
		{"empty list", "rules: []\n", []string{"rules.yaml:1:8: rules: want a list of at least one rule"}},
		{"field errors", `rules:
  - name: Team
    key: jsn:team
    limits: [1m, 0s:5, 1m:0, "1m:10", 60s:20]
    mode: drop
    cost: records
    action: topic:events
    shadow: maybe
    threshold_mode: learned
    missing: ignore
    force: team-1
    colour: red
`, []string{
			`rules.yaml:2:11: rules[0].name: "Team": want 1 to 40 of a-z`,
			`rules.yaml:3:10: rules[0] "Team".key: "jsn:team": want json:FIELD`,
			`rules.yaml:4:14: rules[0] "Team".limits[0]: "1m" has no ':' between window and threshold`,
			`rules.yaml:4:18: rules[0] "Team".limits[1]: "0s:5": window "0s" is no time: want 1s or more`,
			`rules.yaml:4:24: rules[0] "Team".limits[2]: "1m:0": threshold "0" is not a whole number from 1`,
			`rules.yaml:4:39: rules[0] "Team".limits[4]: window 60s is rules[0] "Team".limits[3]'s too (1m)`,
			`rules.yaml:5:11: rules[0] "Team".mode: "drop": want divert or cap`,
			`rules.yaml:6:11: rules[0] "Team".cost: "records": want events or bytes`,
			`rules.yaml:7:13: rules[0] "Team".action: "topic:events": events is GATE_INPUT_TOPIC`,
			`rules.yaml:8:13: rules[0] "Team".shadow: "maybe": want true or false`,
			`rules.yaml:9:21: rules[0] "Team".threshold_mode: "learned": want static or adaptive`,
			`rules.yaml:10:14: rules[0] "Team".missing: "ignore": want dead_letter or skip`,
			`rules.yaml:11:12: rules[0] "Team".force: want a list of keys`,
			`rules.yaml:12:5: rules[0] "Team".colour: unknown field`,
		}},
		{"missing fields, duplicates", `rules:
  - name: a
  - name: b
    key: key
    limits: [1m:10]
    match:
      - field: header:x
        in: [1]
        not_in: [2]
      - field: "json:"
        in: []
      - in: [x]
  - name: b
    key: key
    key: header:y
    limits: [1m:10]
`, []string{
			`rules.yaml:2:5: rules[0] "a".key: missing`,
			`rules.yaml:2:5: rules[0] "a".limits: missing`,
			`rules.yaml:9:9: rules[1] "b".match[0].not_in: want one of in and not_in, not both`,
			`rules.yaml:10:16: rules[1] "b".match[1].field: "json:": want json:FIELD`,
			`rules.yaml:11:13: rules[1] "b".match[1].in: want a list of at least one value`,
			`rules.yaml:12:9: rules[1] "b".match[2].field: missing`,
			`rules.yaml:15:5: rules[2] "b".key: given twice`,
			`rules.yaml:13:5: rules[2]: name "b" is rules[1]'s too`,
		}},
		// A rule's windows are GATE_LIMITS's: whole seconds (rules.ParseLimit reads both), so
		// that two windows never share a Redis key (1500ms and 1900ms were both /w1).
		{"windows not whole seconds", "rules:\n  - name: team\n    key: json:team_id\n    limits: [1500ms:100, 1900ms:200, 2s:300]\n", []string{
			`rules.yaml:4:14: rules[0] "team".limits[0]: "1500ms:100": window "1500ms" is not a whole number of seconds such as 1h`,
			`rules.yaml:4:26: rules[0] "team".limits[1]: "1900ms:200": window "1900ms" is not a whole number of seconds such as 1h`,
		}},
		{"duplicate names", "rules:\n  - {name: a, key: key, limits: [1m:1]}\n  - {name: a, key: key, limits: [1m:1]}\n",
			[]string{`rules.yaml:3:5: rules[1]: name "a" is rules[0]'s too`}},
		// A rule's other problems hide not that its name is taken: every problem at once.
		{"duplicate names beside other problems", "rules:\n  - {name: a, key: key, limits: [1m:0]}\n  - {name: a, key: key, limits: [1m:1], mode: drop}\n",
			[]string{`rules.yaml:2:34: rules[0] "a".limits[0]: "1m:0": threshold "0"`, `rules.yaml:3:47: rules[1] "a".mode: "drop": want divert or cap`,
				`rules.yaml:3:5: rules[1]: name "a" is rules[0]'s too`}},
		{"adaptive window", "rules:\n  - {name: a, key: key, limits: [7m:1], threshold_mode: adaptive}\n",
			[]string{`rules.yaml:2:57: rules[0] "a".threshold_mode: static unless the first limit's window (7m) divides an hour`}},
		{"cardinality", "rules:\n  - {name: a, key: json:team_id, limits: [1m:1], max_keys: 10}\n  - {name: b, key: json:team_id+distinct_id, limits: [1m:1], max_keys: -1, on_cardinality: drop}\n", []string{
			`rules.yaml:2:60: rules[0] "a".max_keys: only for a key of several fields`,
			`rules.yaml:3:72: rules[1] "b".max_keys: "-1": want a whole number`,
			`rules.yaml:3:92: rules[1] "b".on_cardinality: "drop": want collapse, overflow or tag`,
		}},
		{"track", "rules:\n  - {name: a, key: json:team_id+distinct_id, limits: [1m:1], track: some}\n  - {name: b, key: json:team_id+distinct_id, limits: [1m:1], track: all, max_keys: 5}\n", []string{
			`rules.yaml:2:69: rules[0] "a".track: "some": want all`,
			`rules.yaml:3:84: rules[1] "b".max_keys: only with track: above_floor`,
		}},
		// A track that is neither value is its own problem, not also max_keys' and
		// on_cardinality's "only with track: above_floor" (a reviewer's file had three
		// problems for one).
		{"track unknown beside max_keys", "rules:\n  - {name: a, key: json:team_id+distinct_id, limits: [1m:1], track: some, max_keys: 5, on_cardinality: tag}\n", []string{
			`rules.yaml:2:69: rules[0] "a".track: "some": want all`,
		}},
		{"topic", "rules:\n  - {name: a, key: key, limits: [1m:1], action: topic:a/b}\n  - {name: b, key: key, limits: [1m:1], action: discard}\n",
			[]string{`rules.yaml:2:49: rules[0] "a".action: "topic:a/b": want topic:NAME`, `rules.yaml:3:49: rules[1] "b".action: "discard": want overflow, tag, topic:NAME or drop`}},
		// Kafka takes '.' and '_' in a topic's name for one, and refuses to create a topic
		// whose name differs from another's only there ("collides with existing topic"):
		// such a rule topic could never exist, the gate waiting for it at start, routing
		// nothing, and saying to create it. The same topic in two rules is one topic.
		{"topic colliding", "rules:\n  - {name: a, key: key, limits: [1m:1], action: topic:events.overflow}\n" +
			"  - {name: b, key: key, limits: [1m:1], action: topic:merges.eu}\n  - {name: c, key: key, limits: [1m:1], action: topic:merges_eu}\n" +
			"  - {name: d, key: key, limits: [1m:1], action: topic:merges.eu}\n", []string{
			`rules.yaml:2:49: rules[0] "a".action: "topic:events.overflow": events.overflow and events_overflow (GATE_OVERFLOW_TOPIC) differ only in '.' and '_'`,
			`rules.yaml:4:49: rules[2] "c".action: "topic:merges_eu": merges_eu and merges.eu (rules[1] "b"'s topic) differ only in '.' and '_'`,
		}},
		// Without outcomes a dropped record would vanish unrecorded.
		{"drop", "rules:\n  - {name: a, key: key, limits: [1m:1], action: drop}\n",
			[]string{`rules.yaml:2:49: rules[0] "a".action: drop: needs GATE_OUTCOMES_TOPIC set`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("rules.yaml", []byte(c.yaml), Options{Topics: topics})
			if err == nil {
				t.Fatalf("parsed: %+v", s)
			}
			if s != nil || !errors.Is(err, ErrRules) || strings.Contains(err.Error(), "\n") {
				t.Errorf("set %v, error %q: want no set, ErrRules, one line", s, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%s", w, strings.ReplaceAll(err.Error(), "; ", "\n"))
				}
			}
			var ps Problems
			if errors.As(err, &ps) && len(ps) != len(c.want) {
				t.Errorf("%d problems, want %d:\n%s", len(ps), len(c.want), strings.ReplaceAll(err.Error(), "; ", "\n"))
			}
		})
	}
}

// A field given twice inside a rule names the rule, as every other problem of it does:
// in a file of many rules "rules[7].key" alone sends the operator counting.
func TestParseDuplicateFieldNamesRule(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"key", "rules:\n  - name: team\n    key: json:team_id\n    key: json:org_id\n    limits: [1m:1]\n",
			`rules.yaml:4:5: rules[0] "team".key: given twice`},
		{"before the name", "rules:\n  - key: json:team_id\n    key: json:org_id\n    name: team\n    limits: [1m:1]\n",
			`rules.yaml:3:5: rules[0] "team".key: given twice`},
		{"name", "rules:\n  - name: team\n    name: org\n    key: json:team_id\n    limits: [1m:1]\n",
			`rules.yaml:3:5: rules[0] "team".name: given twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(c.yaml), Options{})
			var ps Problems
			if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Error() != c.want {
				t.Errorf("error %v: want the one problem %q", err, c.want)
			}
		})
	}
}

// A problem beside rules: (an unknown top-level key, rules: given twice) hides not the
// rules' own problems: every problem at once, not one round of fixes each.
func TestParseTopLevelProblemsBesideRules(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", "version: 2\nrules:\n  - {name: a, key: key, limits: [1m:1], mode: drop}\n", []string{
			`rules.yaml:1:1: version: unknown field (want rules:, and team: if you choose it)`,
			`rules.yaml:3:47: rules[0] "a".mode: "drop": want divert or cap`,
		}},
		{"rules twice", "rules:\n  - {name: a, key: key, limits: [1m:0]}\nrules:\n  - {name: b, key: key, limits: [1m:1]}\n", []string{
			`rules.yaml:3:1: (top).rules: given twice`,
			`rules.yaml:2:34: rules[0] "a".limits[0]: "1m:0": threshold "0" is not a whole number from 1`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("rules.yaml", []byte(c.yaml), Options{})
			var ps Problems
			if !errors.As(err, &ps) || s != nil {
				t.Fatalf("set %v, error %v: want problems", s, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%s", w, strings.ReplaceAll(err.Error(), "; ", "\n"))
				}
			}
			if len(ps) != len(c.want) {
				t.Errorf("%d problems, want %d:\n%s", len(ps), len(c.want), strings.ReplaceAll(err.Error(), "; ", "\n"))
			}
		})
	}
}

// A window too long for a duration is too long, as one of 9000h is: not a window of
// other than whole seconds.
func TestParseLimitWindowTooLarge(t *testing.T) {
	for _, s := range []string{"9000h:1", "99999999999h:1", "9999999999999999999s:1"} {
		if _, err := ParseLimit(s); err == nil || !strings.Contains(err.Error(), "is longer than 8784h (366 days)") {
			t.Errorf("ParseLimit(%q) = %v: want longer than 8784h", s, err)
		}
	}
	for _, s := range []string{"1x:1", "h:1", "1.2.3h:1"} {
		if _, err := ParseLimit(s); err == nil || !strings.Contains(err.Error(), "is not a whole number of seconds") {
			t.Errorf("ParseLimit(%q) = %v: want not a whole number of seconds", s, err)
		}
	}
}

func TestParseAdaptiveEventClock(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], threshold_mode: adaptive}\n"), Options{EventClock: true})
	if err == nil || !strings.Contains(err.Error(), "static with GATE_CLOCK=event") {
		t.Errorf("adaptive under the event clock: %v", err)
	}
}

// Every window must be longer than GATE_TICK_INTERVAL (Options.MinWindow), as
// GATE_LIMITS's must: each needs a tick per epoch at least.
func TestParseMinWindow(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [2s:1, 3s:1, 2m:1]}\n  - {name: b, key: key, limits: [1s:1]}\n"),
		Options{MinWindow: 2 * time.Second})
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 2 ||
		ps[0].Error() != `r.yaml:2:34: rules[0] "a".limits[0]: "2s:1": want a window longer than GATE_TICK_INTERVAL (2s)` ||
		ps[1].Error() != `r.yaml:3:34: rules[1] "b".limits[0]: "1s:1": want a window longer than GATE_TICK_INTERVAL (2s)` {
		t.Errorf("windows of 2s and 1s under a 2s tick: %v", err)
	}
	if s, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [3s:1]}\n"), Options{MinWindow: 2 * time.Second}); err != nil || s.Rules[0].Limits[0].Window != 3*time.Second {
		t.Errorf("a 3s window under a 2s tick: %v", err)
	}
}

// A file that is not YAML is one Problem as a field's is, FILE:LINE:COL: MESSAGE, at the
// line where it stops being YAML (the library's own line is often the enclosing block's,
// and 0-based) and the column in it where it does (the library gives none), counted as a
// field's is, the library's message without its "yaml: line N: ". Each column is the one
// a user would put the cursor on to fix the file.
func TestParseSyntaxErrors(t *testing.T) {
	const rule = "  - name: a\n    key: key\n    limits: [1m:1]\n"
	for _, c := range []struct {
		name, yaml string
		line, col  int
		msg        string
	}{
		// Just after the '[': the content (or the ']') it wants is missing there.
		{"unclosed flow on the first line", "rules: [", 1, 9, "did not find expected node content"},
		// The key two columns left of its rule's other keys, where the list wants a '-'.
		{"indented as no item can be", "rules:\n" + rule + "  - name: b\n    key: key\n  limits: [1m:1]\n", 7, 3, "did not find expected '-' indicator"},
		// The x after the closing quote: nothing may follow a quoted value but a comment.
		{"text after a quoted value", "rules:\n" + rule + "    mode: cap\n    cost: \"bytes\"x\n", 6, 18, "did not find expected key"},
		// A tab that starts a line: YAML indents with spaces only.
		{"a tab", "rules:\n  - name: a\n\tkey: key\n", 3, 1, "found a tab character that violates indentation"},
		// A tab after the spaces of an indentation: the tab, not the line's start.
		{"a tab among the spaces of an indentation", "rules:\n  - name: a\n  \tkey: key\n", 3, 3, "found a tab character that violates indentation"},
		// A tab the library finds no indentation, where it says only that it cannot start
		// a token: what is wrong is said, as for the tabs above.
		{"a tab before a list item", "rules:\n  - name: a\n    key: key\n    limits:\n    \t- 1m:1\n", 5, 5, "found character that cannot start any token (a tab: YAML indents with spaces only)"},
		{"a line of a tab alone", "rules:\n" + rule + "\t\n", 5, 1, "found character that cannot start any token (a tab: YAML indents with spaces only)"},
		// The second ':' (and its space) makes key: x a mapping in a plain value.
		{"a second colon", "rules:\n" + rule + "  - name: b\n    key: key: x\n    limits: [1m:1]\n", 6, 13, "mapping values are not allowed in this context"},
		{"a second colon in a name", "rules:\n  - name: a: b\n    key: key\n    limits: [1m:1]\n", 2, 12, "mapping values are not allowed in this context"},
		// Just after the list's last entry, where its ']' is missing: the next line does
		// not continue it.
		{"unclosed flow list", "rules:\n  - name: a\n    key: key\n    limits: [1m:5\n    mode: cap\n", 4, 18, "did not find expected ',' or ']'"},
		{"unclosed flow after a flow over lines", "rules:\n  - name: a\n    key: key\n    limits: [\n      1m:1,\n      1h:2]\n    force: [a, b\n    mode: cap\n  - name: c\n",
			7, 17, "did not find expected ',' or ']'"},
		// The opening quote that nothing closes: its value runs to the end of the file.
		{"unclosed quote", "rules:\n  - name: a\n    key: \"key\n    limits: [1m:1]\n", 3, 10, "found unexpected end of stream"},
		// The '-' one column right of the list's other items, where no item can start.
		{"a list item indented too far", "rules:\n" + rule + "   - name: b\n    key: key\n    limits: [1m:1]\n", 5, 4, "did not find expected '-' indicator"},
		// The second ']', which closes nothing.
		{"a stray ]", "rules:\n  - name: a\n    key: key\n    limits: [1m:1]]\n", 4, 19, "did not find expected key"},
		// The name no anchor has.
		{"unknown alias", "rules:\n" + rule + "  - name: b\n    key: *k\n", 6, 11, "unknown anchor 'k' referenced"},
		// YAML breaks lines at CR LF and at CR alone too: the line is counted as it does.
		{"CR LF line breaks", strings.ReplaceAll("rules:\n"+rule+"  - name: b\n    key: key\n  limits: [1m:1]\n", "\n", "\r\n"), 7, 3, "did not find expected '-' indicator"},
		{"CR line breaks", strings.ReplaceAll("rules:\n"+rule+"  - name: b\n    key: key\n  limits: [1m:1]\n", "\n", "\r"), 7, 3, "did not find expected '-' indicator"},
		// Columns are characters, as a field's are (é is one, though two bytes), and a byte
		// order mark that starts the file is none (the library drops it before counting).
		{"a character of two bytes", "rules:\n  - name: é: b\n", 2, 12, "mapping values are not allowed in this context"},
		{"a byte order mark", "\ufeffrules: a: b\n", 1, 9, "mapping values are not allowed in this context"},
		// The library reads a file in UTF-16 that starts with its byte order mark: its lines
		// and columns are the characters' it reads, not its bytes' (UTF-16LE's line was 3).
		{"UTF-16LE", inUTF16("rules:\n  - name: a: b\n", binary.LittleEndian), 2, 12, "mapping values are not allowed in this context"},
		{"UTF-16BE", inUTF16("rules:\n  - name: a\n    key: \"k€y\n    limits: [1m:1]\n", binary.BigEndian), 3, 10, "found unexpected end of stream"},
		// A control character is named, as a tab is: the library's message does not say
		// which, and it shows as nothing. A NUL is most often a file in UTF-16 without its
		// byte order mark, every other byte 0.
		{"a control character", "rules:\n  - name: a\x07\n", 2, 12, "control characters are not allowed (U+0007)"},
		{"a NUL", "rules:\n  - name: a\x00\n", 2, 12, "control characters are not allowed (U+0000)"},
		{"UTF-16LE without its byte order mark", inUTF16("rules: []\n", binary.LittleEndian)[2:], 1, 2, "control characters are not allowed (U+0000, a NUL: a file in UTF-16 without its byte order mark? save it as UTF-8)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("rules.yaml", []byte(c.yaml), Options{})
			var ps Problems
			if s != nil || !errors.Is(err, ErrRules) || !errors.As(err, &ps) || len(ps) != 1 {
				t.Fatalf("set %v, error %v: want no set and one Problem, wrapping ErrRules", s, err)
			}
			want := &Problem{File: "rules.yaml", Line: c.line, Col: c.col, Msg: c.msg}
			if got, ok := ps[0].(*Problem); !ok || *got != *want {
				t.Errorf("%#v, want %#v", ps[0], want)
			}
			if w := fmt.Sprintf("rules: rules.yaml:%d:%d: %s", c.line, c.col, c.msg); err.Error() != w {
				t.Errorf("%q, want %q", err, w)
			}
		})
	}
	// A syntax error and a field's problem at the same place of a line have one column.
	const field, broken = "rules:\n  - {name: é, key: key, limits: [1m:1], mode: bad}\n", "rules:\n  - {name: é, key: key, limits: [1m:1], mode: ]ad}\n"
	_, ferr := Parse("r.yaml", []byte(field), Options{})
	_, serr := Parse("r.yaml", []byte(broken), Options{})
	if ferr == nil || serr == nil || !strings.Contains(ferr.Error(), "r.yaml:2:47: ") || !strings.HasPrefix(serr.Error(), "rules: r.yaml:2:47: ") {
		t.Errorf("a field's problem: %v; a syntax error at its place: %v; want both at 2:47", ferr, serr)
	}
}

// inUTF16 is s in UTF-16 in order, after its byte order mark.
func inUTF16(s string, order binary.AppendByteOrder) string {
	b := order.AppendUint16(nil, 0xFEFF)
	for _, u := range utf16.Encode([]rune(s)) {
		b = order.AppendUint16(b, u)
	}
	return string(b)
}

// Finding the line and column costs a bounded read: a long file broken at its start in a
// way every cut of it is broken too (a list in flow style without its ']') gets the
// library's line past syntaxSearchBytes, column 1, and its first line and the column after
// its '[' when it is short. A line found whose column would cost more to find gets column 1.
func TestParseSyntaxErrorSearchBounded(t *testing.T) {
	entry := "  {name: r, key: key, limits: [1m:1]},\n"
	long := "rules: [\n" + strings.Repeat(entry, 4000)
	var n yaml.Node
	msg, libLine := yamlMessage(yaml.Unmarshal([]byte(long), &n))
	var ps Problems
	if _, err := Parse("r.yaml", []byte(long), Options{}); !errors.As(err, &ps) || *ps[0].(*Problem) != (Problem{File: "r.yaml", Line: libLine, Col: 1, Msg: msg}) {
		t.Errorf("a long broken file: %v, want the library's line %d", err, libLine)
	}
	if _, err := Parse("r.yaml", []byte("rules: [\n"+strings.Repeat(entry, MaxRules)), Options{}); !errors.As(err, &ps) || ps[0].(*Problem).Line != 1 || ps[0].(*Problem).Col != 9 {
		t.Errorf("%d rules without their ']': %v, want line 1, column 9", MaxRules, err)
	}
	// A quote nothing closes, early in a long last line: every cut of the line after it
	// fails as the file does, each read after MaxRules rules.
	rules := "rules:\n" + strings.Repeat("  - name: r\n    key: json:team_id\n    limits: [1m:1000, 1h:20000]\n", MaxRules)
	last := strings.Count(rules, "\n") + 1
	for _, c := range []struct {
		tail string
		col  int
	}{{strings.Repeat("x", 10), 11}, {strings.Repeat("x", 5000), 1}} {
		_, err := Parse("r.yaml", []byte(rules+"  - name: \""+c.tail+"\n"), Options{})
		if !errors.As(err, &ps) || *ps[0].(*Problem) != (Problem{File: "r.yaml", Line: last, Col: c.col, Msg: "found unexpected end of stream"}) {
			t.Errorf("an unclosed quote before %d characters: %v, want line %d, column %d", len(c.tail), err, last, c.col)
		}
	}
}

// A set's own topics: each topic:NAME once, in rule order; a shadow rule's is none (it
// never writes there: a rule tried in shadow before its topic exists was refused, and a
// gate starting with it not ready).
func TestSetTopics(t *testing.T) {
	s, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], action: topic:x}\n  - {name: b, key: key, limits: [1m:1], action: topic:y}\n"+
		"  - {name: c, key: key, limits: [1m:1], action: topic:x}\n  - {name: d, key: key, limits: [1m:1]}\n"+
		"  - {name: e, key: key, limits: [1m:1], action: 'topic:not-yet', shadow: true}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Topics(); len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Errorf("topics %v, want [x y]", got)
	}
	// A topic's problem is said at each enforced rule sending to it, at its action: a and
	// c for x (line 2 and 4), not e's shadow topic.
	got := s.TopicProblems("x", "missing", "gone")
	want := []string{`r.yaml:2:49: rules[0] "a".action: gone`, `r.yaml:4:49: rules[2] "c".action: gone`}
	if len(got) != len(want) || got[0].Error() != want[0] || got[1].Error() != want[1] {
		t.Errorf("x's problems %q, want %q", got, want)
	}
	if got := s.TopicProblems("not-yet", "missing", "gone"); len(got) != 0 {
		t.Errorf("a shadow rule's topic's problems %q, want none", got)
	}
}

// A rule keyed by several fields bounds each team's keys (max_keys, default
// limit.DefaultKeyCardinality) and says what a rotating team's records get; 0 turns it off.
func TestParseCardinality(t *testing.T) {
	s, err := Parse("rules.yaml", []byte(`rules:
  - {name: user, key: json:team_id+distinct_id, limits: [1m:100]}
  - {name: user2, key: json:team_id+distinct_id, limits: [1m:100], max_keys: 5000, on_cardinality: overflow}
  - {name: user3, key: json:team_id+distinct_id, limits: [1m:100], max_keys: 0}
  - {name: team, key: json:team_id, limits: [1m:100]}
  - {name: merges, key: json:team_id, limits: [1m:100], track: above_floor}
  - {name: exact, key: json:team_id+distinct_id, limits: [1m:100], track: all}
  - {name: identify, key: json:team_id, match: [{field: header:event, in: [$identify]}], limits: [1m:100]}
  - {name: identify-all, key: json:team_id, match: [{field: header:event, in: [$identify]}], limits: [1m:100], track: all}
`), Options{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		max   int64
		on    limit.CardinalityAction
		floor bool
	}{{limit.DefaultKeyCardinality, limit.CardinalityCollapse, true}, {5000, limit.CardinalityOverflow, true}, {0, limit.CardinalityCollapse, true},
		{0, limit.CardinalityCollapse, false}, {0, limit.CardinalityCollapse, true}, {0, limit.CardinalityCollapse, false},
		// A rule with a match: above the floor unless told otherwise, whatever its key.
		{0, limit.CardinalityCollapse, true}, {0, limit.CardinalityCollapse, false}} {
		if r := s.Rules[i]; r.MaxKeys != want.max || r.OnCardinality != want.on || r.AboveFloor != want.floor {
			t.Errorf("%s: max_keys %d, on_cardinality %s, above floor %v; want %d, %s, %v", r.Name, r.MaxKeys, r.OnCardinality, r.AboveFloor, want.max, want.on, want.floor)
		}
	}
}

// The sketch of keys under their floor, and with it the count of a team's keys (in the
// first limit's), is kept under static thresholds on the wall clock only (limit.New).
// Under GATE_CLOCK=event a rule keyed by several fields is therefore track: all, as the
// gate runs it (gate rules check says so); an adaptive one keeps above_floor for its
// further, static, limits, and no bound on a team's keys. Asking either for what it
// cannot keep is a problem. Before, both parsed as above_floor with max_keys 100,000,
// and no team could ever be found rotating.
func TestParseNoSketchWithoutStaticWallClock(t *testing.T) {
	for _, c := range []struct {
		name       string
		o          Options
		mode       string
		aboveFloor bool
		refused    []string
	}{
		{"adaptive", Options{Topics: topics}, "threshold_mode: adaptive, ", true, []string{"max_keys", "on_cardinality"}},
		{"event clock", Options{Topics: topics, EventClock: true}, "", false, []string{"track", "max_keys", "on_cardinality"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("rules.yaml", []byte("rules:\n  - {name: user, key: json:team_id+distinct_id, "+c.mode+"limits: [1m:100, 1h:1000]}\n"), c.o)
			if err != nil {
				t.Fatal(err)
			}
			if r := s.Rules[0]; r.AboveFloor != c.aboveFloor || r.MaxKeys != 0 {
				t.Errorf("above floor %v, max_keys %d: want %v, no bound on a team's keys", r.AboveFloor, r.MaxKeys, c.aboveFloor)
			}
			_, err = Parse("rules.yaml", []byte("rules:\n  - {name: user, key: json:team_id+distinct_id, "+c.mode+"limits: [1m:100], track: above_floor, max_keys: 10, on_cardinality: tag}\n"), c.o)
			for _, f := range []string{"track", "max_keys", "on_cardinality"} {
				named := err != nil && strings.Contains(err.Error(), `rules[0] "user".`+f+": ")
				if want := slices.Contains(c.refused, f); named != want {
					t.Errorf("%s given: err = %v; a problem naming it: %v, want %v", f, err, named, want)
				}
			}
		})
	}
}

// A force key of a composite rule must be written as the gate builds the key: one ':'
// between the fields, a value's ':' as %3A and '%' as %25. Written otherwise it names
// nothing the rule counts, and was taken in silence.
func TestParseForceKeysEscaped(t *testing.T) {
	s, err := Parse("rules.yaml", []byte(`rules:
  - {name: user, key: json:token+distinct_id, limits: [1m:100], force: ["phc_x:user%3A1", "a%25b:c"]}
  - {name: team, key: json:team_id, limits: [1m:100], force: ["a:b:c"]}
`), Options{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Rules[0].Force; len(got) != 2 {
		t.Errorf("force %v", got)
	}
	_, err = Parse("rules.yaml", []byte(`rules:
  - {name: user, force: ["phc_x:user:1", "phc_x", "a%b:c", "a:"], key: json:token+distinct_id, limits: [1m:100]}
`), Options{Topics: topics})
	for j, want := range []string{`has 3 parts`, `has 1 parts`, `holds a '%' not written %25`, `has an empty value`} {
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`rules[0] "user".force[%d]: `, j)) || !strings.Contains(err.Error(), want) {
			t.Errorf("force[%d]: err = %v, want %q", j, err, want)
		}
	}
}

// docs/rules.md: mode is `divert` (default) or `cap`, shadow `true` (default false): a
// value that is neither is a problem of the file, as `cost: Bytes` or
// `on_cardinality: ""` are.
// mode and shadow take the values the docs give, spelled as they give them: divert or
// cap, true or false (ParseMode and ParseBool took "", Cap, " cap", 1, T, "0").
func TestModeAndShadowValues(t *testing.T) {
	for _, field := range []string{`mode: ""`, `mode: Cap`, `mode: " cap"`, `mode: DIVERT`, `shadow: 1`, `shadow: T`, `shadow: "0"`} {
		y := "rules:\n  - name: a\n    key: json:t\n    limits: [1m:10]\n    " + field + "\n"
		if s, err := Parse("f.yaml", []byte(y), Options{MinWindow: time.Second}); err == nil {
			t.Errorf("%s: accepted (%+v), want a problem at f.yaml:5", field, s.Rules[0])
		}
	}
}

// A file of two YAML documents: the second one's rules are not read, and nothing says so.
// A second YAML document (after ---) is refused, not silently ignored.
func TestSecondDocumentRefused(t *testing.T) {
	y := "rules:\n  - name: a\n    key: json:t\n    limits: [1m:10]\n---\nrules:\n  - name: b\n    key: json:u\n    limits: [1m:10]\n"
	if s, err := Parse("f.yaml", []byte(y), Options{MinWindow: time.Second}); err == nil {
		t.Errorf("accepted with %d rule(s) (%s): the second document's rule b is silently ignored", len(s.Rules), s.Rules[0].Name)
	}
}

// Every document after the first is refused, not only the second: an empty one between
// (a stray ---) hid a third document's rules, and a syntax error in a later document is
// reported at its own line, not at the line the library names (the flow's opening line,
// 0-based: the --- before it).
func TestFurtherDocumentsRefused(t *testing.T) {
	const a = "rules:\n  - name: a\n    key: json:t\n    limits: [1m:10]\n"
	for _, c := range []struct{ name, yaml, want string }{
		{"a third document after an empty second", a + "---\n---\nrules:\n  - name: b\n    key: json:u\n    limits: [1m:10]\n",
			"f.yaml:7:1: (top): a second YAML document"},
		{"a third document after a null second", a + "--- ~\n---\nrules: []\n", "f.yaml:7:1: (top): a second YAML document"},
		{"a syntax error in the second document", a + "---\nrules: [\n  a,\n  b: c: d\n", "f.yaml:8:7: a second YAML document: did not find expected ',' or ']'"},
	} {
		s, err := Parse("f.yaml", []byte(c.yaml), Options{MinWindow: time.Second})
		if err == nil {
			t.Errorf("%s: accepted with %d rule(s): the later document is silently ignored", c.name, len(s.Rules))
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}

// Only what aliases bring counts toward maxExpanded: a file without an alias, its match
// list of 70,000 teams, is no "billion laughs".
func TestParseLongListWithoutAliases(t *testing.T) {
	vals := make([]string, 70000)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	y := "rules:\n  - name: a\n    key: json:t\n    limits: [1m:10]\n    match: [{field: json:team_id, not_in: [" + strings.Join(vals, ", ") + "]}]\n"
	s, err := Parse("f.yaml", []byte(y), Options{})
	if err != nil {
		t.Fatalf("a match list of 70000 values, no alias: %.300v", err)
	}
	if got := len(s.Rules[0].Match[0].Values); got != len(vals) {
		t.Errorf("%d values, want %d", got, len(vals))
	}
}

// Aliases and merge keys read as YAML reads them: a rule may share another's limits
// (limits: *std) or take its fields and change some (<<: *team); a problem in what an
// alias brings is reported where the alias is; a merge of anything but mappings, and
// aliases that expand past maxExpanded nodes, are problems, found without walking them all.
func TestParseAliases(t *testing.T) {
	s, err := Parse("r.yaml", []byte(`rules:
  - &team
    name: team
    key: json:team_id
    limits: &std [1m:100, 1h:1000]
    mode: cap
  - <<: *team
    name: team-user
    key: json:team_id+distinct_id
  - <<: [{name: ignored, action: tag}, *team]
    name: team-tag
    limits: *std
    mode: divert
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	team, tu, tag := s.Rules[0], s.Rules[1], s.Rules[2]
	if tu.Name != "team-user" || tu.Key.String() != "json:team_id+distinct_id" || tu.Mode != limit.Cap || !slices.Equal(tu.Limits, team.Limits) || len(team.Limits) != 2 {
		t.Errorf("team-user, merged from team: %+v (team %+v)", tu, team)
	}
	if tag.Name != "team-tag" || tag.Key.String() != "json:team_id" || tag.Mode != limit.Divert || tag.Action.Kind != Tag || !slices.Equal(tag.Limits, team.Limits) {
		t.Errorf("team-tag, merged from a mapping and team: %+v", tag)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"a bad value through an alias", "rules:\n  - {name: a, key: &k jsn:x, limits: [1m:1]}\n  - name: b\n    key: *k\n    limits: [1m:1]\n",
			`r.yaml:4:10: rules[1] "b".key: "jsn:x": want json:FIELD`},
		{"a list where one value goes", "rules:\n  - {name: a, key: key, limits: &l [1m:1]}\n  - {name: b, key: *l, limits: [1m:1]}\n",
			`r.yaml:3:20: rules[1] "b".key: want a single value`},
		{"a merge of a list of values", "rules:\n  - {name: a, key: key, limits: &l [1m:1]}\n  - {<<: *l, name: b}\n",
			`r.yaml:3:6: <<: want a mapping to merge`},
		{"a merge of a value", "rules:\n  - {name: a, key: &k key, limits: [1m:1]}\n  - {<<: *k, name: b}\n",
			`r.yaml:3:6: <<: want a mapping to merge`},
		// What a list or a mapping brings is at the alias's line too, not the anchor's (in
		// another rule, whose own use of it may be fine).
		{"a bad value in a list through an alias", "rules:\n  - name: a\n    key: key\n    limits: &l [1m:0]\n  - name: b\n    key: key\n    limits: *l\n",
			`r.yaml:7:13: rules[1] "b".limits[0]: "1m:0"`},
		{"a force list fit for one key, not the other", "rules:\n  - {name: a, key: key, limits: [1m:1], force: &f [x:y:z]}\n  - {name: b, key: json:t+u, limits: [1m:1], force: *f}\n",
			`r.yaml:3:53: rules[1] "b".force[0]: "x:y:z" has 3 parts`},
		{"a bad field merged", "rules:\n  - &t\n    name: a\n    key: key\n    limits: [1m:1]\n    mode: bad\n  - <<: *t\n    name: b\n",
			`r.yaml:7:9: rules[1] "b".mode: "bad"`},
	} {
		if _, err := Parse("r.yaml", []byte(c.yaml), Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	// Ten aliases of ten aliases, six deep: a million nodes.
	var b strings.Builder
	b.WriteString("rules:\n  - name: a\n    key: key\n    limits: [1m:1]\n    force: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "  - name: r%d\n    key: key\n    limits: [1m:1]\n    force: &l%d [%s]\n", i, i, strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9)+fmt.Sprintf("*l%d", i-1))
	}
	if _, err := Parse("r.yaml", []byte(b.String()), Options{}); err == nil || !strings.Contains(err.Error(), "aliases expand past 65536 nodes") {
		t.Errorf("a million nodes of aliases: %v", err)
	}
}

// A null in a match's list matches nothing (an absent or null field reads no value): a
// problem saying so, not a bare "want a single value".
func TestParseMatchNull(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], match: [{field: header:x, in: [a, null]}]}\n"), Options{})
	const want = `r.yaml:2:75: rules[0] "a".match[0].in[1]: null matches nothing: a field that is absent or null reads no value, in no list (not_in holds for it); quote it, "null", for the text null`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %s", err, want)
	}
	// ~ is YAML's null too: the advice quotes what the file holds (it said "null").
	_, err = Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], match: [{field: header:x, in: [~]}]}\n"), Options{})
	if want := `null (~) matches nothing: a field that is absent or null reads no value, in no list (not_in holds for it); quote it, "~", for the text ~`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %s", err, want)
	}
	_, err = Parse("r.yaml", []byte("rules:\n  - name: a\n    key: key\n    limits: [1m:1]\n    match:\n      - field: header:x\n        in:\n          - a\n          -\n"), Options{})
	if want := `null matches nothing: a field that is absent or null reads no value, in no list (not_in holds for it); an empty entry is YAML's null`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %s", err, want)
	}
	if _, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], match: [{field: header:x, in: [a, \"null\"]}]}\n"), Options{}); err != nil {
		t.Errorf("a quoted null: %v", err)
	}
	if _, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: , limits: [1m:1]}\n"), Options{}); err == nil || !strings.Contains(err.Error(), `rules[0] "a".key: empty (null): want a single value`) {
		t.Errorf("an empty key: %v", err)
	}
}

// An unquoted true or false in the list of a json: field's match is a problem: a JSON
// boolean reads no value (field_type), so `not_in: [true]` held for every record, the
// is_test ones too, silently. A header's or the record key's true is its text: taken.
func TestParseMatchJSONBoolean(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], match: [{field: json:is_test, not_in: [true]}]}\n"), Options{})
	const want = `r.yaml:2:80: rules[0] "a".match[0].not_in[0]: true matches nothing on a json: field: a JSON boolean reads no value, in no list (not_in holds for it); quote it, "true", for the string "true"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %s", err, want)
	}
	if _, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], match: [{not_in: [true]}]}\n"), Options{}); err == nil || !strings.Contains(err.Error(), "match[0].field: missing") {
		t.Errorf("a match without a field: %v", err) // and no panic
	}
	for _, ok := range []string{
		`match: [{field: json:is_test, not_in: ["true"]}]`,
		`match: [{field: header:is_test, in: [true, false]}]`,
		`match: [{field: key, in: [false]}]`,
	} {
		if _, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], "+ok+"}\n"), Options{}); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// An empty string in a match's list matches nothing either: a field, header or record key
// that is empty reads no value (docs/rules.md), so in: [""] never held and not_in: [""]
// (meant to leave out the records whose field is empty) always did. Refused as null is.
func TestParseMatchEmptyString(t *testing.T) {
	for _, list := range []string{`in: [a, ""]`, `not_in: [a, ""]`} {
		_, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: key, limits: [1m:1], match: [{field: json:e, "+list+"}]}\n"), Options{})
		if err == nil || !strings.Contains(err.Error(), `"a".match[0].`) || !strings.Contains(err.Error(), `[1]: "" matches nothing`) {
			t.Errorf("%s: %v, want the empty value refused", list, err)
		}
	}
}

// docs/rules.md: a match on json:A+B "compares the escaped composite value". A value the
// key never builds (token phc_x and distinct_id user:1 written unescaped, phc_x:user:1:
// three parts for two fields) was taken and then matched no record, silently, where the
// same key in force is refused. Refused as force's is, naming the escaped forms.
func TestParseMatchCompositeValuesEscaped(t *testing.T) {
	if _, err := Parse("r.yaml", []byte(`rules:
  - {name: a, key: json:team_id, limits: [1m:1], match: [{field: json:token+distinct_id, in: ["phc_x:user%3A1", "a%25b:c"]}]}
`), Options{}); err != nil {
		t.Fatalf("escaped values: %v", err)
	}
	_, err := Parse("r.yaml", []byte(`rules:
  - {name: a, key: json:team_id, limits: [1m:1], match: [{field: json:token+distinct_id, not_in: ["phc_x:user:1", phc_x, "a%b:c"]}]}
`), Options{})
	for j, want := range []string{`has 3 parts, escaped: "phc_x:user%3A1" or "phc_x%3Auser:1"`, `has 1 parts`, `holds a '%' not written %25`} {
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`rules[0] "a".match[0].not_in[%d]: `, j)) || !strings.Contains(err.Error(), want) {
			t.Errorf("not_in[%d]: err = %v, want %q", j, err, want)
		}
	}
	// A single field's value is never escaped: any text may be matched.
	if _, err := Parse("r.yaml", []byte(`rules:
  - {name: a, key: json:team_id, limits: [1m:1], match: [{field: json:distinct_id, in: ["user:1", "a%b"]}]}
`), Options{}); err != nil {
		t.Errorf("a single field: %v", err)
	}
}

// key: json:team_id + distinct_id (spaces around the '+', a plain YAML value) read the
// members "team_id " and " distinct_id", which no record has: taken without a word, then
// every record was dead-lettered (field_missing), or with missing: skip the rule checked
// none, and gate rules check printed the key as if fine. A field name that starts or ends
// with a space is refused, saying why, as is any other key the gate cannot read.
func TestParseKeySpacesAroundPlus(t *testing.T) {
	_, err := Parse("r.yaml", []byte(`rules:
  - name: a
    key: json:team_id + distinct_id
    missing: skip
    limits: [1m:1]
    match:
      - field: "json: event"
        in: [x]
`), Options{})
	for _, want := range []string{
		`r.yaml:3:10: rules[0] "a".key: "json:team_id + distinct_id": field "team_id " starts or ends with a space`,
		`r.yaml:7:16: rules[0] "a".match[0].field: "json: event": field " event" starts or ends with a space`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %s", err, want)
		}
	}
	// A space inside a name is the name's own.
	if _, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: json:my team+distinct_id, limits: [1m:1]}\n"), Options{}); err != nil {
		t.Errorf("a space inside a field name: %v", err)
	}
}

// limits: [1m: 5000], a space after the ':' as YAML's own mappings have one, is a mapping
// to YAML, and the problem said only "want a single value" at what reads as one. It says
// why, and how to write it.
func TestParseValueReadAsMapping(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m: 5000]\n"), Options{})
	const want = `r.yaml:4:14: rules[0] "a".limits[0]: want a single value, not the mapping YAML reads "1m: 5000" as (a space after ':'): write 1m:5000, or quote it`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	// The window quoted, no space anywhere ("strings as numbers"): YAML takes the ':' right
	// after a quoted key, in flow style, and the message blamed a space there is not.
	_, err = Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [\"1m\":5000, '1h':9000]\n"), Options{})
	for _, want := range []string{
		`r.yaml:4:14: rules[0] "a".limits[0]: want a single value, not a mapping: YAML reads a quoted "1m" and the ':' right after it as key "1m", value "5000": write 1m:5000, or quote it whole, "1m:5000"`,
		`r.yaml:4:25: rules[0] "a".limits[1]: want a single value, not a mapping: YAML reads a quoted "1h" and the ':' right after it as key "1h", value "9000": write 1h:9000, or quote it whole, "1h:9000"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %s", err, want)
		}
	}
}

// A file's problems come in the file's order, whichever check found them: a name given
// twice, found once every rule was read, came after the later rules' problems.
func TestParseProblemsInFileOrder(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: key\n    limits: [1m:1]\n  - name: a\n    key: nope\n    limits: [1m:1]\n"), Options{})
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 2 {
		t.Fatalf("%v, want two problems", err)
	}
	if l0, l1 := ps[0].(*Problem).Line, ps[1].(*Problem).Line; l0 > l1 {
		t.Errorf("problems on lines %d then %d, want the file's order: %v", l0, l1, err)
	}
}

// A window in days (1d, as gate replay's -from takes and docs/rules.md speaks of windows)
// is refused saying how to write it: Go's durations stop at hours. Before, "1d" was "not
// a whole number of seconds", which a day is.
func TestParseLimitWindowInDays(t *testing.T) {
	for in, want := range map[string]string{
		"1d:500000": `"1d:500000": window "1d": durations have no unit d: write 24h for 1d`,
		"7d:9":      `write 168h for 7d`,
		"1d12h:9":   `window "1d12h": durations have no unit d: write a day as 24h`,
		"1.5d:9":    `write a day as 24h`,
	} {
		_, err := ParseLimit(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimit(%q): %v, want it to say %q", in, err, want)
		}
	}
	for _, in := range []string{"1500ms:1", "x:1", "dd:1"} {
		if _, err := ParseLimit(in); err == nil || !strings.Contains(err.Error(), "not a whole number of seconds") {
			t.Errorf("ParseLimit(%q): %v, want the message of a window that is no whole number of seconds", in, err)
		}
	}
	_, err := Parse("rules.yaml", []byte("rules:\n  - {name: r, key: key, limits: [1m:1000, 1d:500000]}\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), `rules.yaml:2:43: rules[0] "r".limits[1]: "1d:500000": window "1d": durations have no unit d: write 24h for 1d`) {
		t.Errorf("Parse: %v", err)
	}
}

// A drop rule in shadow drops nothing, so it needs no outcomes: trying a drop rule in
// shadow before enforcing it is how one is brought in. Before, it was refused without
// GATE_OUTCOMES_TOPIC as an enforced one is, whichever of action and shadow came first.
func TestShadowDropNeedsNoOutcomes(t *testing.T) {
	for _, c := range []struct {
		yaml string
		ok   bool
	}{
		{"rules:\n  - {name: a, key: key, limits: [1m:1], action: drop, shadow: true}\n", true},
		{"rules:\n  - {name: a, key: key, shadow: true, limits: [1m:1], action: drop}\n", true},
		{"rules:\n  - {name: a, key: key, limits: [1m:1], action: drop, shadow: false}\n", false},
		{"rules:\n  - {name: a, key: key, shadow: false, limits: [1m:1], action: drop}\n", false},
	} {
		_, err := Parse("rules.yaml", []byte(c.yaml), Options{})
		if c.ok && err != nil {
			t.Errorf("%q: %v", c.yaml, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), `rules[0] "a".action: drop: needs GATE_OUTCOMES_TOPIC set`)) {
			t.Errorf("%q: %v, want drop refused without outcomes", c.yaml, err)
		}
	}
}

// A window of no time or less (0s:5, -1m:5, a bare 0) is refused as such. Before, 0s and
// -1m were "not a whole number of seconds", which both are, and a bare 0 was told to be
// written 0s, itself refused.
func TestParseLimitWindowNotPositive(t *testing.T) {
	for in, want := range map[string]string{
		"0s:5":  `"0s:5": window "0s" is no time: want 1s or more, such as 1m`,
		"0m:5":  `"0m:5": window "0m" is no time: want 1s or more, such as 1m`,
		"-1m:5": `"-1m:5": window "-1m" is no time: want 1s or more, such as 1m`,
		"0:5":   `"0:5": window "0" is no time: want 1s or more, such as 1m`,
	} {
		_, err := ParseLimit(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimit(%q): %v, want it to say %q", in, err, want)
		}
	}
}

// A window written without a unit (60:1000, seconds meant, as a cron or a TTL says them) is
// refused saying to add one. Before, "60" was "not a whole number of seconds", which 60 is.
func TestParseLimitWindowWithoutUnit(t *testing.T) {
	for in, want := range map[string]string{
		"60:1000":    `"60:1000": window "60" has no unit: write 60s for 60 seconds`,
		"3600:20000": `window "3600" has no unit: write 3600s for 3600 seconds`,
		"1.5:9":      `window "1.5" has no unit: write it in s, m or h, such as 90s or 1.5m`,
	} {
		_, err := ParseLimit(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimit(%q): %v, want it to say %q", in, err, want)
		}
	}
	_, err := Parse("rules.yaml", []byte("rules:\n  - {name: r, key: key, limits: [1m:1000, 3600:20000]}\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), `rules.yaml:2:43: rules[0] "r".limits[1]: "3600:20000": window "3600" has no unit: write 3600s for 3600 seconds`) {
		t.Errorf("Parse: %v", err)
	}
}

// A header name that starts or ends with a space (a block scalar's line break, a
// copy-pasted non-breaking space, "header: ip" quoted) names a header no producer sends:
// every record missing its key, dead-lettered (header_missing) by a rule's default, or a
// match that never holds, without a word from the gate or gate rules check. It is refused
// as a json: field's is.
func TestParseHeaderNameSpaces(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: |\n      header:ip\n    limits: [1m:1]\n"+
		"    match:\n      - field: \"header: source\"\n        in: [x]\n  - name: b\n    key: \"header:ip\\u00a0\"\n    limits: [1m:1]\n"), Options{})
	for _, want := range []string{
		`r.yaml:3:10: rules[0] "a".key: "header:ip\n": header name "ip\n" starts or ends with a space`,
		`r.yaml:7:16: rules[0] "a".match[0].field: "header: source": header name " source" starts or ends with a space`,
		`r.yaml:10:10: rules[1] "b".key: "header:ip\u00a0": header name "ip\u00a0" starts or ends with a space`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %s", err, want)
		}
	}
	// A zero-width space copied with a field's name (from a page, a chat) named a field no
	// record has, taken without a word: every record dead-lettered.
	_, err = Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\u200b\n    limits: [1m:1]\n"), Options{})
	if want := `r.yaml:3:10: rules[0] "a".key: "json:team_id\u200b": field "team_id\u200b" starts or ends with an invisible character (U+200B)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	// Quotes around a field's name (JSON's way) named a member no record has, taken
	// without a word.
	_, err = Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:\"team_id\"\n    limits: [1m:1]\n"), Options{})
	if want := `r.yaml:3:10: rules[0] "a".key: "json:\"team_id\"": field "\"team_id\"" is in quotes, which would be part of the name: write team_id`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	// A space inside a name is the name's own.
	if _, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: header:x client ip, limits: [1m:1]}\n"), Options{}); err != nil {
		t.Errorf("a space inside a header name: %v", err)
	}
}

// A key listed twice in a rule's force is refused, as GATE_FORCE_OVERFLOW=t1,t1 is (team
// "t1" appears twice): a list an operator edits by hand, where a second entry is a
// mistake (meant for another key), said at the second with the first's line. The index
// is the entry's in the list as written, an empty entry before it counted.
func TestParseForceKeyTwice(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: key\n    limits: [1m:1]\n    force:\n      - t1\n      - t2\n      - t1\n"), Options{})
	const want = `r.yaml:8:9: rules[0] "a".force[2]: "t1" appears twice (first at line 6)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %s", err, want)
	}
	_, err = Parse("r.yaml", []byte("rules:\n  - {name: a, key: json:t+u, limits: [1m:1], force: [\"\", \"x\"]}\n"), Options{})
	if want := `rules[0] "a".force[1]: "x" has 1 parts`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %s", err, want)
	}
}

// A file of more than MaxRules rules is refused with its rules' own problems beside the
// count: every problem at once. It said only "66 rules: at most 64", and the next check,
// the count fixed, the rest (a reviewer's file).
func TestParseTooManyRulesSaysTheirProblemsToo(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range MaxRules + 2 {
		w := "1m"
		if i == 3 {
			w = "1500ms"
		}
		fmt.Fprintf(&b, "  - {name: r%d, key: key, limits: [%s:1]}\n", i, w)
	}
	_, err := Parse("r.yaml", []byte(b.String()), Options{})
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 2 || !strings.Contains(ps[0].Error(), fmt.Sprintf("%d rules: at most %d", MaxRules+2, MaxRules)) ||
		!strings.Contains(ps[1].Error(), `r.yaml:5:35: rules[3] "r3".limits[0]: "1500ms:1": window "1500ms" is not a whole number of seconds`) {
		t.Errorf("%d rules, one with a bad window: %v", MaxRules+2, err)
	}
}

// team: names the field outcome rows' team is read by (route.Config.OutcomesTeam): a key
// of one field. Without it the router takes route.TeamField of the rules: the first
// field of the first composite key, else of the first rule without a match.
func TestParseTeam(t *testing.T) {
	const rules = "rules:\n  - {name: ev, key: json:event, limits: [1m:50]}\n  - {name: team, key: json:team_id, limits: [1m:1000]}\n"
	s, err := Parse("rules.yaml", []byte("team: json:team_id\n"+rules), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.OutcomesTeam().String(); got != "json:team_id" || s.Team.String() != "json:team_id" {
		t.Errorf("team: json:team_id read as %q (outcomes team %q)", s.Team, got)
	}
	s, err = Parse("rules.yaml", []byte(rules), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Team.IsZero() || s.OutcomesTeam().String() != "json:event" {
		t.Errorf("without team: the set's team is %q and the outcomes' %q, want none and the first rule's json:event", s.Team, s.OutcomesTeam())
	}
	for _, c := range []struct{ team, want string }{
		{"json:team_id+distinct_id", `rules.yaml:1:7: team: json:team_id+distinct_id has 2 fields: want a key of one field`},
		{"[json:team_id]", `rules.yaml:1:7: team: want a key of one field`},
		{"jsn:team_id", `rules.yaml:1:7: team: "jsn:team_id": want json:FIELD, header:NAME or key`},
		// As a rule's key: says them, not the router's "route: invalid key source" nor, for
		// team: left empty, an unknown source "".
		{"", `rules.yaml:1:6: team: empty (null): want a single value`},
		{"'json:team_id '", `rules.yaml:1:7: team: "json:team_id ": field "team_id " starts or ends with a space`},
	} {
		_, err := Parse("rules.yaml", []byte("team: "+c.team+"\n"+rules), Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("team: %s: %v, want %q", c.team, err, c.want)
		}
	}
}

// A file that is not UTF-8 (a Latin-1 é) was told "invalid trailing UTF-8 octet" a line
// past the byte; a %YAML 1.2 directive, to the docs' letter (the file is YAML 1.2), was
// "found incompatible YAML document". Each is named where it is, with what to do (a
// review). %YAML 1.1 reads as before.
func TestParseEncodingAndDirective(t *testing.T) {
	const rule = "rules:\n  - {name: a, key: json:team_id, limits: [1m:5]}\n"
	for _, c := range []struct{ data, want string }{
		{"rules:\n  - name: caf\xe9\n    key: json:team_id\n    limits: [1m:5]\n", "rules.yaml:2:14: (file): byte 0xE9 is not UTF-8"},
		{"# caf\xe9\n" + rule, "rules.yaml:1:6: (file): byte 0xE9 is not UTF-8"},
		// Lines broken as YAML breaks them: a CR alone too (the reader counts it a line).
		{"\ufeff# caf\xe9\n" + rule, "rules.yaml:1:6: (file): byte 0xE9 is not UTF-8"}, // the byte order mark of no column, as the reader counts
		{"rules:\r  - name: caf\xe9\r    key: json:team_id\r    limits: [1m:5]\r", "rules.yaml:2:14: (file): byte 0xE9 is not UTF-8"},
		{"rules:\r\n  - name: caf\xe9\r\n    key: json:team_id\r\n    limits: [1m:5]\r\n", "rules.yaml:2:14: (file): byte 0xE9 is not UTF-8"},
		{"%YAML 1.2\n---\n" + rule, "rules.yaml:1:1: (file): a %YAML directive other than 1.1: remove the line"},
	} {
		if _, err := Parse("rules.yaml", []byte(c.data), Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.data, err, c.want)
		}
	}
	if _, err := Parse("rules.yaml", []byte("%YAML 1.1\n---\n"+rule), Options{}); err != nil {
		t.Errorf("%%YAML 1.1: %v, want it read", err)
	}
}

// A byte order mark anywhere but at the file's start (files joined, one saved with a BOM;
// a value copied from a page) is invisible in most editors, and YAML takes it for text:
// at the end of a key's field it named a field no record has (every record dead-lettered
// or, with missing: skip, the rule counting none), in a match value a value no record
// holds, both taken without a word; before rules: it made rules: an unknown field and
// rules missing, and before a list item a syntax error a line further on. Each is named
// where it is.
func TestParseByteOrderMarkInsideTheFile(t *testing.T) {
	const bom = "\uFEFF"
	for _, c := range []struct {
		name, data, want string
	}{
		{"after a key's field", "rules:\n  - name: a\n    key: json:team_id" + bom + "\n    limits: [1m:5]\n", "rules.yaml:3:22: (file): a byte order mark (U+FEFF)"},
		{"in a match value", "rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n    match:\n      - field: json:event\n        in: [" + bom + "click]\n", "rules.yaml:7:14: (file): a byte order mark (U+FEFF)"},
		{"before rules:", "# managed by hand\n" + bom + "rules:\n  - {name: a, key: json:team_id, limits: [1m:5]}\n", "rules.yaml:2:1: (file): a byte order mark (U+FEFF)"},
		{"before a list item", "rules:\n" + bom + "  - {name: a, key: json:team_id, limits: [1m:5]}\n", "rules.yaml:2:1: (file): a byte order mark (U+FEFF)"},
		{"after one at the start, CRLF", bom + "rules:\r\n  - name: a" + bom + "\r\n    key: json:team_id\r\n    limits: [1m:5]\r\n", "rules.yaml:2:12: (file): a byte order mark (U+FEFF)"},
		{"on the first line", bom + "rules: " + bom + "[]\n", "rules.yaml:1:8: (file): a byte order mark (U+FEFF)"},
		{"UTF-16", inUTF16("rules:\n  - {name: a"+bom+", key: json:team_id, limits: [1m:5]}\n", binary.LittleEndian), "rules.yaml:2:13: (file): a byte order mark (U+FEFF)"},
	} {
		_, err := Parse("rules.yaml", []byte(c.data), Options{})
		var ps Problems
		if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].Error(), c.want) {
			t.Errorf("%s: %v\nwant one problem, %s...", c.name, err, c.want)
		}
	}
	// One at the start is the encoding's, as before.
	if _, err := Parse("rules.yaml", []byte(bom+"rules:\n  - {name: a, key: json:team_id, limits: [1m:5]}\n"), Options{}); err != nil {
		t.Errorf("a byte order mark at the start: %v", err)
	}
	// Written as an escape in a quoted value, it is the value's: the file holds none.
	if _, err := Parse("rules.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n    match: [{field: json:event, in: [\"\\ufeffclick\"]}]\n"), Options{}); err != nil {
		t.Errorf("an escaped U+FEFF: %v", err)
	}
}

// A threshold written with a thousands separator in a list in flow style, [1m:10,000], is
// two entries to YAML, 1m:10 and 000: the second was refused as having no ':', which does
// not say where the ':' went. It says the ',' ended the entry.
func TestParseLimitThousandsSeparatorInFlowList(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:10,000]\n"), Options{})
	const want = `r.yaml:4:20: rules[0] "a".limits[1]: "000" has no ':' between window and threshold: a ',' in a threshold (1m:10,000) ends a list's entry in [ ]; write 1m:10000`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	// Said once a threshold, at its first group.
	_, err = Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5, 1h:1,000,000]\n"), Options{})
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || !strings.Contains(ps[0].Error(), `r.yaml:4:25: rules[0] "a".limits[2]: "000" has no ':' between window and threshold: a ',' in a threshold (1h:1,000,000) ends a list's entry in [ ]; write 1h:1000000`) {
		t.Errorf("1h:1,000,000: %v, want one problem", err)
	}
	// A list in block style keeps the ',': the threshold is refused as it is.
	_, err = Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits:\n      - 1m:10,000\n"), Options{})
	if want := `threshold "10,000" is not a whole number`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("block style: %v, want %s", err, want)
	}
}

// A tag YAML's own schema does not have (!ENV, as tools that substitute environment
// variables read it; !Ref) is refused where it is: the gate substitutes nothing, and
// took the text after it as written, a match value ${EVENT} matching no record, without
// a word. YAML's own tags read as before.
func TestParseLocalTagRefused(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n    match:\n      - field: json:event\n        in: [!ENV '${EVENT}']\n"), Options{})
	const want = `r.yaml:7:14: rules[0] "a".match[0].in[0]: tag !ENV: the gate reads YAML's own tags only (!!str and the like) and substitutes nothing, environment variables included: remove it`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	_, err = Parse("r.yaml", []byte("rules:\n  - name: a\n    key: !ENV json:${TEAM}\n    limits: [1m:5]\n"), Options{})
	if want := `r.yaml:3:10: rules[0] "a".key: tag !ENV:`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	if _, err := Parse("r.yaml", []byte("rules:\n  - name: !!str a\n    key: !<tag:yaml.org,2002:str> json:team_id\n    limits: [!!str 1m:5]\n    shadow: !!bool true\n"), Options{}); err != nil {
		t.Errorf("YAML's own tags: %v", err)
	}
}

// An unknown field whose name holds an invisible character (shadow and a zero-width
// space, copied from a page), a space or a line break is named quoted, as a rule's name
// is: printed as it is, "shadow: unknown field (want one of ..., shadow, ...)" named a
// field the list holds, and a line break split the problem's line in two.
func TestParseUnknownFieldNameQuoted(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n    shadow\u200b: true\n    \"mo de\": cap\n    \"x\\ny\": 1\n    colour: red\n"+
		"    match: [{field: json:e, in: [a], \"in \": [b]}]\nteam\u200b: json:team_id\n"), Options{})
	for _, want := range []string{
		`r.yaml:5:5: rules[0] "a"."shadow\u200b": unknown field`,
		`r.yaml:6:5: rules[0] "a"."mo de": unknown field`,
		`r.yaml:7:5: rules[0] "a"."x\ny": unknown field`,
		`r.yaml:8:5: rules[0] "a".colour: unknown field`,
		`r.yaml:9:38: rules[0] "a".match[0]."in ": unknown field`,
		`r.yaml:10:1: "team\u200b": unknown field`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("a problem over two lines: %q", err)
	}
}

// A LINE SEPARATOR (U+2028), PARAGRAPH SEPARATOR (U+2029) or NEXT LINE (U+0085) is a line
// break to the YAML reader and none to vim or VS Code (which offers to remove "unusual line
// terminators"): every line and column reported after one named a line the editor does
// not show there, and one in a comment ended it, what followed read as YAML. Each is
// refused where an editor shows it, as a byte order mark inside the file is.
func TestParseUnusualLineTerminatorRefused(t *testing.T) {
	for _, c := range []struct {
		name, data, want string
	}{
		{"U+2028 in a comment", "rules:\n  - name: a # was\u2028 b\n    key: json:team_id\n    limits: [1m:0]\n", "rules.yaml:2:18: (file): a LINE SEPARATOR (U+2028)"},
		{"U+2029 in a quoted value", "rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n    force: [\"x\u2029y\"]\n    mode: nope\n", "rules.yaml:5:15: (file): a PARAGRAPH SEPARATOR (U+2029)"},
		{"U+0085 after a value, CRLF", "rules:\r\n  - name: a\u0085\r\n    key: json:team_id\r\n    limits: [1m:0]\r\n", "rules.yaml:2:12: (file): a NEXT LINE (U+0085)"},
		{"UTF-16", inUTF16("rules:\n  - {name: a\u2028, key: json:team_id, limits: [1m:5]}\n", binary.LittleEndian), "rules.yaml:2:13: (file): a LINE SEPARATOR (U+2028)"},
	} {
		_, err := Parse("rules.yaml", []byte(c.data), Options{})
		var ps Problems
		if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].Error(), c.want) {
			t.Errorf("%s: %v\nwant one problem, %s...", c.name, err, c.want)
		}
	}
	// Written as an escape in a double-quoted value, it is the value's: no line breaks.
	if _, err := Parse("rules.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n    force: [\"x\\u2028y\"]\n"), Options{}); err != nil {
		t.Errorf("an escaped U+2028: %v", err)
	}
}

// A match value or force entry that starts or ends with a non-breaking space, a
// zero-width space or another character no editor shows (copied with a team id from a
// page or a chat) was taken as written: team "42\u00a0" matched no record of team 42,
// forced nothing, without a word. Refused, named by its code point, as a field's name
// is; written as an escape in double quotes, it is the value's own.
func TestParseValueEdgesInvisible(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n"+
		"    match:\n      - {field: json:team_id, in: [7, 42\u00a0]}\n      - {field: json:event, not_in: [click\u2060, '\u3000view']}\n"+
		"      - {field: json:token+distinct_id, in: [\"phc_x\u200b:u1\"]}\n"+
		"    force: [\u200bteam-1, team-2]\n"), Options{})
	for _, want := range []string{
		`r.yaml:6:39: rules[0] "a".match[0].in[1]: "42\u00a0" starts or ends with a non-ASCII space (U+00A0)`,
		`r.yaml:7:38: rules[0] "a".match[1].not_in[0]: "click\u2060" starts or ends with an invisible character (U+2060)`,
		`r.yaml:7:46: rules[0] "a".match[1].not_in[1]: "\u3000view" starts or ends with a non-ASCII space (U+3000)`,
		`r.yaml:8:46: rules[0] "a".match[2].in[0]: "phc_x\u200b:u1": a part starts or ends with an invisible character (U+200B)`,
		`r.yaml:9:13: rules[0] "a".force[0]: "\u200bteam-1" starts or ends with an invisible character (U+200B)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %s", err, want)
		}
	}
	// Written as an escape in double quotes, the character is the value's: meant.
	if _, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n"+
		"    match: [{field: json:city, in: [\"S\\u00e3o Paulo\\u00a0\", \"\\u200bx\"]}]\n    force: [\"42\\_\"]\n"), Options{}); err != nil {
		t.Errorf("escapes: %v", err)
	}
	// What an alias brings is told where its anchor writes it: escaped there, taken; as it
	// is, refused there, once.
	if _, err := Parse("r.yaml", []byte("rules:\n  - {name: a, key: json:team_id, limits: [1m:5], force: &f [\"42\\u00a0\"]}\n"+
		"  - {name: b, key: json:team_id, limits: [1m:5], force: *f}\n"), Options{}); err != nil {
		t.Errorf("an escape through an alias: %v", err)
	}
	_, err = Parse("r.yaml", []byte("rules:\n  - {name: a, key: json:team_id, limits: [1m:5], force: &f [\"42\u00a0\"]}\n"+
		"  - {name: b, key: json:team_id, limits: [1m:5], force: *f}\n"), Options{})
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].Error(), `r.yaml:2:61: rules[0] "a".force[0]: "42\u00a0" starts or ends`) {
		t.Errorf("through an alias: err = %v\nwant one problem, at the anchor", err)
	}
	_, err = Parse("r.yaml", []byte("rules:\n  - {name: a, key: json:team_id, limits: [1m:5], force: &f [42\u00a0]}\n"+
		"  - {name: b, key: json:team_id, limits: [1m:5], force: *f}\n"), Options{})
	if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].Error(), `r.yaml:2:61: rules[0] "a".force[0]: "42\u00a0" starts or ends`) {
		t.Errorf("through an alias, plain: err = %v\nwant one problem, at the anchor", err)
	}
	// Inside a value, or ASCII spaces quoted at its edges, it is the value's as before.
	if _, err := Parse("r.yaml", []byte("rules:\n  - name: a\n    key: json:team_id\n    limits: [1m:5]\n"+
		"    match: [{field: json:city, in: [New\u00a0York, \" 42\"]}]\n"), Options{}); err != nil {
		t.Errorf("inside a value: %v", err)
	}
}

// A YAML tag the gate does not honour on the value it is on (!!int on "abc", on a list or
// a mapping; !!binary, whose value the gate does not decode) was taken without a word,
// the value read as its text: !!binary aGk= forced the key aGk=, not hi. Refused where it
// is, as a tag not YAML's own is; YAML's own on a value of their kind read as before.
func TestParseTagNotHonoured(t *testing.T) {
	_, err := Parse("r.yaml", []byte("rules:\n  - name: !!int a\n    key: json:team_id\n    limits: !!int [!!bool 1m:5]\n"+
		"    max_keys: !!int \"abc\"\n    match: [!!seq {field: header:e, in: [!!null x, !!float 1e3, !!timestamp y]}]\n"+
		"    force: [!!binary aGk=, !<tag:yaml.org,2002:int> 0x1F]\n  - !!str\n    name: b\n    !!int key: json:team_id\n    limits: [1m:5]\n"), Options{})
	for _, want := range []string{
		`r.yaml:2:11: rules[0].name: tag !!int: "a" is not one to YAML`,
		`r.yaml:4:13: rules[0] "a".limits: tag !!int on a list: remove it`,
		`r.yaml:4:20: rules[0] "a".limits[0]: tag !!bool: "1m:5" is not one to YAML`,
		`r.yaml:5:15: rules[0] "a".max_keys: tag !!int: "abc" is not one to YAML`,
		`r.yaml:6:13: rules[0] "a".match[0]: tag !!seq on a mapping: remove it`,
		`r.yaml:6:42: rules[0] "a".match[0].in[0]: tag !!null: "x" is not one to YAML`,
		`r.yaml:6:65: rules[0] "a".match[0].in[2]: tag !!timestamp: the gate reads a value as the text written`,
		`r.yaml:7:13: rules[0] "a".force[0]: tag !!binary: the gate reads a value as the text written`,
		`r.yaml:8:5: rules[1] "b": tag !!str on a mapping: remove it`,
		`r.yaml:10:5: rules[1] "b".key: tag !!int: "key" is not one to YAML`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant %s", err, want)
		}
	}
	for _, bad := range []string{"!!float 1e3", "0x1F"} {
		if err != nil && strings.Contains(err.Error(), bad) {
			t.Errorf("err = %v\nwant nothing said of %s, a value of its tag's kind", err, bad)
		}
	}
	// YAML's own tags on values of their kind.
	if _, err := Parse("r.yaml", []byte("rules: !!seq\n  - !!map\n    name: !!str a\n    key: json:team_id\n    limits: !!seq [1m:5]\n"+
		"    cost: !!str events\n    shadow: !!bool false\n    match: [{field: header:e, in: [!!int 42, !!float 1.5, !!str x]}]\n"), Options{}); err != nil {
		t.Errorf("YAML's own tags on their kinds: %v", err)
	}
}
