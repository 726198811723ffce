package outcome

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/capturegate/gate/internal/limit"
)

// Kind is a record's outcome.
type Kind uint8

// The outcomes. Every routed record has one of the first six; ShadowOver is beside it.
const (
	Accepted Kind = iota
	Overflow
	Tagged
	Topic // a rule's own topic: Row.Outcome is topic:NAME
	DeadLetter
	Dropped
	ShadowOver
	numKinds
)

// String returns the kind as Row.Outcome has it (Topic without its name).
func (k Kind) String() string {
	switch k {
	case Accepted:
		return "accepted"
	case Overflow:
		return "overflow"
	case Tagged:
		return "tagged"
	case Topic:
		return "topic"
	case DeadLetter:
		return "dead_letter"
	case Dropped:
		return "dropped"
	case ShadowOver:
		return "shadow_over"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Fate is one record's outcome as the router records it.
type Fate struct {
	At     time.Time // when it was routed: the interval it counts in
	Kind   Kind
	Rule   string // Row.Rule
	Topic  string // Topic: the rule's topic
	Reason string
	// Key and Team are Row.Key and Row.Team; they may alias the record or the
	// router's scratch: a new row copies them. Team is a prefix of Key.
	Key, Team string
	Bytes     int
	Threshold int64
	Forced    bool
	// Limiter is the rule's primary limit, asked for the threshold's source when the
	// row is made (nil: static).
	Limiter *limit.Limiter
}

// Budget caps the rows a gate's Aggs hold at once. The zero Budget has no cap.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a Budget of max rows (0: no cap).
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// take claims a row; false when the budget is spent.
func (b *Budget) take() bool {
	if b == nil || b.max <= 0 {
		return true
	}
	if b.used.Load() >= b.max {
		return false
	}
	if b.used.Add(1) > b.max {
		b.used.Add(-1)
		return false
	}
	return true
}

func (b *Budget) give(n int) {
	if b != nil && b.max > 0 {
		b.used.Add(-int64(n))
	}
}

// Used returns the rows held.
func (b *Budget) Used() int64 { return b.used.Load() }

type rowKey struct {
	iv           int64 // the interval's index: At ÷ the interval
	kind         Kind
	rule, reason string
	key          string
}

// entry is a row. What every record of the row reads and writes comes first, in one
// cache line: iv, rule, reason, the counts, next, kind, folded.
type entry struct {
	iv             int64 // the interval's index: At ÷ the interval
	rule, reason   string
	records, bytes int64
	next           int32 // the next row of the same key; -1: none
	kind           Kind
	folded         bool

	key, team, topic string
	threshold        int64
	source           string
}

// Agg aggregates the Fates one routing goroutine records between seals. Not safe for
// concurrent use (see the package doc).
type Agg struct {
	ivNs   int64
	budget *Budget
	// byKey is each key's first row, an index into entries; a key's other rows (other
	// intervals, outcomes, rules or reasons: few) follow entry.next. One string hashed a
	// record: the key's. A new row appends to entries, its key copied once, and nothing
	// else is allocated until the slices grow.
	byKey   map[string]int32
	entries []entry
	held    int   // rows drawn from the budget
	folded  int64 // records folded since the last seal
}

// NewAgg returns an Agg of the given interval (rows' interval_start is a multiple of it
// since the Unix epoch), drawing its rows from budget (nil: no cap).
func NewAgg(interval time.Duration, budget *Budget) *Agg {
	if interval <= 0 {
		interval = time.Minute
	}
	return &Agg{ivNs: int64(interval), budget: budget, byKey: make(map[string]int32)}
}

// Record counts f: route.Scratch.Outcomes is an Agg, called with a Fate on the caller's
// stack (a pointer, as the Fate is some 200 bytes).
func (a *Agg) Record(f *Fate) {
	ns := f.At.UnixNano()
	iv := ns / a.ivNs
	if ns < 0 && ns%a.ivNs != 0 {
		iv--
	}
	first, ok := a.byKey[f.Key] // a string key: the lookup does not allocate
	if ok && a.bump(first, iv, f) {
		return
	}
	if a.budget.take() {
		a.held++
		a.add(first, ok, iv, f)
		return
	}
	// The budget is spent: the folded row of its interval, kind, rule and reason, which
	// is not drawn from the budget (there are few).
	a.folded++
	first, ok = a.byKey[""]
	if ok && a.bumpFolded(first, iv, f) {
		return
	}
	i := a.push(entry{iv: iv, kind: f.Kind, rule: f.Rule, reason: f.Reason, topic: f.Topic, records: 1, bytes: int64(f.Bytes), folded: true, next: -1})
	a.link(first, ok, "", i)
}

// bump counts f in the row of its key's chain from i that matches it, if any.
func (a *Agg) bump(i int32, iv int64, f *Fate) bool {
	for ; i >= 0; i = a.entries[i].next {
		if e := &a.entries[i]; e.iv == iv && e.kind == f.Kind && e.reason == f.Reason && e.rule == f.Rule && !e.folded {
			e.records++
			e.bytes += int64(f.Bytes)
			return true
		}
	}
	return false
}

// bumpFolded is bump for the folded rows (key "").
func (a *Agg) bumpFolded(i int32, iv int64, f *Fate) bool {
	for ; i >= 0; i = a.entries[i].next {
		if e := &a.entries[i]; e.iv == iv && e.kind == f.Kind && e.reason == f.Reason && e.rule == f.Rule && e.folded {
			e.records++
			e.bytes += int64(f.Bytes)
			return true
		}
	}
	return false
}

// add makes f's row in interval iv, chained after its key's first (when has).
func (a *Agg) add(first int32, has bool, iv int64, f *Fate) {
	e := entry{iv: iv, kind: f.Kind, rule: f.Rule, reason: f.Reason, key: strings.Clone(f.Key), topic: f.Topic, records: 1, bytes: int64(f.Bytes), next: -1}
	e.team = e.key[:min(len(f.Team), len(e.key))]
	if f.Key != "" {
		e.threshold = f.Threshold
		switch {
		case f.Forced:
			e.source = "forced"
		case f.Limiter != nil:
			_, src := f.Limiter.ThresholdOf(f.Key)
			e.source = src.String()
		default:
			e.source = limit.SourceStatic.String()
		}
	}
	i := a.push(e)
	a.link(first, has, e.key, i)
}

// link puts row i in key's chain: its first row, or after the first.
func (a *Agg) link(first int32, has bool, key string, i int32) {
	if !has {
		a.byKey[key] = i
		return
	}
	a.entries[i].next = a.entries[first].next
	a.entries[first].next = i
}

func (a *Agg) push(e entry) int32 {
	a.entries = append(a.entries, e)
	return int32(len(a.entries) - 1)
}

// Folded returns the records folded since the last seal, and zeroes it.
func (a *Agg) Folded() int64 {
	n := a.folded
	a.folded = 0
	return n
}

// reset starts a afresh, giving its rows back to the budget; its memory is kept.
func (a *Agg) reset() {
	clear(a.byKey)
	clear(a.entries) // the strings go
	a.entries = a.entries[:0]
	a.budget.give(a.held)
	a.held = 0
}

// Seal returns the rows the aggs recorded since their last seal, one per (interval, key,
// rule, outcome, reason) whichever agg counted it, in the order the aggs first saw them
// (aggs in turn), each stamped with gate and the seal's id, and starts them afresh,
// giving their rows back to the budget.
func Seal(gate, id string, aggs ...*Agg) []Row {
	n := 0
	for _, a := range aggs {
		n += len(a.entries)
	}
	if n == 0 {
		return nil
	}
	rows := make([]Row, 0, n)
	type merged struct {
		rowKey
		folded bool
	}
	var at map[merged]int // with several aggs: where each key's row is
	if len(aggs) > 1 {
		at = make(map[merged]int, n)
	}
	for _, a := range aggs {
		for i := range a.entries {
			e := &a.entries[i]
			k := rowKey{iv: e.iv, kind: e.kind, rule: e.rule, reason: e.reason, key: e.key}
			if at != nil {
				m := merged{k, e.folded}
				if j, ok := at[m]; ok {
					rows[j].Records += e.records
					rows[j].Bytes += e.bytes
					continue
				}
				at[m] = len(rows)
			}
			start := time.Unix(0, k.iv*a.ivNs).UTC()
			out := k.kind.String()
			if k.kind == Topic {
				out = "topic:" + e.topic
			}
			rows = append(rows, Row{
				Schema: SchemaVersion, ID: id, Gate: gate,
				IntervalStart: start, IntervalEnd: start.Add(time.Duration(a.ivNs)),
				Team: e.team, Key: k.key, Rule: k.rule, Outcome: out, Reason: k.reason,
				Records: e.records, Bytes: e.bytes, Threshold: e.threshold, ThresholdSource: e.source,
				Folded: e.folded,
			})
		}
		a.reset()
	}
	return rows
}
