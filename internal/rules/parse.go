package rules

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/capturegate/gate/internal/durtext"
	"github.com/capturegate/gate/internal/keypart"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
)

// Options are what a rules file is checked against beyond itself.
type Options struct {
	// Topics maps each topic the gate already uses to its variable (events →
	// GATE_INPUT_TOPIC, ...): a rule's topic:NAME may be none of them.
	Topics map[string]string
	// EventClock is GATE_CLOCK=event, under which adaptive thresholds are not kept.
	EventClock bool
	// MinWindow is GATE_TICK_INTERVAL: every window must be longer, as each needs a tick
	// per epoch at least.
	MinWindow time.Duration
	// Outcomes is whether GATE_OUTCOMES_TOPIC is set: action drop needs it.
	Outcomes bool
	// MaxKeyBytes is GATE_MAX_KEY_BYTES: a force entry longer names nothing a rule
	// counts (0: no bound).
	MaxKeyBytes int
	// Check, when set, is asked about each rule that parsed: whether the gate can build
	// its limits under its own settings (GATE_ADAPTIVE_*, the clock, ...). Its error is
	// the rule's problem, at its limits, so that a file the gate cannot use is refused
	// when read, as any other problem is, not found unusable once in use.
	Check func(Rule) error
}

// Problems is every problem found in a rules file, each on its own, all on one line.
type Problems []error

