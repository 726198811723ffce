package route

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/capturegate/gate/internal/keypart"
	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultKeyFrom is the key source used when Config.KeyFrom is the zero value.
const DefaultKeyFrom = "json:team_id"

// ErrBadKeyFrom is wrapped by every error ParseKeyFrom returns.
var ErrBadKeyFrom = errors.New("route: invalid key source")

// source says where a record's team key is read from.
type source uint8

const (
	sourceNone source = iota
	sourceJSON
	sourceHeader
	sourceKey
)

// KeyFrom says where a record's team key is read from (GATE_KEY_FROM). Its forms:
//
//   - json:FIELD reads a field of the record value, a JSON object. FIELD is a top-level
//     name or a dotted path into nested objects (json:properties.team). Only '.'
//     separates path parts; every other character, gjson's wildcards and modifiers
//     included, is taken literally. A part made of digits also indexes an array, as in
//     gjson. A field that appears more than once where it is read (FIELD itself, or a part
//     of its path in the object that holds it) makes the team ambiguous: the record is
//     dead-lettered (ambiguous_team), since gjson would read the first and most decoders
//     downstream the last. Several fields joined with '+' (json:token+distinct_id) make a
//     composite key, to limit per user within a team: their values joined with ':', each
//     with '%' written %25 and ':' written %3A, so that distinct values never make the
//     same key (see keypart.Append); a field name cannot contain '+'.
//   - header:NAME reads the value of the record header named NAME (case-sensitive, as
//     Kafka headers are); one given again with another value makes the team ambiguous
//     (ambiguous_team), the same value again is one team.
//   - key reads the record key.
//
// The zero value reads nothing; ParseKeyFrom or UnmarshalText makes a usable one.
type KeyFrom struct {
	// lax skips validating the whole JSON value when the team can be read from it (see
	// jsonTeam); set by New from Config.ValidateJSON, never parsed.
	lax    bool
	src    source
	header string       // sourceHeader: the header name
	fields []jsonField  // sourceJSON: one per '+'-separated field
	top    []memberName // sourceJSON: each field's top-level name, fields[i].names[0]
	// idx is, in a router with rules, where each field's top-level name is in the
	// router's fieldPlan (NewRules); nil otherwise.
	idx []int
}

// jsonField is one field of a json: key source.
type jsonField struct {
	name string // as written in the configuration, for messages
	// parts are the names along the path, split at '.': one for a top-level field.
	parts []string
	names []memberName // parts, as members reads them
	// path is the gjson path, each part escaped to match literally: how the field was read
	// before the gate read fields itself (see members), kept to compare with in tests.
	path string
}

// ParseKeyFrom reads a key source: json:FIELD[+FIELD...], header:NAME or key.
func ParseKeyFrom(s string) (KeyFrom, error) {
	kind, arg, hasArg := strings.Cut(s, ":")
	switch {
	case kind == "key" && !hasArg:
		return KeyFrom{src: sourceKey}, nil
	case kind == "key":
		return KeyFrom{}, fmt.Errorf("%w %q: source key takes no argument (want key)", ErrBadKeyFrom, s)
	case kind == "header" && hasArg:
		if arg == "" {
			return KeyFrom{}, fmt.Errorf("%w %q: empty header name (want header:NAME)", ErrBadKeyFrom, s)
		}
		// As a json: field's: "header:ip " (a copy-pasted non-breaking space, a YAML block
		// scalar's line break) names a header no producer sends, every record missing its
		// key (dead-lettered, header_missing) without a word at start.
		if e := atEdges(arg); e != "" {
			return KeyFrom{}, fmt.Errorf("%w %q: header name %q starts or ends with %s", ErrBadKeyFrom, s, arg, e)
		}
		if inner, ok := inQuotes(arg); ok {
			return KeyFrom{}, fmt.Errorf("%w %q: header name %q is in quotes, which would be part of the name: write %s", ErrBadKeyFrom, s, arg, inner)
		}
		return KeyFrom{src: sourceHeader, header: arg}, nil
	case kind == "json" && hasArg:
		fields, err := parseFields(arg)
		if err != nil {
			return KeyFrom{}, fmt.Errorf("%w %q: %w", ErrBadKeyFrom, s, err)
		}
		top := make([]memberName, len(fields))
		for i, f := range fields {
			top[i] = f.names[0]
		}
		return KeyFrom{src: sourceJSON, fields: fields, top: top}, nil
	case (kind == "header" || kind == "json") && !hasArg:
		return KeyFrom{}, fmt.Errorf("%w %q: source %s needs an argument (want json:FIELD, header:NAME or key)",
			ErrBadKeyFrom, s, kind)
	}
	return KeyFrom{}, fmt.Errorf("%w %q: unknown source %q (want json:FIELD, header:NAME or key)", ErrBadKeyFrom, s, kind)
}

