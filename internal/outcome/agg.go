package outcome

import (
	"cmp"
	"fmt"
	"slices"
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

// Recorder takes each routed record's Fate (route.Scratch.Outcomes).
type Recorder interface {
	Record(f Fate)
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

type entry struct {
	team, topic    string
	records, bytes int64
	threshold      int64
	source         string
	folded         bool
}

// Agg aggregates the Fates of one input partition between seals. Not safe for concurrent
// use (see the package doc).
type Agg struct {
	ivNs   int64
	budget *Budget
	rows   map[rowKey]*entry
	// folded are the rows of keys that found the budget spent, by rowKey with no key.
	folded int64 // records folded since the last seal
}

// NewAgg returns an Agg of the given interval (rows' interval_start is a multiple of it
// since the Unix epoch), drawing its rows from budget (nil: no cap).
func NewAgg(interval time.Duration, budget *Budget) *Agg {
	if interval <= 0 {
		interval = time.Minute
	}
	return &Agg{ivNs: int64(interval), budget: budget, rows: make(map[rowKey]*entry)}
}

// Record counts f.
func (a *Agg) Record(f Fate) {
	ns := f.At.UnixNano()
	iv := ns / a.ivNs
	if ns < 0 && ns%a.ivNs != 0 {
		iv--
	}
	k := rowKey{iv: iv, kind: f.Kind, rule: f.Rule, reason: f.Reason, key: f.Key}
	if e := a.rows[k]; e != nil { // a string key: the lookup does not allocate
		e.records++
		e.bytes += int64(f.Bytes)
		return
	}
	a.add(k, f)
}

// add makes k's row, or folds f into its folded row when the budget is spent.
func (a *Agg) add(k rowKey, f Fate) {
	if !a.budget.take() {
		a.folded++
		k.key = ""
		if e := a.rows[k]; e != nil {
			e.records++
			e.bytes += int64(f.Bytes)
			return
		}
		// A folded row is not drawn from the budget: there is at most one per
		// interval, rule, kind and reason.
		a.rows[k] = &entry{topic: f.Topic, records: 1, bytes: int64(f.Bytes), folded: true}
		return
	}
	k.key = strings.Clone(f.Key)
	e := &entry{topic: f.Topic, records: 1, bytes: int64(f.Bytes)}
	e.team = k.key[:min(len(f.Team), len(k.key))]
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
	a.rows[k] = e
}

// Len returns the rows held.
func (a *Agg) Len() int { return len(a.rows) }

// Empty reports whether nothing was recorded since the last seal.
func (a *Agg) Empty() bool { return len(a.rows) == 0 }

// Folded returns the records folded since the last seal, and zeroes it.
func (a *Agg) Folded() int64 {
	n := a.folded
	a.folded = 0
	return n
}

// Seal returns the rows recorded since the last seal, in a fixed order (interval, team,
// key, rule, outcome, reason), each stamped with gate and src, and starts afresh. The
// rows' budget is given back.
func (a *Agg) Seal(gate string, src Source) []Row {
	if len(a.rows) == 0 {
		return nil
	}
	id := fmt.Sprintf("%s/%d/%d-%d", src.Topic, src.Partition, src.FirstOffset, src.LastOffset)
	rows := make([]Row, 0, len(a.rows))
	held := 0
	for k, e := range a.rows {
		if !e.folded {
			held++
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
			Folded: e.folded, Source: src,
		})
	}
	clear(a.rows)
	a.budget.give(held)
	slices.SortFunc(rows, func(x, y Row) int {
		return cmp.Or(x.IntervalStart.Compare(y.IntervalStart), cmp.Compare(x.Team, y.Team), cmp.Compare(x.Key, y.Key),
			cmp.Compare(x.Rule, y.Rule), cmp.Compare(x.Outcome, y.Outcome), cmp.Compare(x.Reason, y.Reason))
	})
	return rows
}
