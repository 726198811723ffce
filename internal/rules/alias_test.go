package rules

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// An alias used as a mapping key is the value its anchor names, as YAML reads it: rule b
// below is {name: [1m:20], key: json:a, name: b}, a name given twice (and a name that is
// no name), refused. Read by the anchor's name, the alias key was taken for a limits
// field (the anchor is called &limits), and a rule b with limits [1m:20] accepted (a
// review).
func TestAliasKeyReadAsItsValue(t *testing.T) {
	const f = "rules:\n" +
		"  - &limits name: a\n" +
		"    key: json:a\n" +
		"    limits: [1m:10]\n" +
		"  - *limits : [1m:20]\n" +
		"    key: json:a\n" +
		"    name: b\n"
	// What YAML itself reads rule b as.
	var v struct {
		Rules []map[string]any `yaml:"rules"`
	}
	yerr := yaml.Unmarshal([]byte(f), &v)
	t.Logf("yaml.v3 decoding the same file into maps: err=%v value=%v", yerr, v.Rules)
	s, err := Parse("f.yaml", []byte(f), Options{Topics: topics, MinWindow: 100 * time.Millisecond})
	if err == nil {
		t.Fatalf("parsed: rule %q limits %v (alias key *limits, which YAML reads as the key \"name\", taken for a limits field)", s.Rules[1].Name, s.Rules[1].Limits)
	}
}

// The same with a valid file: the second rule's alias key *k is "name" in YAML, and the
// file is taken; read by the anchor's name, it said "unknown field k" and "name
// missing".
func TestAliasKeyOfAValidFileTaken(t *testing.T) {
	const f = "rules:\n" +
		"  - &k name: a\n" +
		"    key: json:a\n" +
		"    limits: [1m:10]\n" +
		"  - *k : b\n" +
		"    key: json:a\n" +
		"    limits: [1m:10]\n"
	var v struct {
		Rules []map[string]any `yaml:"rules"`
	}
	if err := yaml.Unmarshal([]byte(f), &v); err != nil || v.Rules[1]["name"] != "b" {
		t.Fatalf("yaml: %v %v", err, v.Rules)
	}
	if _, err := Parse("f.yaml", []byte(f), Options{Topics: topics, MinWindow: 100 * time.Millisecond}); err != nil {
		t.Fatalf("a valid file (YAML reads rules[1].name as b) refused: %v", err)
	}
}

// A key given twice inside a mapping brought by a merge key is said, as it is in the same
// mapping written as the rule: the second was dropped without a word.
func TestMergedMappingKeyGivenTwiceSaid(t *testing.T) {
	const f = "rules:\n" +
		"  - <<: {name: a, key: json:a, limits: [1m:10], limits: [1m:99999]}\n"
	s, err := Parse("f.yaml", []byte(f), Options{Topics: topics, MinWindow: 100 * time.Millisecond})
	if err == nil {
		t.Fatalf("parsed, limits %v: the second limits: dropped without a word", s.Rules[0].Limits)
	}
}

// A merge key given twice in one mapping (<<: *a, then <<: *b) is a key given twice, which
// YAML does not allow, and readers disagree on: the rule below took a's key and limits
// (the first merge winning) and b's mode, where PyYAML reads b's key and limits, without a
// word. It is refused, saying how several mappings are merged: <<: [*a, *b].
func TestMergeKeyGivenTwiceRefused(t *testing.T) {
	const f = "rules:\n" +
		"  - &a {name: a, key: json:team_id, limits: [1m:5]}\n" +
		"  - &b {name: b, key: json:x, limits: [1h:5], mode: cap}\n" +
		"  - <<: *a\n" +
		"    <<: *b\n" +
		"    name: c\n"
	var v struct {
		Rules []map[string]any `yaml:"rules"`
	}
	yerr := yaml.Unmarshal([]byte(f), &v)
	t.Logf("yaml.v3 decoding the same file into maps: err=%v rules[2]=%v", yerr, v.Rules)
	s, err := Parse("f.yaml", []byte(f), Options{Topics: topics, MinWindow: 100 * time.Millisecond})
	if err == nil {
		t.Fatalf("parsed: rule c has key %s, limits %v, mode %v, from two merge keys", s.Rules[2].Key, s.Rules[2].Limits, s.Rules[2].Mode)
	}
	const want = "f.yaml:5:5: <<: given twice in one mapping: merge several as <<: [*a, *b], the first listed winning"
	if err.Error() != "rules: "+want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	// The list form is taken, the first mapping winning.
	s, err = Parse("f.yaml", []byte(strings.Replace(f, "  - <<: *a\n    <<: *b\n", "  - <<: [*a, *b]\n", 1)), Options{Topics: topics, MinWindow: 100 * time.Millisecond})
	if err != nil || s.Rules[2].Key.String() != "json:team_id" || s.Rules[2].Mode.String() != "cap" {
		t.Errorf("<<: [*a, *b]: %v", err)
	}
}
