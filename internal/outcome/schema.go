package outcome

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// SchemaVersion is Row.Schema. It changes only when a field changes meaning or goes; a
// new field is added without a change, so a reader ignores fields it does not know
// (TestSchemaGolden keeps the encoding as documented in docs/outcomes.md).
const SchemaVersion = 1

// Row is one outcomes record's value, JSON-encoded (AppendJSON): a count of records of
// one key that met one outcome, for one reason, under one rule, within one interval,
// from one seal. The record's Kafka key is Team, so a team's rows stay in order on one
// partition of the outcomes topic.
//
// JSON rather than a binary encoding: rows are few next to the events (one per key and
// seal), and support reads them with kcat and jq; every field is flat and named.
type Row struct {
	Schema int `json:"schema"`
	// ID names the seal that wrote the row: GATE/START-RANDOM/SEQ, the gate, when its
	// consumer started (Unix ms) with a random suffix, and the seal's number. The seal's
	// SealInfo record says which input offsets its rows count. (ID, IntervalStart, Team,
	// Key, Rule, Outcome, Reason, Folded) is unique to a row: a reader that sees it twice
	// drops the second. Team is part of it: a key of no team is another row than a
	// team's of the same bytes (a user id "42" and team 42).
	ID            string    `json:"id"`
	Gate          string    `json:"gate"`
	IntervalStart time.Time `json:"interval_start"`
	IntervalEnd   time.Time `json:"interval_end"`
	// Team is Key's team: Key for a key of one field, a composite key's first field.
	Team string `json:"team"`
	// Key is the key the rule counted by; for accepted rows (no rule acted) the team, and
	// for the new keys of a kept team once the row budget was spent (Agg.Record). Empty
	// for a record no key could be read from, and in a folded row.
	Key string `json:"key"`
	// Rule is the rule whose action the record got (a named rule of the rules file),
	// or the shadow rule over it; empty without a rules file and for accepted rows.
	Rule string `json:"rule"`
	// Outcome is accepted, overflow, tagged, topic:NAME, dead_letter, shadow_over or
	// dropped.
	Outcome string `json:"outcome"`
	// Reason is the gate's reason: allowed, dry_run, rate_limited, forced,
	// key_cardinality, tagged, dropped, undeliverable or a dead letter's (not_json,
	// field_missing, ..., rejected).
	Reason  string `json:"reason"`
	Records int64  `json:"records"`
	Bytes   int64  `json:"bytes"`
	// Threshold is the key's threshold per window under Rule (or the first rule
	// checked) when the row's first record was routed; ThresholdSource is where it came
	// from: static, override, learned or forced. 0 and "" where no key was read.
	Threshold       int64  `json:"threshold"`
	ThresholdSource string `json:"threshold_source"`
	// Folded marks the row of keys summed once the gate's row budget was spent
	// (GATE_OUTCOMES_MAX_ROWS): Key and Team are empty.
	Folded bool `json:"folded,omitempty"`
}

// SealInfo is the record a seal writes beside its rows, keyed by the gate: which input
// offsets the rows of ID count. Two seals whose sources overlap counted the same records
// twice (at-least-once: records routed again after a crash or a lost partition).
type SealInfo struct {
	Schema  int      `json:"schema"`
	Seal    string   `json:"seal"` // the rows' ID
	Gate    string   `json:"gate"`
	Rows    int      `json:"rows"`
	Sources []Source `json:"sources"`
}

// Source is an input range a seal covers.
type Source struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	FirstOffset int64  `json:"first_offset"`
	LastOffset  int64  `json:"last_offset"`
}

// AppendJSON appends r's encoding to b: the fields in the order above, as encoding/json
// would write them (TestAppendJSONIsEncodingJSON), without its reflection, as a gate
// writes a row for every key of every seal.
func AppendJSON(b []byte, r *Row) []byte {
	return appendRest(appendPrefix(b, r), r)
}

// AppendRowsJSON appends the rows' encodings to b one after another, each as AppendJSON
// writes it, and each one's end in b to ends. A seal's rows share their schema, id and
// gate and, nearly all, their interval: the encoding of those, everything before
// "team", is made once for the rows in a row that share it and copied, where encoding it
// for each row cost as much as the rest of the row.
func AppendRowsJSON(b []byte, rows []Row, ends []int) ([]byte, []int) {
	var pre []byte
	for i := range rows {
		r := &rows[i]
		if i == 0 || !samePrefix(r, &rows[i-1]) {
			pre = appendPrefix(pre[:0], r)
		}
		b = appendRest(append(b, pre...), r)
		ends = append(ends, len(b))
	}
	return b, ends
}

// samePrefix reports whether r and p encode alike up to their team (appendPrefix): the
// times compared with ==, as a zone of its own writes an instant otherwise.
func samePrefix(r, p *Row) bool {
	return r.Schema == p.Schema && r.ID == p.ID && r.Gate == p.Gate &&
		r.IntervalStart == p.IntervalStart && r.IntervalEnd == p.IntervalEnd
}