func (p Problems) Error() string {
	s := make([]string, len(p))
	for i, e := range p {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}

func (p Problems) Unwrap() []error { return p }

// Problem is one problem at a place in a rules file.
type Problem struct {
	File      string
	Line, Col int
	// Path names the field: rules[1] "team-user".limits[0]; empty for a file that is not
	// YAML, whose Msg is the YAML library's (with a tab there named).
	Path string
	Msg  string
	// Kind, when set, is what the problem is in words that stay while it does (a rule
	// topic's: "missing", "write refused"), where Msg's may not (Kafka's): a refused edit
	// is said again when its problems change kind (Reloader).
	Kind string
}

// Error is FILE:LINE:COL: PATH: MSG, or FILE:LINE:COL: MSG without a path.
func (p *Problem) Error() string {
	if p.Path == "" {
		return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Col, p.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", p.File, p.Line, p.Col, p.Path, p.Msg)
}

// ErrRules is wrapped by every error Parse returns.
var ErrRules = errors.New("rules")

var nameRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9_-]{0,38}[a-z0-9])?$`)

// ValidName reports whether name can be a rule's name: 1 to 40 of a-z 0-9 _ -, starting
// and ending with a letter or digit.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// The fields of a rule, in the order the docs list them.
var ruleFields = []string{"name", "key", "missing", "match", "limits", "threshold_mode", "mode", "cost", "action", "shadow", "force", "track", "max_keys", "on_cardinality"}

// parser collects the problems of one file.
type parser struct {
	file string
	o    Options
	errs Problems
	// src is the file as the reader reads it (asUTF8), where a value is told written with
	// an escape or not (escaped).
	src []byte
	// topics are the rules' topics read so far, by their name with '.' as '_' (collision):
	// the topic and the rule whose it is.
	topics map[string][2]string
}

func (p *parser) bad(n *yaml.Node, path, format string, args ...any) {
	p.errs = append(p.errs, &Problem{File: p.file, Line: n.Line, Col: n.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Parse reads the rules file named file, whose content is data: every problem or a
// checked Set. Errors wrap ErrRules and are a Problems: every problem of a YAML file, or
// the one problem of a file that is not YAML (its Path empty).
func Parse(file string, data []byte, o Options) (*Set, error) {
	var doc yaml.Node
	p := &parser{file: file, o: o}
	utf16 := bytes.HasPrefix(data, []byte{0xFF, 0xFE}) || bytes.HasPrefix(data, []byte{0xFE, 0xFF})
	if !utf16 && !utf8.Valid(data) {
		// The YAML reader says "invalid trailing UTF-8 octet" a line or more past the byte
		// (a Latin-1 é, a review's): named where it is, and what is wanted. A file in
		// UTF-16 after its byte order mark the reader takes as it is.
		line, col, b := firstInvalidUTF8(data)
		p.bad(&yaml.Node{Line: line, Column: col}, "(file)", "byte 0x%02X is not UTF-8: a rules file is UTF-8 text (save it as UTF-8; UTF-16 with its byte order mark reads too)", b)
		return nil, p.result()
	}
	if line, col, r, ok := innerOdd(data); ok {
		if r == '\uFEFF' {
			// The reader takes a byte order mark past the start for text: after a key's
			// field it named a field no record has, in a match value a value none holds,
			// before rules: an unknown field "rules" (files joined, one saved with a BOM).
			p.bad(&yaml.Node{Line: line, Column: col}, "(file)", "a byte order mark (U+FEFF) inside the file, invisible in most editors: remove it (YAML takes one at the start only, where it says the encoding; a file saved with one, joined to another?)")
		} else {
			// The reader breaks a line there, editors do not: every line after it would
			// be misnamed (and one in a comment ends it, the rest read as YAML).
			p.bad(&yaml.Node{Line: line, Column: col}, "(file)", "a %s (U+%04X) inside the file: YAML reads it as a line break, most editors do not, so lines would be counted apart from yours: remove it (in a double-quoted value, write it \\u%04x)", oddBreaks[r], r, r)
		}
		return nil, p.result()
	}
	p.src, _ = asUTF8(data)
	if d, ok := bytes.CutPrefix(bytes.TrimLeft(data, "\ufeff"), []byte("%YAML")); ok && !bytes.HasPrefix(bytes.TrimLeft(d, " \t"), []byte("1.1")) {
		// yaml.v3 takes %YAML 1.1 alone, and refuses 1.2 as "incompatible": the file is
		// read as YAML 1.2 without the directive (a review's file, to the docs' letter).
		p.bad(&yaml.Node{Line: 1, Column: 1}, "(file)", "a %%YAML directive other than 1.1: remove the line (the file is read as YAML 1.2 without it)")
		return nil, p.result()
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errs = append(p.errs, syntaxProblem(file, data, err))
		return nil, p.result()
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first yaml.Node
	if dec.Decode(&first) == nil {
		// A further document (after ---) would be read by no one: refused, not ignored,
		// whichever it is (empty ones between, "---\n---\nrules: ...", included).
		for {
			var more yaml.Node
			err := dec.Decode(&more)
			if errors.Is(err, io.EOF) {
				break
			}
			if err == nil && len(more.Content) > 0 && more.Content[0].Tag != "!!null" {
				p.bad(more.Content[0], "(top)", "a second YAML document: want one, a mapping with one key, rules:")
				return nil, p.result()
			}
			if err != nil {
				sp := syntaxProblem(file, data, err)
				sp.Msg = "a second YAML document: " + sp.Msg
				p.errs = append(p.errs, sp)
				return nil, p.result()
			}
		}
	}
	// A document with nothing in it (a file of comments and ---) is an empty file too,
	// not one that is no mapping: its node is placed past the file's last line.
	if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" && doc.Content[0].Value == "" && doc.Content[0].Anchor == "" {
		p.bad(&yaml.Node{Line: 1, Column: 1}, "rules", "the file is empty: want a list of rules under rules:")
		return nil, p.result()
	}
	if !p.expand(&doc) {
		return nil, p.result()
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		p.bad(root, "(top)", "want a mapping with one key, rules:")
		return nil, p.result()
	}
	var list, team *yaml.Node
	for k, v := range pairs(p, root, "(top)") {
		switch k.Value {
		case "rules":
			list = v
		case "team":
			team = v
		default:
			p.bad(k, fieldName(k.Value), "unknown field (want rules:, and team: if you choose it)")
		}
	}
	var teamKey route.KeyFrom
	if team != nil && (team.Kind != yaml.ScalarNode || p.scalar(team, "team")) {
		k, err := route.ParseKeyFrom(team.Value)
		switch {
		case team.Kind != yaml.ScalarNode:
			p.bad(team, "team", "want a key of one field: json:FIELD, header:NAME or key")
		case err != nil:
			// As a rule's key: says it, not the router's "route: invalid key source".
			p.bad(team, "team", "%s", keyFromProblem(team.Value, err, "json:FIELD, header:NAME or key"))
		case k.Composite():
			p.bad(team, "team", "%s has %d fields: want a key of one field, what identifies a team (json:team_id, say)", team.Value, len(k.Members()))
		default:
			teamKey = k
		}
	}
	listOK := false
	switch {
	case list == nil:
		p.bad(root, "rules", "missing: want a list of rules")
	case list.Kind != yaml.SequenceNode || len(list.Content) == 0:
		p.bad(list, "rules", "want a list of at least one rule")
	case len(list.Content) > MaxRules:
		p.bad(list, "rules", "%d rules: at most %d", len(list.Content), MaxRules)
		listOK = true // their own problems too: every problem at once
	default:
		listOK = true
	}
	if list != nil && list.Kind == yaml.SequenceNode {
		p.tagOK(list, "rules")
	}
	// Beside a list that reads, a problem of the top (an unknown key, rules: given twice)
	// is reported with the rules' own: every problem at once.
	if !listOK {
		return nil, p.result()
	}
	s := &Set{Source: file, Team: teamKey}
	names := map[string]int{}
	for i, n := range list.Content {
		r, ok := p.rule(n, i)
		// A name taken is reported beside the rule's other problems, not once they are
		// fixed: every problem at once.
		if r.Name != "" {
			if j, dup := names[r.Name]; dup {
				p.bad(n, fmt.Sprintf("rules[%d]", i), "name %q is rules[%d]'s too: names must differ", r.Name, j)
				continue
			}
			names[r.Name] = i
		}
		if !ok {
			continue
		}
		if p.o.Check != nil {
			if err := p.o.Check(r); err != nil {
				at := n
				for k, v := range pairs(&parser{}, n, "") {
					if k.Value == "limits" {
						at = v
					}
				}
				p.bad(at, fmt.Sprintf("rules[%d] %q.limits", i, r.Name), "%v", err)
				continue
			}
		}
		s.Rules = append(s.Rules, r)
	}
	if len(p.errs) > 0 {
		return nil, p.result()
	}
	return s, nil
}

// firstInvalidUTF8 is where data's first byte that is not UTF-8 is (placeOf), and the
// byte.
func firstInvalidUTF8(data []byte) (line, col int, b byte) {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			line, col = placeOf(data, i)
			return line, col, data[i]
		}
		i += n
	}
	line, col = placeOf(data, len(data))
	return line, col, 0
}

// oddBreaks are the characters the YAML reader breaks a line at (YAML 1.1's breaks) and
// editors do not, by their names.
var oddBreaks = map[rune]string{'\u0085': "NEXT LINE", '\u2028': "LINE SEPARATOR", '\u2029': "PARAGRAPH SEPARATOR"}

// innerOdd is where the first character of data that the YAML reader reads otherwise than
// an editor shows it is (placeOf), and the character: a byte order mark (U+FEFF) past its
// start, or one of oddBreaks; in data as the reader reads it (asUTF8). It is false when
// there is none, or data is UTF-16 the reader refuses. An escape in a quoted value
// ("\ufeff", "\u2028") is no such character.
func innerOdd(data []byte) (line, col int, r rune, ok bool) {
	u, ok := asUTF8(data)
	if !ok {
		return 0, 0, 0, false
	}
	from := 0
	if bytes.HasPrefix(u, []byte(bom)) {
		from = len(bom) // the encoding's
	}
	i := bytes.IndexFunc(u[from:], func(r rune) bool { return r == '\uFEFF' || oddBreaks[r] != "" })
	if i < 0 {
		return 0, 0, 0, false
	}
	r, _ = utf8.DecodeRune(u[from+i:])
	line, col = placeOf(u, from+i)
	return line, col, r, true
}

// bom is the byte order mark, in UTF-8.
const bom = "\uFEFF"

// placeOf is the line and column of data[i] as the YAML reader counts them (from 1):
// lines broken by LF, CR LF or a CR alone, columns in characters, a byte order mark that
// starts data of no column. data before i is UTF-8.
func placeOf(data []byte, i int) (line, col int) {
	line, col = 1, 1
	k := 0
	if bytes.HasPrefix(data[:i], []byte(bom)) {
		k = len(bom)
	}
	for k < i {
		r, n := utf8.DecodeRune(data[k:])
		switch {
		case r == '\r' && k+1 < i && data[k+1] == '\n':
			n = 2
			fallthrough
		case r == '\r' || r == '\n':
			line, col = line+1, 1
		default:
			col++
		}
		k += n
	}
	return line, col
}

// result is the problems found, in the file's order, whichever check found them (a
// name given twice is found once every rule is read): a reader goes down the file.
func (p *parser) result() error {
	slices.SortStableFunc(p.errs, func(a, b error) int {
		pa, oka := a.(*Problem)
		pb, okb := b.(*Problem)
		if !oka || !okb {
			return 0
		}
		return cmp.Or(cmp.Compare(pa.Line, pb.Line), cmp.Compare(pa.Col, pb.Col))
	})
	return fmt.Errorf("%w: %w", ErrRules, p.errs)
}

// fieldName is a mapping key's name as a field path writes it: as it is, or quoted when
// it is empty or holds a character that is not graphic or is a space (a zero-width space
// copied with it, a line break), so that "shadow" and a zero-width space is not read as
// shadow, nor a problem split over two lines.
func fieldName(k string) string {
	if k == "" || strings.IndexFunc(k, func(r rune) bool { return !unicode.IsGraphic(r) || unicode.IsSpace(r) }) >= 0 {
		return strconv.Quote(k)
	}
	return k
}

// pairs yields a mapping's keys and values, reporting a key given twice (YAML allows no
// duplicates, and a decoder would keep either).
func pairs(p *parser, m *yaml.Node, path string) func(func(k, v *yaml.Node) bool) {
	return func(yield func(k, v *yaml.Node) bool) {
		p.tagOK(m, path)
		seen := map[string]bool{}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			if msg := tagProblem(k); msg != "" {
				// Read by its text all the same: the field is the one named.
				p.bad(k, path+"."+fieldName(k.Value), "%s", msg)
			}
			if seen[k.Value] {
				p.bad(k, path+"."+fieldName(k.Value), "given twice")
				continue
			}
			seen[k.Value] = true
			if !yield(k, v) {
				return
			}
		}
	}
}

// forcedAt is an entry of a rule's force list and its field path, as written (its index
// counting every entry, an empty one too).
type forcedAt struct {
	n    *yaml.Node
	path string
}

// rule reads rules[i].
func (p *parser) rule(n *yaml.Node, i int) (Rule, bool) {
	path := fmt.Sprintf("rules[%d]", i)
	if n.Kind != yaml.MappingNode {
		p.bad(n, path, "want a mapping with name, key, limits and the optional fields")
		return Rule{}, false
	}
	before := len(p.errs)
	// The name first, so that every other message, a field given twice included, can
	// carry it; the first name given is the rule's, a second one a field given twice.
	for k, v := range pairs(&parser{}, n, path) { // duplicates are reported below
		if k.Value == "name" {
			if p.scalar(v, path+".name") && !nameRE.MatchString(v.Value) {
				p.bad(v, path+".name", "%q: want 1 to 40 of a-z, 0-9, '_' and '-', starting and ending with a letter or digit (it names metrics and Redis keys)", v.Value)
			}
			path = fmt.Sprintf("%s %q", path, v.Value)
		}
	}
	r := Rule{Mode: limit.Divert, Cost: route.CostEvents, Action: Action{Kind: Overflow}}
	got := map[string]*yaml.Node{}
	var forced []forcedAt // the force list's keys, checked against the key once read
	for k, v := range pairs(p, n, path) {
		if !slices.Contains(ruleFields, k.Value) {
			p.bad(k, path+"."+fieldName(k.Value), "unknown field (want one of %s)", strings.Join(ruleFields, ", "))
			continue
		}
		got[k.Value] = v
		fp := path + "." + k.Value
		switch k.Value {
		case "name":
			r.Name = v.Value
		case "key":
			if p.scalar(v, fp) {
				kf, err := route.ParseKeyFrom(v.Value)
				if err != nil {
					p.bad(v, fp, "%s", keyFromProblem(v.Value, err, "json:FIELD[+FIELD...], header:NAME or key"))
				}
				r.Key = kf
			}
		case "missing":
			if p.scalar(v, fp) {
				switch v.Value {
				case "dead_letter":
				case "skip":
					r.SkipMissing = true
				default:
					p.bad(v, fp, "%q: want dead_letter or skip", v.Value)
				}
			}
		case "match":
			r.Match = p.matches(v, fp)
		case "limits":
			r.Limits = p.limits(v, fp)
		case "threshold_mode":
			r.Adaptive = p.either(v, fp, "static", "adaptive", "static or adaptive")
		case "mode":
			if p.either(v, fp, "divert", "cap", "divert or cap") {
				r.Mode = limit.Cap
			}
		case "cost":
			if p.scalar(v, fp) {
				if err := r.Cost.UnmarshalText([]byte(v.Value)); err != nil {
					p.bad(v, fp, "%q: want events or bytes", v.Value)
				}
			}
		case "action":
			if p.scalar(v, fp) {
				r.Action = p.action(v, fp)
				r.ActionAt = Place{Line: v.Line, Col: v.Column, Path: fp}
			}
		case "force":
			if v.Kind != yaml.SequenceNode {
				p.bad(v, fp, "want a list of keys such as [team-1, team-2]")
				break
			}
			p.tagOK(v, fp)
			first := map[string]int{} // a key's first line: a second is a mistake, as in GATE_FORCE_OVERFLOW
			for j, e := range v.Content {
				ep := fmt.Sprintf("%s[%d]", fp, j)
				if p.scalar(e, ep) {
					if e.Value == "" {
						p.bad(e, ep, "an empty key")
						continue
					}
					if line, ok := first[e.Value]; ok {
						p.bad(e, ep, "%q appears twice (first at line %d)", e.Value, line)
						continue
					}
					first[e.Value] = e.Line
					r.Force = append(r.Force, e.Value)
					forced = append(forced, forcedAt{e, ep})
				}
			}
		case "shadow":
			r.Shadow = p.either(v, fp, "false", "true", "true or false")
		case "track":
			r.AboveFloor = p.either(v, fp, "all", "above_floor",
				"all (every key cached and written) or above_floor (keys under the floor counted in a sketch)")
		case "max_keys":
			if p.scalar(v, fp) {
				n, err := strconv.ParseInt(v.Value, 10, 64)
				if err != nil || n < 0 {
					p.bad(v, fp, "%q: want a whole number of keys a team may have in a window (0: no bound)", v.Value)
				}
				r.MaxKeys = n
			}
		case "on_cardinality":
			if p.scalar(v, fp) {
				a, err := limit.ParseCardinalityAction(v.Value)
				if err != nil || v.Value == "" {
					p.bad(v, fp, "%q: want collapse, overflow or tag", v.Value)
				}
				r.OnCardinality = a
			}
		}
	}
	for _, f := range forced { // checked once the key is read, whatever the fields' order
		if !p.valueEdges(f.n, f.path, r.Key.Composite()) {
			continue
		}
		if err := r.Key.CheckKey(f.n.Value, p.o.MaxKeyBytes); err != nil {
			p.bad(f.n, f.path, "%v", err)
		}
	}
	if got["max_keys"] == nil {
		r.MaxKeys = limit.DefaultKeyCardinality
	}
	if got["track"] == nil {
		// Keys that can matter only: a key of several fields (a user within a team) has a
		// long tail, and a rule with a match counts a part of each team's records, so that
		// most of its keys stay far under its limit. A plain rule keyed by one field (the
		// team rule) keeps every team whole, for what operators read of teams.
		r.AboveFloor = r.Key.Composite() || len(r.Match) > 0
	}
	// The sketch of keys under their floor is kept under static thresholds on the wall
	// clock only (limit.New): learned thresholds learn from every key's counts, and the
	// event clock caches each window apart. Under the event clock no limit keeps one; an
	// adaptive rule's first limit keeps none, its further (static) limits do. A team's
	// keys are counted in the first limit's sketch (noSketch: why it has none).
	noSketch := ""
	switch {
	case p.o.EventClock:
		noSketch = "GATE_CLOCK=event"
		if r.AboveFloor {
			if got["track"] != nil {
				p.bad(got["track"], path+".track", "all with GATE_CLOCK=event: keys under their floor are counted in a sketch on the wall clock only")
			}
			r.AboveFloor = false
		}
	case r.Adaptive:
		noSketch = "threshold_mode: adaptive"
	}
	if !r.Key.Composite() {
		// A team's keys are counted only for a key of several fields, whose first is the
		// team: one field has one key a team.
		for _, f := range []string{"max_keys", "on_cardinality"} {
			if got[f] != nil {
				p.bad(got[f], path+"."+f, "only for a key of several fields (json:team_id+distinct_id): its first field is the team whose keys are counted")
			}
		}
		r.MaxKeys = 0
	} else if !r.AboveFloor && !trackUnknown(got["track"]) || noSketch != "" {
		// A team's keys are counted among those under the floor, in the first limit's
		// sketch: with every key cached, or no sketch there, there are none.
		why := "only with track: above_floor (the default for a key of several fields)"
		if noSketch != "" {
			why = "not with " + noSketch + ": a team's keys are counted among those under their floor, in the first limit's sketch, kept under static thresholds on the wall clock only"
		}
		for _, f := range []string{"max_keys", "on_cardinality"} {
			if got[f] != nil {
				p.bad(got[f], path+"."+f, "%s", why)
			}
		}
		r.MaxKeys = 0
	}
	if r.Enforces(Drop) && !p.o.Outcomes {
		// A shadow rule drops nothing, and trying a drop rule in shadow first is how one
		// is brought in: only an enforced one needs its records counted somewhere.
		p.bad(got["action"], path+".action", "drop: needs GATE_OUTCOMES_TOPIC set, so that every dropped record is counted in the outcomes (nothing vanishes unrecorded); a shadow rule, which drops nothing, does not")
	}
	for _, f := range []string{"name", "key", "limits"} {
		if got[f] == nil {
			p.bad(n, path+"."+f, "missing (a rule needs name, key and limits)")
		}
	}
	if r.Adaptive && len(r.Limits) > 0 {
		switch w := r.Limits[0].Window; {
		case w > time.Hour || time.Hour%w != 0:
			p.bad(got["threshold_mode"], path+".threshold_mode", "static unless the first limit's window (%s) divides an hour, such as 1m (adaptive learns per hour of the day)", durtext.String(w))
		case p.o.EventClock:
			p.bad(got["threshold_mode"], path+".threshold_mode", "static with GATE_CLOCK=event (learned thresholds are kept under the wall clock only)")
		}
	}
	return r, len(p.errs) == before
}

// oddAtEdge is the character that v, or each part of v for a composite key's value (its
// parts joined by ':'), starts or ends with and that an editor shows as nothing or as an
// ASCII space (keypart.Odd, as GATE_OVERRIDES and gate overrides refuse them); 0 for
// none. part is whether it is at a part's edge inside v.
func oddAtEdge(v string, composite bool) (r rune, part bool) {
	parts := []string{v}
	if composite {
		parts = strings.Split(v, ":")
	}
	for i, s := range parts {
		first, _ := utf8.DecodeRuneInString(s)
		last, _ := utf8.DecodeLastRuneInString(s)
		for j, r := range []rune{first, last} {
			if s != "" && keypart.Odd(r) {
				// At v's own start or end it is v's edge, else a part's.
				edge := i == 0 && j == 0 || i == len(parts)-1 && j == 1
				return r, !edge
			}
		}
	}
	return 0, false
}

// valueEdges reports whether the match value or force entry v is free of oddAtEdge's
// characters, reporting it when not: copied with a team id from a page or a chat, one
// made a value no record holds (team "42\u00a0" matched nothing of team 42), taken
// without a word. One written as an escape in double quotes ("42\u00a0") is meant, and
// the value's.
func (p *parser) valueEdges(v *yaml.Node, path string, composite bool) bool {
	r, part := oddAtEdge(v.Value, composite)
	if r == 0 {
		return true
	}
	at := offsetOf(p.src, v.Line, v.Column)
	if at < len(p.src) && p.src[at] == '*' {
		return true // an alias's copy, placed at the alias: told where its anchor writes it
	}
	if escaped(p.src[min(at, len(p.src)):], v, r) {
		return true
	}
	what := keypart.OddKind(r)
	where := " starts or ends with"
	if part {
		where = ": a part starts or ends with"
	}
	p.bad(v, path, "%q%s %s (U+%04X), which editors do not show: taken as written, it is a value no one sends; remove it, or, if the value holds it, write it as an escape in double quotes, %s",
		v.Value, where, what, r, strconv.Quote(v.Value))
	return false
}

// escaped reports whether the scalar v, written at the start of src, is in double quotes
// and holds r only as an escape there (\u00a0, \_), none as it is.
func escaped(src []byte, v *yaml.Node, r rune) bool {
	if v.Style&yaml.DoubleQuotedStyle == 0 || len(src) == 0 || src[0] != '"' {
		return false
	}
	body := src[1:]
	for k := 0; k < len(body); k++ {
		switch body[k] {
		case '\\':
			k++ // the escaped character: ASCII (a '"', a 'u' and its hex digits after it)
		case '"':
			return !bytes.ContainsRune(body[:k], r)
		}
	}
	return !bytes.ContainsRune(body, r)
}

// offsetOf is the byte offset in data of the character at line and col, as placeOf
// counts them; len(data) past its end.
func offsetOf(data []byte, line, col int) int {
	l, c := 1, 1
	k := 0
	if bytes.HasPrefix(data, []byte(bom)) {
		k = len(bom)
	}
	for k < len(data) && (l < line || l == line && c < col) {
		r, n := utf8.DecodeRune(data[k:])
		switch {
		case r == '\r' && k+1 < len(data) && data[k+1] == '\n':
			n = 2
			fallthrough
		case r == '\r' || r == '\n':
			if l == line {
				return len(data) // col past the line's end
			}
			l, c = l+1, 1
		default:
			c++
		}
		k += n
	}
	return k
}

// keyFromProblem is what is wrong with the key source v, whose ParseKeyFrom error is err:
// for a json: source whose form is right and a field wrong (empty, or starting or ending
// with a space), or a header: source whose name starts or ends with a space, v and what is
// wrong with the field or name; else v and the forms a source takes, want.
func keyFromProblem(v string, err error, want string) string {
	q := strconv.Quote(v)
	if _, why, ok := strings.Cut(err.Error(), q+": "); ok && (strings.HasPrefix(why, "field ") || strings.HasPrefix(why, "header name ")) {
		return q + ": " + why
	}
	return q + ": want " + want
}

// scalar reports whether n is a scalar, reporting it when not.
func (p *parser) scalar(n *yaml.Node, path string) bool {
	switch {
	case !p.tagOK(n, path):
		return false
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		p.bad(n, path, "empty (null): want a single value")
		return false
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[0].Kind == yaml.ScalarNode &&
		n.Content[1].Kind == yaml.ScalarNode && n.Line == n.Content[0].Line && n.Column == n.Content[0].Column:
		// 1m: 5000, the space after ':' that YAML's own mappings have (no '{' before it): a
		// value meant as one, which the bare "want a single value" does not explain.
		k, v := n.Content[0].Value, n.Content[1].Value
		if n.Content[0].Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			// ["1m":5]: a quoted key takes the ':' right after it (JSON's {"a":1}), so
			// there is no space to blame; the quotes are at fault.
			p.bad(n, path, "want a single value, not a mapping: YAML reads a quoted %q and the ':' right after it as key %q, value %q: write %s:%s, or quote it whole, \"%s:%s\"", k, k, v, k, v, k, v)
			return false
		}
		p.bad(n, path, "want a single value, not the mapping YAML reads %q as (a space after ':'): write %s:%s, or quote it", k+": "+v, k, v)
		return false
	case n.Kind != yaml.ScalarNode:
		p.bad(n, path, "want a single value")
		return false
	}
	return true
}

// tagOK reports whether n has no tag, or one the gate honours on it, reporting it when
// not: a value is read as its text, a tag there only saying what YAML would read it as.
func (p *parser) tagOK(n *yaml.Node, path string) bool {
	if msg := tagProblem(n); msg != "" {
		p.bad(n, path, "%s", msg)
		return false
	}
	return true
}

// tagProblem is what is wrong with n's tag, as written in the file; "" for none. The gate
// reads every value as its text, and honours a tag that says what YAML reads the node as
// anyway: !!str, and !!int, !!float, !!bool or !!null on a value YAML reads so, !!map on a
// mapping, !!seq on a list. Any other was taken without a word: !ENV ${X} (the text
// after it taken as written, a match value ${X} matching no record), !!int on "abc" or on
// a list, !!binary aGk= (a key aGk=, not hi, forced).
func tagProblem(n *yaml.Node) string {
	if n.Style&yaml.TaggedStyle == 0 {
		return ""
	}
	if !strings.HasPrefix(n.Tag, "!!") {
		return fmt.Sprintf("tag %s: the gate reads YAML's own tags only (!!str and the like) and substitutes nothing, environment variables included: remove it", n.Tag)
	}
	switch n.Kind {
	case yaml.MappingNode:
		if n.Tag != "!!map" {
			return fmt.Sprintf("tag %s on a mapping: remove it (YAML reads it as a mapping all the same)", n.Tag)
		}
	case yaml.SequenceNode:
		if n.Tag != "!!seq" {
			return fmt.Sprintf("tag %s on a list: remove it (YAML reads it as a list all the same)", n.Tag)
		}
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str", "!!merge": // a merge key's, <<, read by expand
		case "!!int", "!!float", "!!bool", "!!null":
			// YAML's own reader refuses the value so tagged when it is none (!!int "abc").
			var v any
			if n.Decode(&v) != nil {
				return fmt.Sprintf("tag %s: %q is not one to YAML: remove the tag (the gate reads the value as the text written)", n.Tag, n.Value)
			}
		case "!!map", "!!seq":
			return fmt.Sprintf("tag %s on a single value: remove it", n.Tag)
		default:
			return fmt.Sprintf("tag %s: the gate reads a value as the text written, and honours YAML's !!str, !!int, !!float, !!bool and !!null only: remove it", n.Tag)
		}
	}
	return ""
}

// limits reads a rule's limits: a list of WINDOW:THRESHOLD (ParseLimit), windows
// distinct and longer than Options.MinWindow.
func (p *parser) limits(n *yaml.Node, path string) []Limit {
	p.tagOK(n, path)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.bad(n, path, "want a list of at least one WINDOW:THRESHOLD such as [1m:1000]")
		return nil
	}
	var out []Limit
	windows := map[time.Duration]int{}
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if !p.scalar(e, ep) {
			continue
		}
		// As GATE_LIMITS's entries: the same function reads both.
		l, err := ParseLimit(e.Value)
		if err != nil {
			if whole, meant, first, ok := thousands(n, i); ok {
				// [1m:10,000]: YAML's flow list ends the entry at the ',', and "000 has no
				// ':'" did not say where the ':' went. Said once a threshold, at its first
				// group (1h:1,000,000's second is the same mistake).
				if first {
					p.bad(e, ep, "%v: a ',' in a threshold (%s) ends a list's entry in [ ]; write %s", err, whole, meant)
				}
				continue
			}
			p.bad(e, ep, "%v", err)
			continue
		}
		if l.Window <= p.o.MinWindow {
			p.bad(e, ep, "%q: want a window longer than GATE_TICK_INTERVAL (%s)", e.Value, durtext.String(p.o.MinWindow))
			continue
		}
		if j, dup := windows[l.Window]; dup {
			// The windows as the file writes them (60s and 1m), not time.Duration's 1m0s.
			w, _, _ := strings.Cut(e.Value, ":")
			prev, _, _ := strings.Cut(n.Content[j].Value, ":")
			p.bad(e, ep, "window %s is %s[%d]'s too (%s): each limit of a rule needs its own window", strings.TrimSpace(w), path, j, strings.TrimSpace(prev))
			continue
		}
		windows[l.Window] = i
		out = append(out, l)
	}
	return out
}

// groupRE is a group of three digits, as a thousands separator leaves them.
var groupRE = regexp.MustCompile(`^[0-9]{3}$`)

// thousands reports whether limits entry i of the flow list n is a group of three digits
// that a ',' cut from a threshold before it (1m:10,000 read as 1m:10 and 000): the limit
// as written (1m:10,000) and as meant (1m:10000), and whether i is the threshold's first
// such group.
func thousands(n *yaml.Node, i int) (whole, meant string, firstGroup, ok bool) {
	group := func(j int) bool {
		return n.Content[j].Kind == yaml.ScalarNode && n.Content[j].Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 && groupRE.MatchString(n.Content[j].Value)
	}
	if n.Style&yaml.FlowStyle == 0 || !group(i) {
		return "", "", false, false
	}
	first := i
	for first > 0 && group(first) {
		first--
	}
	if e := n.Content[first]; group(first) || e.Kind != yaml.ScalarNode || !strings.Contains(e.Value, ":") {
		return "", "", false, false
	}
	last := i
	for last+1 < len(n.Content) && group(last+1) {
		last++
	}
	var parts []string
	for _, e := range n.Content[first : last+1] {
		parts = append(parts, strings.TrimSpace(e.Value))
	}
	return strings.Join(parts, ","), strings.Join(parts, ""), i == first+1, true
}

// matches reads a rule's match: a list of {field, in} or {field, not_in}.
func (p *parser) matches(n *yaml.Node, path string) []Match {
	p.tagOK(n, path)
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.bad(n, path, "want a list of at least one {field: ..., in: [...]} or {field: ..., not_in: [...]}")
		return nil
	}
	var out []Match
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if e.Kind != yaml.MappingNode {
			p.bad(e, ep, "want {field: ..., in: [...]} or {field: ..., not_in: [...]}")
			continue
		}
		var m Match
		var field, list *yaml.Node
		for k, v := range pairs(p, e, ep) {
			switch k.Value {
			case "field":
				field = v
			case "in", "not_in":
				if list != nil {
					p.bad(k, ep+"."+k.Value, "want one of in and not_in, not both")
					continue
				}
				list, m.Not = v, k.Value == "not_in"
			default:
				p.bad(k, ep+"."+fieldName(k.Value), "unknown field (want field, and in or not_in)")
			}
		}
		if field == nil {
			p.bad(e, ep+".field", "missing: want json:FIELD, header:NAME or key")
		} else if p.scalar(field, ep+".field") {
			kf, err := route.ParseKeyFrom(field.Value)
			if err != nil {
				p.bad(field, ep+".field", "%s", keyFromProblem(field.Value, err, "json:FIELD, header:NAME or key"))
			}
			m.Field = kf
		}
		lp := ep + ".in"
		if m.Not {
			lp = ep + ".not_in"
		}
		switch {
		case list == nil:
			p.bad(e, lp, "missing: want in: [values] or not_in: [values]")
		case list.Kind != yaml.SequenceNode || len(list.Content) == 0:
			p.bad(list, lp, "want a list of at least one value")
		default:
			p.tagOK(list, lp)
			for j, v := range list.Content {
				if !p.tagOK(v, fmt.Sprintf("%s[%d]", lp, j)) {
					continue // said; the checks below would read the tag as it is not meant
				}
				if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
					// A field that is absent or null reads no value: in no list.
					// The advice quotes what was written: ~ and an empty entry are YAML's
					// null too, and "quote null" named a word the file did not hold.
					what, advice := "null", "quote it, \"null\", for the text null"
					switch v.Value {
					case "null", "":
						if v.Value == "" {
							advice = "an empty entry is YAML's null: write a value, or quote \"\" for the empty text"
						}
					default:
						what = fmt.Sprintf("null (%s)", v.Value)
						advice = fmt.Sprintf("quote it, %q, for the text %s", v.Value, v.Value)
					}
					p.bad(v, fmt.Sprintf("%s[%d]", lp, j), "%s matches nothing: a field that is absent or null reads no value, in no list "+
						"(not_in holds for it); %s", what, advice)
					continue
				}
				if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" && field != nil && strings.HasPrefix(field.Value, "json:") {
					// A JSON boolean reads no value (field_type): not_in: [true] would hold
					// for every record, the ones holding true too.
					p.bad(v, fmt.Sprintf("%s[%d]", lp, j), "%s matches nothing on a json: field: a JSON boolean reads no value, in no list "+
						"(not_in holds for it); quote it, %q, for the string %q", v.Value, v.Value, v.Value)
					continue
				}
				if p.scalar(v, fmt.Sprintf("%s[%d]", lp, j)) {
					if v.Value == "" {
						// An empty field, header or record key reads no value either.
						p.bad(v, fmt.Sprintf("%s[%d]", lp, j), `"" matches nothing: a field, header or record key that is empty reads no value, in no list (not_in holds for it)`)
						continue
					}
					if !p.valueEdges(v, fmt.Sprintf("%s[%d]", lp, j), m.Field.Composite()) {
						continue
					}
					if m.Field.Composite() {
						// A composite field's value is its key's escaped form (docs/rules.md):
						// one the key never builds (phc_x:user:1 unescaped) would match
						// nothing, as a force entry so written would name nothing.
						if err := m.Field.CheckKey(v.Value, 0); err != nil {
							p.bad(v, fmt.Sprintf("%s[%d]", lp, j), "%v", err)
							continue
						}
					}
					m.Values = append(m.Values, v.Value)
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// either reads a scalar that is off or on, and reports whether it is on; anything else is
// a problem saying want (and reads as off).
func (p *parser) either(v *yaml.Node, path, off, on, want string) bool {
	if !p.scalar(v, path) {
		return false
	}
	switch v.Value {
	case off:
	case on:
		return true
	default:
		p.bad(v, path, "%q: want %s", v.Value, want)
	}
	return false
}

// trackUnknown reports whether track, as written, is neither of its values: a problem of
// its own, which says nothing of max_keys and on_cardinality.
func trackUnknown(v *yaml.Node) bool {
	return v != nil && (v.Kind != yaml.ScalarNode || v.Value != "all" && v.Value != "above_floor")
}

// collision is the topic that Kafka takes for rule topic t, of the rule at rule, and
// what names it (a GATE_ variable, or the rule whose topic it is): another name equal to
// t but for '.' and '_', which Kafka's names share (its metrics), so that it refuses to
// create one beside the other ("collides with existing topic"). t is recorded for the
// rules after; "" for none.
func (p *parser) collision(t, rule string) (other, of string) {
	unified := func(s string) string { return strings.ReplaceAll(s, ".", "_") }
	for _, g := range slices.Sorted(maps.Keys(p.o.Topics)) {
		if g != t && unified(g) == unified(t) {
			return g, p.o.Topics[g]
		}
	}
	if o, ok := p.topics[unified(t)]; ok {
		if o[0] != t {
			return o[0], o[1] + "'s topic"
		}
		return "", ""
	}
	if p.topics == nil {
		p.topics = map[string][2]string{}
	}
	p.topics[unified(t)] = [2]string{t, rule}
	return "", ""
}

// action reads overflow, tag, topic:NAME or drop.
func (p *parser) action(n *yaml.Node, path string) Action {
	switch v := n.Value; {
	case v == "overflow":
		return Action{Kind: Overflow}
	case v == "drop":
		return Action{Kind: Drop} // needs the outcomes unless shadow: checked with the rule
	case v == "tag":
		return Action{Kind: Tag}
	case strings.HasPrefix(v, "topic:"):
		t := strings.TrimPrefix(v, "topic:")
		if route.CheckTopic(t) != nil {
			p.bad(n, path, "%q: want topic:NAME, NAME a Kafka topic name (1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-')", v)
		} else if variable, used := p.o.Topics[t]; used {
			p.bad(n, path, "%q: %s is %s, and a rule's topic must be one of its own (for the overflow topic, action: overflow)", v, t, variable)
		} else if other, of := p.collision(t, strings.TrimSuffix(path, ".action")); other != "" {
			p.bad(n, path, "%q: %s and %s (%s) differ only in '.' and '_', which Kafka takes for one: it refuses to create either beside the other", v, t, other, of)
		}
		return Action{Kind: Topic, Topic: t}
	default:
		p.bad(n, path, "%q: want overflow, tag, topic:NAME or drop", v)
		return Action{Kind: Overflow}
	}
}