// atEdges is what a field or header name starts or ends with that no name sent has there:
// "a space" (unicode.IsSpace: a non-breaking one too, a line break), or "an invisible
// character (U+200B)" (a format character, category Cf: a zero-width space, a word joiner,
// a byte order mark, copied with the name from a page or a chat); "" for neither.
func atEdges(name string) string {
	if strings.TrimSpace(name) != name {
		return "a space"
	}
	first, _ := utf8.DecodeRuneInString(name)
	last, _ := utf8.DecodeLastRuneInString(name)
	for _, r := range []rune{first, last} {
		if unicode.Is(unicode.Cf, r) {
			return fmt.Sprintf("an invisible character (U+%04X)", r)
		}
	}
	return ""
}

// inQuotes reports whether name is wrapped in a pair of double or single quotes, and
// what is inside them.
func inQuotes(name string) (string, bool) {
	if len(name) >= 2 && (name[0] == '"' || name[0] == '\'') && name[len(name)-1] == name[0] {
		return name[1 : len(name)-1], true
	}
	return "", false
}

// parseFields reads the FIELD[+FIELD...] list of a json: source.
func parseFields(list string) ([]jsonField, error) {
	if list == "" {
		return nil, errors.New("empty field (want json:FIELD)")
	}
	names := strings.Split(list, "+")
	fields := make([]jsonField, 0, len(names))
	for i, name := range names {
		if name == "" {
			return nil, fmt.Errorf("field %d of %d is empty (fields are joined with +)", i+1, len(names))
		}
		// json:team_id+header:ip would read a member named "header:ip", which no record
		// has: every record missing its key (dead-lettered), without a word at start. A
		// composite key joins JSON fields only.
		if src, _, ok := strings.Cut(name, ":"); ok && i > 0 && (src == "header" || src == "json") {
			return nil, fmt.Errorf("field %q names a source of its own: a composite key joins fields of one JSON value (json:A+B), never a header or another source", name)
		}
		// json:"team_id", quoted as JSON writes a member's name: the quotes would be part
		// of it, a member no record has (every record missing its key, without a word).
		if inner, ok := inQuotes(name); ok {
			return nil, fmt.Errorf("field %q is in quotes, which would be part of the name: write %s", name, inner)
		}
		parts := strings.Split(name, ".")
		escaped := make([]string, len(parts))
		members := make([]memberName, len(parts))
		for j, p := range parts {
			if p == "" {
				return nil, fmt.Errorf("field %q: path part %d of %d is empty (parts are joined with .)", name, j+1, len(parts))
			}
			// json:team_id + distinct_id would read "team_id " and " distinct_id", members
			// no record has: every record missing its key, without a word at start.
			if e := atEdges(p); e != "" {
				if p != name {
					return nil, fmt.Errorf("field %q: path part %q starts or ends with %s (parts are joined with . alone)", name, p, e)
				}
				return nil, fmt.Errorf("field %q starts or ends with %s (fields are joined with + alone: json:team_id+distinct_id)", name, e)
			}
			// gjson.Escape backslash-escapes every character gjson would read as syntax
			// (* ? | # @ ! [ { = < > …), so a field name means itself and nothing else.
			escaped[j] = gjson.Escape(p)
			members[j] = newMemberName(p)
		}
		fields = append(fields, jsonField{name: name, parts: parts, names: members, path: strings.Join(escaped, ".")})
	}
	return fields, nil
}

