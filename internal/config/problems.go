package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// varError is one bad value: GATE_WINDOW="abc": want a duration such as 60s.
type varError struct {
	Key, Value string
	Detail     string // which part is wrong, when the type can tell
	Want       string
	Err        error // the parser's error, if any, for errors.Is/As
}

func (e *varError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s=%q: %s; want %s", e.Key, e.Value, e.Detail, e.Want)
	}
	return fmt.Sprintf("%s=%q: want %s", e.Key, e.Value, e.Want)
}

func (e *varError) Unwrap() error { return e.Err }

// unknownVarError is a GATE_ variable Config does not define.
type unknownVarError struct{ Name, Suggest string }

func (e *unknownVarError) Error() string {
	name := e.Name
	// A name of other characters than a variable's own (a trailing space, a zero-width
	// space, a Cyrillic letter for a Latin one) is quoted and escaped: as is, it would
	// print as the very name it is told apart from.
	if strings.ContainsFunc(name, func(r rune) bool {
		return !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		name = strconv.QuoteToASCII(name)
	}
	if e.Suggest != "" {
		return fmt.Sprintf("%s: unknown variable (did you mean %s?)", name, e.Suggest)
	}
	return fmt.Sprintf("%s: unknown variable (`gate env` lists the known ones)", name)
}

// problems collects every configuration error, so an operator fixes them in one round.
// It prints on one line: start-up failures are read in log lines, where a second line
// would come loose from the first.
type Problems []error

func (p *Problems) add(err error) { *p = append(*p, err) }

func (p Problems) Error() string {
	s := make([]string, len(p))
	for i, e := range p {
		s[i] = e.Error()
	}
	return "configuration: " + strings.Join(s, "; ")
}

func (p Problems) Unwrap() []error { return p }

// closest returns the candidate nearest to name by edit distance, if it is near enough to
// be a plausible typo.
func closest(name string, candidates []string) string {
	best, bestD := "", 4 // more than 3 edits away is not a typo
	for _, c := range slices.Sorted(slices.Values(candidates)) {
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