// appendPrefix appends r's encoding up to its team: its fields that a seal's rows share.
func appendPrefix(b []byte, r *Row) []byte {
	b = append(b, `{"schema":`...)
	b = strconv.AppendInt(b, int64(r.Schema), 10)
	b = appendField(b, "id", r.ID)
	b = appendField(b, "gate", r.Gate)
	b = append(b, `,"interval_start":"`...)
	b = r.IntervalStart.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","interval_end":"`...)
	b = r.IntervalEnd.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendRest appends r's encoding from its team on.
func appendRest(b []byte, r *Row) []byte {
	b = appendField(b, "team", r.Team)
	b = appendField(b, "key", r.Key)
	b = appendField(b, "rule", r.Rule)
	b = appendField(b, "outcome", r.Outcome)
	b = appendField(b, "reason", r.Reason)
	b = append(b, `,"records":`...)
	b = strconv.AppendInt(b, r.Records, 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, r.Bytes, 10)
	b = append(b, `,"threshold":`...)
	b = strconv.AppendInt(b, r.Threshold, 10)
	b = appendField(b, "threshold_source", r.ThresholdSource)
	if r.Folded {
		b = append(b, `,"folded":true`...)
	}
	return append(b, '}')
}

// appendField appends ,"name":"v", v escaped as encoding/json escapes it.
func appendField(b []byte, name, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

// appendString appends v as a JSON string: encoding/json's escaping (HTML characters
// as \u003c and so on, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped).
func appendString(b []byte, v string) []byte {
	plain := true
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, v...)
		return append(b, '"')
	}
	js, _ := json.Marshal(v) // a string always encodes
	return append(b, js...)
}

// AppendSealJSON appends s's encoding to b.
func AppendSealJSON(b []byte, s *SealInfo) []byte {
	js, _ := json.Marshal(s) // plain fields: always encodes
	return append(b, js...)
}

// ErrSealRecord is Decode's error for a seal's SealInfo record: not a row.
var ErrSealRecord = errors.New("a seal record, not a row")

// ErrNewerSchema is Decode's error for a row of a schema newer than SchemaVersion: written
// by a newer gate, which a reader of this version must not misread; its Row has Schema.
var ErrNewerSchema = errors.New("a row of a newer schema")

// Decode reads one row, refusing a schema it does not know; a SealInfo record gives
// ErrSealRecord, of any schema: a newer gate's seal record is not a row a reader misses.
func Decode(b []byte) (Row, error) {
	var r struct {
		Row
		Seal string `json:"seal"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		// A newer schema may change a field's type: its rows fail to decode as this
		// one's, yet are a newer gate's rows, or seal records, not garbage.
		var v struct {
			Schema int    `json:"schema"`
			Seal   string `json:"seal"`
		}
		if json.Unmarshal(b, &v) == nil {
			switch {
			case v.Seal != "":
				return Row{Schema: v.Schema}, ErrSealRecord
			case v.Schema > SchemaVersion:
				return Row{Schema: v.Schema}, fmt.Errorf("%w: decoding an outcome row: schema %d, this gate reads %d: %w", ErrNewerSchema, v.Schema, SchemaVersion, err)
			}
		}
		return r.Row, fmt.Errorf("decoding an outcome row: %w", err)
	}
	if r.Seal != "" {
		return r.Row, ErrSealRecord
	}
	if r.Schema != SchemaVersion {
		err := fmt.Errorf("decoding an outcome row: schema %d, this gate reads %d", r.Schema, SchemaVersion)
		if r.Schema > SchemaVersion {
			err = fmt.Errorf("%w: %w", ErrNewerSchema, err)
		}
		return r.Row, err
	}
	return r.Row, nil
}

// MergeAsEncoded merges the rows that encode as one row would and returns rows: keys
// that differ only in bytes that are not UTF-8, which JSON writes each as U+FFFD ("t\xff"
// and "t\xfe" are both "t\ufffd"), read back as the same row, and a reader passes a row
// seen again with the same id and fields once (Scan): each would count but one of them.
// Such rows are summed into the first of them, written with the key as it reads back;
// the threshold is the first's. A seal of valid keys only, nearly every one, is only
// checked.
func MergeAsEncoded(rows []Row) []Row {
	if !slices.ContainsFunc(rows, func(r Row) bool { return !utf8.ValidString(r.Key) || !utf8.ValidString(r.Team) }) {
		return rows
	}
	type same struct {
		start, end                       int64
		team, key, rule, outcome, reason string
		folded                           bool
	}
	at := make(map[same]int, len(rows))
	out := rows[:0]
	for _, r := range rows {
		r.Team, r.Key = asEncoded(r.Team), asEncoded(r.Key)
		k := same{r.IntervalStart.UnixNano(), r.IntervalEnd.UnixNano(), r.Team, r.Key, r.Rule, r.Outcome, r.Reason, r.Folded}
		if i, ok := at[k]; ok {
			out[i].Records += r.Records
			out[i].Bytes += r.Bytes
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	clear(rows[len(out):])
	return out
}

// asEncoded is s as its JSON encoding reads back: each byte that is not UTF-8 U+FFFD.
func asEncoded(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}