// UnmarshalText lets configuration decoders read a KeyFrom.
func (k *KeyFrom) UnmarshalText(b []byte) error {
	v, err := ParseKeyFrom(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// MarshalText writes the KeyFrom as ParseKeyFrom reads it.
func (k KeyFrom) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// String returns the key source as ParseKeyFrom reads it, or "" for the zero value.
func (k KeyFrom) String() string {
	switch k.src {
	case sourceKey:
		return "key"
	case sourceHeader:
		return "header:" + k.header
	case sourceJSON:
		var b strings.Builder
		b.WriteString("json:")
		for i, f := range k.fields {
			if i > 0 {
				b.WriteByte('+')
			}
			b.WriteString(f.name)
		}
		return b.String()
	}
	return ""
}

// Composite reports whether the key joins several fields (json:team_id+distinct_id): a
// key within a team, whose cardinality no operator bounds.
func (k KeyFrom) Composite() bool { return len(k.fields) > 1 }

// Members are the sources k's key is made of: each field of a json: key as a json: source
// of its own, in k's order; a header: or key source is its own one member. Two records
// with the same key under k have the same value under each member.
func (k KeyFrom) Members() []KeyFrom {
	if k.src != sourceJSON {
		return []KeyFrom{{src: k.src, header: k.header}}
	}
	out := make([]KeyFrom, len(k.fields))
	for i, f := range k.fields {
		out[i] = KeyFrom{src: sourceJSON, fields: []jsonField{f}, top: []memberName{f.names[0]}}
	}
	return out
}

// Peek reads rec's key under k as a router without JSON validation reads it, for a caller
// that only needs to tell records apart by it: wherever any router reads a key of which
// k is a member (Members) from rec, Peek reads the same value of k (a router with
// GATE_VALIDATE_JSON only dead-letters more). ok is false where no key of k can be
// read, and then no router reads one either. The value aliases rec or s.
func (k KeyFrom) Peek(rec *kgo.Record, s *Scratch) (v string, ok bool) {
	k.lax = true
	v, code := k.team(rec, s, math.MaxInt)
	return v, code == reasonNone
}

// IsZero reports whether k is the zero value, which reads nothing.
func (k KeyFrom) IsZero() bool { return k.src == sourceNone }

// failure says why no team key could be read from a record. Its zero value (no reason)
// means the read succeeded. The detail sentence is built from it only when a record is
// dead-lettered.
type failure struct {
	reason reasonCode
	field  int // the json field that failed, an index into KeyFrom.fields
	// not_json: what the value is; field_type: what the field holds; ambiguous_team: the
	// part of the field's path that appears more than once.
	what string
	size int // key_too_long: the key's length in bytes (a lower bound for a composite key)
}

// fail keeps f's details in s, for the dead letter, and returns its reason. The reading
// functions return only the reason: returning the details, a 40-byte struct, through
// every level made each successful read pay for copying it (a third of BenchmarkTeam's
// 185 ns on a 200-byte event).
func (s *Scratch) fail(f failure) reasonCode {
	s.why = f
	return f.reason
}

// team reads rec's team key. The string returned aliases rec (its value, key or a header)
// or, for a composite key, the scratch buffer; it is valid until either changes. Keys
// longer than maxKey bytes fail with key_too_long. On failure, s.why says why.
func (k *KeyFrom) team(rec *kgo.Record, s *Scratch, maxKey int) (string, reasonCode) {
	var team string
	switch k.src {
	case sourceJSON:
		var code reasonCode
		team, code = k.jsonTeam(rec.Value, s, maxKey)
		if code != reasonNone {
			return "", code
		}
	case sourceHeader:
		found := false
		for i := range rec.Headers {
			if rec.Headers[i].Key != k.header {
				continue
			}
			if !found {
				team, found = bytesString(rec.Headers[i].Value), true
				continue
			}
			// The header given again, with another value: Kafka's Java clients read the
			// last (Headers.lastHeader), this the first, and two teams would be read from
			// one record, as from a JSON field given twice (a review). The same value
			// again is one team.
			if string(rec.Headers[i].Value) != team {
				return "", s.fail(failure{reason: reasonAmbiguousTeam, what: k.header})
			}
		}
		if !found {
			return "", s.fail(failure{reason: reasonHeaderMissing})
		}
		if team == "" {
			return "", s.fail(failure{reason: reasonFieldEmpty})
		}
	case sourceKey:
		if len(rec.Key) == 0 {
			return "", s.fail(failure{reason: reasonKeyMissing})
		}
		team = bytesString(rec.Key)
	default:
		// Unreachable through New, which never keeps a zero KeyFrom.
		return "", s.fail(failure{reason: reasonFieldMissing})
	}
	if len(team) > maxKey {
		return "", s.fail(failure{reason: reasonKeyTooLong, size: len(team)})
	}
	return team, reasonNone
}

// jsonTeam reads the team key from a JSON object value.
//
// With Config.ValidateJSON (GATE_VALIDATE_JSON=true) the whole value is validated with
// gjson.Valid before any field is read: a truncated or corrupt event whose team field
// happens to be readable is dead-lettered (not_json), not passed on. The gate is the last place that can stop such garbage before every
// downstream consumer has to cope with it. Validation runs at 0.7-1.1 GB/s and allocates
// nothing (BenchmarkValidate, on a 2-core Xeon): about +1 µs for a 1 KB event and
// +60-100 ns for a 50-byte one. That is more than Route's own cost when the team field
// comes last (reading the team then skips the whole value too, at 1.5-3 GB/s: BenchmarkTeam). It is off by
// default: the gate's job is to read the team, downstream decoders check syntax anyway,
// and through the whole gate validation cost about a tenth of the throughput
// (BenchmarkEndToEnd). Off, a value whose team cannot be read is still classified
// (not_json or the field's failure) by validating it then: only bad records pay.
//
// Off, reading the team still reads the object's members to its closing brace, and those
// of each object on a dotted field's path (members), since a field can only be known to
// appear once by reading them all; on a value valid as JSON the answer is the same as with
// validation (FuzzTeam). An object that breaks off before its end is read as far as it
// goes (see jsonFields). Nested values off the path are skipped by their brackets; past
// the object's closing brace only white space may follow (moreAfter), and what the key is
// read from must be JSON (jsonNumber, jsonString).
//
// gjson.Valid checks JSON syntax, not UTF-8: invalid UTF-8 inside a string is accepted, as
// encoding/json.Valid accepts it, and a team key holding it is routed like any other (a
// key is bytes to the limiter). Checking UTF-8 would be another pass over the value for a
// fault downstream decoders already handle, usually by substituting U+FFFD.
func (k *KeyFrom) jsonTeam(v []byte, s *Scratch, maxKey int) (string, reasonCode) {
	js, code := jsonObject(v, !k.lax, s)
	if code != reasonNone {
		return "", code
	}
	team, code := k.jsonFields(js, s, maxKey)
	if k.lax && code != reasonNone && code != reasonKeyTooLong && code != reasonNotJSON && !gjson.Valid(js) {
		// Without validation, the value is checked only where reading the team failed,
		// to tell not_json from a missing or ambiguous field: bad records pay, good ones
		// do not.
		return "", s.fail(malformed())
	}
	return team, code
}

// jsonObject is v as a string if it is a JSON object, valid JSON as a whole when
// validate is set; without, only its first byte that is not white space is looked at
// (the rest is read as far as it goes by whoever reads its fields). Both the team key
// and the rules' fields are read through it. The usual event, starting with '{' and
// too short to nest too deep, takes the inlined test alone.
func jsonObject(v []byte, validate bool, s *Scratch) (string, reasonCode) {
	if !validate && len(v) > 0 && len(v) <= maxDepth && v[0] == '{' {
		return bytesString(v), reasonNone
	}
	return checkObject(v, validate, s)
}

// checkObject is jsonObject's whole check.
func checkObject(v []byte, validate bool, s *Scratch) (string, reasonCode) {
	if len(v) == 0 {
		return "", s.fail(failure{reason: reasonNotJSON, what: "value is empty"})
	}
	if tooDeep(v) {
		return "", s.fail(failure{reason: reasonNotJSON, what: fmt.Sprintf("value nests deeper than %d levels", maxDepth)})
	}
	if bytes.HasPrefix(v, []byte("\xEF\xBB\xBF")) {
		// Said as such: "not valid JSON" alone sent the operator looking for a fault
		// that no viewer shows (a review). JSON text must not start with one (RFC 8259).
		return "", s.fail(failure{reason: reasonNotJSON, what: "value starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not: remove it where the events are written"})
	}
	js := bytesString(v)
	if validate && !gjson.Valid(js) {
		return "", s.fail(malformed())
	}
	if i := firstNonSpace(js); i >= len(js) || js[i] != '{' {
		return "", s.fail(notObject(js))
	}
	return js, reasonNone
}

// notObject is the failure for a value that does not start as a JSON object.
func notObject(js string) failure {
	if !gjson.Valid(js) {
		return failure{reason: reasonNotJSON, what: "value is not valid JSON"}
	}
	return failure{reason: reasonNotJSON, what: "value is " + jsonKind(gjson.Parse(js)) + ", not a JSON object"}
}

// moreAfter reports whether js holds more than white space after its object, which
// members walked to its end (end, just past the closing brace; not where it stopped
// early, at a value, nor malformed): several events in one record, as a proxy batching
// them line by line writes it. Read without validation, the record was counted once,
// under the first event's team, the others' teams uncounted (a review); validated, it is
// not JSON.
func moreAfter(js string, end int) bool {
	return end > 0 && js[end-1] == '}' && skipSpace(js, end) < len(js)
}

// severalValues is the failure for a value that holds more after its object (moreAfter).
func severalValues() failure {
	return failure{reason: reasonNotJSON, what: "value is not valid JSON: more follows its object (several events in one record?)"}
}

// malformed is the failure for a value the scanner could not read: only an invalid one.
func malformed() failure { return failure{reason: reasonNotJSON, what: "value is not valid JSON"} }

// jsonFields reads the key's fields from the JSON object js.
//
// One pass over the object's members (members) finds each field's top-level name and
// whether it appears more than once; a dotted field then reads each object on its path the
// same way. The pass must go to the object's end, wherever the field is, to know it is
// there only once: for a team field that comes last, as it usually does, that is what
// finding it cost anyway.
//
// Without validation (lax), an object that breaks off (cut short, or not JSON between two
// members) is read as far as it goes: a field found there once gives the team, as before
// duplicates were looked for, and one found twice is ambiguous. No JSON decoder reads a
// team from such a value at all, so none can read another one.
func (k *KeyFrom) jsonFields(js string, s *Scratch, maxKey int) (string, reasonCode) {
	start := firstNonSpace(js)
	var one [1]int
	at := one[:]
	if len(k.fields) > 1 {
		s.at = append(s.at[:0], make([]int, len(k.fields))...)
		at = s.at
	}
	var ahead *touchAhead
	if s.ahead.s = s; s.ahead.on() && len(k.fields) == 1 && len(k.fields[0].parts) == 1 {
		ahead = &s.ahead
		ahead.ok = false
	}
	end := members(js, start, k.top, at, nil, ahead)
	if end < 0 && !k.lax {
		return "", s.fail(malformed()) // not reached: the value is valid JSON
	}
	if k.lax && moreAfter(js, end) {
		return "", s.fail(severalValues())
	}
	if len(k.fields) == 1 {
		if ahead != nil && ahead.ok && ahead.at == at[0] {
			return ahead.v, reasonNone // read for the touch, and found alone
		}
		return k.fieldValue(js, 0, at[0], 0, s)
	}
	return k.joinFields(js, at, false, s, maxKey)
}

// joinFields reads a composite key's fields, field i's top-level member being at at[i] as
// members found it, or, shared, as the rules' shared pass found it (sharedValue: at
// at[k.idx[i]], a field another rule read already taken as read), and joins them in the
// scratch buffer, so it costs no allocation once the buffer has grown to fit.
//
// Every field is read before the key is judged, so that the order the key names them in
// does not matter: a field there but unusable (an object, an array, a boolean, ambiguous)
// is the record's fault, dead-lettered, even when another field is missing; else a missing
// (or empty) field makes the key missing, which a rule's missing: skip applies to; only
// then is a key too long key_too_long. Of several of a kind, the first named is reported.
func (k *KeyFrom) joinFields(js string, at []int, shared bool, s *Scratch, maxKey int) (string, reasonCode) {
	buf := s.key[:0]
	long := 0        // once the key is too long: its size when found so, a lower bound
	var miss failure // the first field missing, if any
	for i := range k.fields {
		var val string
		var code reasonCode
		if shared {
			val, code = k.sharedValue(js, i, at, s)
		} else {
			val, code = k.fieldValue(js, i, at[i], 0, s)
		}
		if code != reasonNone {
			if !missingKey(code) {
				s.key = buf
				return "", code // s.why is this field's
			}
			if miss.reason == reasonNone {
				miss = s.why
			}
			continue
		}
		if long > 0 || miss.reason != reasonNone {
			continue // only read, for a failure of its own
		}
		if i > 0 {
			buf = append(buf, ':')
		}
		if len(buf)+len(val) > maxKey {
			// Copy no huge field into the buffer: size is a lower bound.
			long = len(buf) + len(val)
			continue
		}
		buf = keypart.Append(buf, val)
		if len(buf) > maxKey {
			long = len(buf)
		}
	}
	s.key = buf
	if miss.reason != reasonNone {
		return "", s.fail(miss)
	}
	if long > 0 {
		return "", s.fail(failure{reason: reasonKeyTooLong, size: long})
	}
	return bytesString(buf), reasonNone
}

// CheckKey reports whether key can be a key k reads, for the places an operator writes
// one (a rule's force list): a composite key must be escaped as keypart.Append writes it,
// one ':' between each two fields, a value's ':' as %3A and '%' as %25. Written unescaped,
// it would name nothing the rule ever counts, silently. The error shows the key escaped
// where that can be told: each '%' that is no escape written %25, and, for a key of too
// many parts, each way (up to 4) of joining them into as many values as k has fields.
// A key longer than maxKey bytes (GATE_MAX_KEY_BYTES; no bound if maxKey <= 0) is refused
// too: a record with that key is dead-lettered (key_too_long), never counted under it.
func (k KeyFrom) CheckKey(key string, maxKey int) error {
	if key == "" {
		return errors.New("an empty key")
	}
	if maxKey > 0 && len(key) > maxKey {
		return fmt.Errorf("a key of %d bytes is longer than the %d bytes of GATE_MAX_KEY_BYTES: records with it are dead-lettered (key_too_long), never counted under it", len(key), maxKey)
	}
	if !k.Composite() {
		return nil
	}
	parts := strings.Split(key, ":")
	want := fmt.Sprintf("a key of %s is its %d values joined with ':', each value's ':' written %%3A and '%%' %%25 (%s)", k, len(k.fields), k.keyExample())
	if len(parts) != len(k.fields) {
		return fmt.Errorf("%q has %d parts%s: %s", key, len(parts), escapedForms(parts, len(k.fields)), want)
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("%q has an empty value: %s", key, want)
		}
	}
	for _, p := range parts {
		if i := badPercent(p); i >= 0 {
			if strings.HasPrefix(p[i+1:], "3a") {
				return fmt.Errorf("%q holds %%3a, which the gate never writes (a value's ':' is %%3A): %s", key, want)
			}
			esc := make([]string, len(parts))
			for j, p := range parts {
				esc[j] = escapePercents(p)
			}
			return fmt.Errorf("%q holds a '%%' not written %%25 (escaped: %q): %s", key, strings.Join(esc, ":"), want)
		}
	}
	return nil
}

// keyExample is an example of a composite key of k's, its fields named as k names them,
// the last value holding a ':' (team_id 42 and distinct_id user:1: 42:user%3A1): an
// example of fields the operator's key does not have (token, distinct_id) had them look
// for what token is.
func (k KeyFrom) keyExample() string {
	vals := make([]string, len(k.fields))
	var b strings.Builder
	for i, f := range k.fields {
		vals[i] = strconv.Itoa(42 + i)
		if i == len(k.fields)-1 {
			vals[i] = "user:1"
		}
		if i > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(f.name + " " + vals[i])
	}
	b.WriteString(": ")
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(keypart.Escape(v))
	}
	return b.String()
}

