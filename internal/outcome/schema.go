package outcome

import (
	"encoding/json"
	"fmt"
	"time"
)

// SchemaVersion is Row.Schema. It changes only when a field changes meaning or goes; a
// new field is added without a change, so a reader ignores fields it does not know
// (TestSchemaGolden keeps the encoding as documented in docs/outcomes.md).
const SchemaVersion = 1

// Row is one outcomes record's value, JSON-encoded (AppendJSON): a count of records of
// one key that met one outcome, for one reason, under one rule, within one interval,
// from one seal (a range of one input partition). The record's Kafka key is Team, so a
// team's rows stay in order on one partition of the outcomes topic.
//
// JSON rather than a binary encoding: rows are few next to the events (one per key and
// seal), and support reads them with kcat and jq; every field is flat and named.
type Row struct {
	Schema int `json:"schema"`
	// ID names the seal: TOPIC/PARTITION/FIRST-LAST, the input offsets whose records it
	// counts. (ID, IntervalStart, Key, Rule, Outcome, Reason) is unique to a row: a
	// reader that sees it twice drops the second (a seal written again as it was);
	// overlapping ranges of one partition are records routed twice (at-least-once only).
	ID            string    `json:"id"`
	Gate          string    `json:"gate"`
	IntervalStart time.Time `json:"interval_start"`
	IntervalEnd   time.Time `json:"interval_end"`
	// Team is Key's team: Key for a key of one field, a composite key's first field.
	Team string `json:"team"`
	// Key is the key the rule counted by; for accepted rows (no rule acted) the team.
	// Empty for a record no key could be read from, and in a folded row.
	Key string `json:"key"`
	// Rule is the rule whose action the record got (a named rule of the rules file),
	// or the shadow rule over it; empty without a rules file and for accepted rows.
	Rule string `json:"rule"`
	// Outcome is accepted, overflow, tagged, topic:NAME, dead_letter, shadow_over or
	// dropped.
	Outcome string `json:"outcome"`
	// Reason is the gate's reason: allowed, dry_run, rate_limited, forced,
	// key_cardinality, tagged, dropped or a dead letter's (not_json, field_missing,
	// ..., rejected).
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
	Folded bool   `json:"folded,omitempty"`
	Source Source `json:"source"`
}

// Source is the input range a row's seal covers.
type Source struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	FirstOffset int64  `json:"first_offset"`
	LastOffset  int64  `json:"last_offset"`
}

// AppendJSON appends r's encoding to b.
func AppendJSON(b []byte, r *Row) ([]byte, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return b, fmt.Errorf("encoding an outcome row: %w", err)
	}
	return append(b, js...), nil
}

// Decode reads one row, refusing a schema it does not know.
func Decode(b []byte) (Row, error) {
	var r Row
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decoding an outcome row: %w", err)
	}
	if r.Schema != SchemaVersion {
		return r, fmt.Errorf("decoding an outcome row: schema %d, this gate reads %d", r.Schema, SchemaVersion)
	}
	return r, nil
}