// badPercent is the index of the first '%' of a composite key's part that is neither %25
// nor %3A, or -1.
func badPercent(p string) int {
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && !strings.HasPrefix(p[i+1:], "25") && !strings.HasPrefix(p[i+1:], "3A") {
			return i
		}
	}
	return -1
}

// escapePercents is p with each '%' that is no escape (badPercent) written %25.
func escapePercents(p string) string {
	var b strings.Builder
	for i := badPercent(p); i >= 0; i = badPercent(p) {
		b.WriteString(p[:i])
		b.WriteString("%25")
		p = p[i+1:]
	}
	b.WriteString(p)
	return b.String()
}

// escapedForms, for a composite key of n fields written as the parts split at ':', more
// parts than n, is ", escaped: K1 or K2 ..." listing each key that joins them into n
// non-empty values (a ':' inside a value written %3A), or "" when there are none or more
// than 4.
func escapedForms(parts []string, n int) string {
	if len(parts) <= n {
		return ""
	}
	var keys []string
	var walk func(from int, vals []string) bool
	walk = func(from int, vals []string) bool {
		if len(vals) == n-1 { // the last value takes the rest
			last := strings.Join(parts[from:], "%3A")
			if last == "" {
				return true
			}
			if len(keys) == 4 {
				return false
			}
			keys = append(keys, strings.Join(append(vals, last), ":"))
			return true
		}
		for to := from + 1; len(parts)-to >= n-1-len(vals); to++ {
			v := strings.Join(parts[from:to], "%3A")
			if v == "" {
				continue
			}
			if !walk(to, append(vals[:len(vals):len(vals)], v)) {
				return false
			}
		}
		return true
	}
	for i, p := range parts {
		parts[i] = escapePercents(p)
	}
	if !walk(0, nil) || len(keys) == 0 {
		return ""
	}
	for i, key := range keys {
		keys[i] = strconv.Quote(key)
	}
	return ", escaped: " + strings.Join(keys, " or ")
}

// fieldValue reads field number i of the JSON object js, whose top-level member is at
// index at as members found it (0: absent, -1: more than once), its value ending at end
// when members walked past it (0: not known, found again here). A string gives its
// unescaped value (aliasing js unless it held escapes); a number gives its text as written
// ({"team_id": 42} gives "42"; 42.0 would give "42.0"). Null counts as missing: producers
// write null for a field they do not have. Booleans, objects and arrays are of the wrong
// type. These are gjson.Get's readings, which the gate used before it read fields itself,
// but for a string's escapes, decoded as encoding/json decodes them (unescape): gjson
// swallowed the escape after a lone surrogate, and two teams shared a key.
func (k *KeyFrom) fieldValue(js string, i, at, end int, s *Scratch) (string, reasonCode) {
	parts := k.fields[i].parts
	for p := 1; ; p++ {
		switch at {
		case 0:
			return "", s.fail(failure{reason: reasonFieldMissing, field: i})
		case -1:
			return "", s.fail(failure{reason: reasonAmbiguousTeam, field: i, what: parts[p-1]})
		}
		if p == len(parts) {
			break
		}
		// Go down to the next part: a member of an object, or an element of an array when
		// the part is an index. Anything else has no such field.
		switch js[at] {
		case '{':
			var next [1]int
			if members(js, at, k.fields[i].names[p:p+1], next[:], nil, nil) < 0 && !k.lax {
				return "", s.fail(malformed()) // not reached: the value is valid JSON
			}
			at = next[0]
		case '[':
			n, ok := arrayIndex(parts[p])
			if !ok {
				return "", s.fail(failure{reason: reasonFieldMissing, field: i})
			}
			if at = element(js, at, n); at < 0 {
				return "", s.fail(malformed())
			}
		default:
			return "", s.fail(failure{reason: reasonFieldMissing, field: i})
		}
	}
	if len(parts) > 1 || end <= at {
		if end = skipValue(js, at); end < 0 {
			return "", s.fail(malformed())
		}
	}
	raw := js[at:end]
	switch raw[0] {
	case '"':
		str := raw[1 : len(raw)-1]
		if k.lax && !jsonString(str) {
			return "", s.fail(malformed()) // validated, it is not JSON
		}
		if strings.IndexByte(str, '\\') >= 0 {
			var ok bool
			if str, ok = unescape(str); !ok { // into a new string: one allocation
				return "", s.fail(malformed()) // an escape that is none: only when lax
			}
		}
		if str == "" {
			return "", s.fail(failure{reason: reasonFieldEmpty, field: i})
		}
		return str, reasonNone
	case 'n':
		return "", s.fail(failure{reason: reasonFieldMissing, field: i})
	case 't', 'f':
		return "", s.fail(failure{reason: reasonFieldType, field: i, what: "a boolean"})
	case '{':
		return "", s.fail(failure{reason: reasonFieldType, field: i, what: "an object"})
	case '[':
		return "", s.fail(failure{reason: reasonFieldType, field: i, what: "an array"})
	}
	if !numberWhole(js, end) || k.lax && !jsonNumber(raw) {
		return "", s.fail(malformed()) // only without validation: valid JSON has one whole
	}
	return raw, reasonNone // a number
}

// numberWhole reports whether the number that ends at js[end] is whole: what follows it,
// past white space, ends a member or an element (',', '}' or ']'). Without validation a
// number is read by its characters (numberEnd), and one run into other bytes, an id
// written without its quotes (123e4567-e89b-…, 12abc), would be read up to the first
// byte no number holds, two ids sharing that much one team; one at the value's end may
// have been cut off inside it. Neither is read as a team.
func numberWhole(js string, end int) bool {
	i := skipSpace(js, end)
	return i < len(js) && (js[i] == ',' || js[i] == '}' || js[i] == ']')
}

// jsonKind names the type of a JSON value, for messages.
func jsonKind(r gjson.Result) string {
	switch {
	case r.IsObject():
		return "an object"
	case r.IsArray():
		return "an array"
	case r.IsBool():
		return "a boolean"
	case r.Type == gjson.String:
		return "a string"
	case r.Type == gjson.Number:
		return "a number"
	}
	return "null"
}

// detail is the short sentence put in a dead-lettered record's gate-error-detail header.
func (k *KeyFrom) detail(f failure, maxKey int) string {
	field := func() string {
		if k.src == sourceJSON && f.field < len(k.fields) {
			return k.fields[f.field].name
		}
		return ""
	}
	switch f.reason {
	case reasonNotJSON:
		return f.what
	case reasonFieldMissing:
		return fmt.Sprintf("json field %q not found or null", field())
	case reasonFieldEmpty:
		if k.src == sourceHeader {
			return fmt.Sprintf("header %q is empty", k.header)
		}
		return fmt.Sprintf("json field %q is an empty string", field())
	case reasonFieldType:
		return fmt.Sprintf("json field %q is %s, want a string or a number", field(), f.what)
	case reasonKeyTooLong:
		return fmt.Sprintf("team key is longer than the %d bytes allowed (%d bytes or more)", maxKey, f.size)
	case reasonAmbiguousTeam:
		if k.src == sourceHeader {
			return fmt.Sprintf("header %q appears more than once, with different values", k.header)
		}
		if name := field(); name != f.what {
			return fmt.Sprintf("json field %q is ambiguous: %q appears more than once in its object", name, f.what)
		}
		return fmt.Sprintf("json field %q appears more than once", field())
	case reasonHeaderMissing:
		return fmt.Sprintf("header %q not found", k.header)
	case reasonKeyMissing:
		return "record key is empty"
	}
	return f.reason.String()
}

// maxDepth is the deepest nesting of arrays and objects routed; a deeper value is not_json.
// gjson.Valid recurses once per level, with about 128 bytes of stack each: without a limit
// a 1 MB value of '[' takes 128 MB of stack, and an 8 MB one exceeds Go's 1 GB stack limit,
// a fatal error that no recover catches. 10,000 is encoding/json's own limit, so whatever
// the gate routes, Go decoders downstream can read; it costs at most ~1.3 MB of stack.
const maxDepth = 10_000

// tooDeep reports whether the JSON value v nests deeper than maxDepth. A value too short to
// be that deep costs nothing, and one with few brackets costs two vectorised byte counts;
// only a value with more than maxDepth brackets is scanned, string-aware. On invalid JSON
// the scan can only overestimate the depth gjson.Valid would reach before failing, since
// both read the same valid prefix the same way and gjson stops at its end.
func tooDeep(v []byte) bool {
	if len(v) <= maxDepth || bytes.Count(v, []byte{'{'})+bytes.Count(v, []byte{'['}) <= maxDepth {
		return false
	}
	depth, inString := 0, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxDepth {
				return true
			}
		case '}', ']':
			depth = max(depth-1, 0)
		}
	}
	return false
}

// bytesString views b as a string without copying. The string aliases b: it must not
// outlive b's contents, which the gate never modifies.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

func firstNonSpace(s string) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return 0
}
