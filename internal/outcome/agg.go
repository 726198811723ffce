package outcome

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/capturegate/gate/internal/cpu"
	"github.com/capturegate/gate/internal/keypart"
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
	// router's scratch: a new row copies them. Team is a prefix of Key, and with it
	// makes the row's identity: a key of no team is another row than a team's of the
	// same bytes (a user id "42" under a rule keyed by users, read from a record of no
	// team, and team 42's row). Rule, Topic and Reason are kept as given: they must not
	// change (the router's are constants).
	Key, Team string
	Bytes     int
	Threshold int64
	Forced    bool
	// Limiter is the limit whose threshold Threshold is, asked for its source when the
	// row is made (nil: static, or none without a Threshold; Forced: forced).
	Limiter *limit.Limiter
	// LimiterKey is the key Limiter knows the row's key by, when it is not Key: a rule
	// not keyed by the team, whose row's key is the record's team and then its own.
	LimiterKey string
}

// Budget caps the rows a gate's Aggs hold at once. The zero Budget has no cap.
type Budget struct {
	max  int64
	used atomic.Int64
	// kept are the keys that drew a row from the budget since the last seal, whichever
	// Agg drew it, each with its team (keptKey: a key of no team is not a team's of its
	// bytes): a key kept by one routing goroutine is kept by all (Record), as the
	// consumer hands a partition's polls to whichever goroutine is free, and a team's
	// overflow routed by another goroutine than its first record's must not be folded.
	// Written once per key a seal, not per record (a map: a sync.Map's Store cost some
	// 700 ns, a third of a new row's cost); read, once the budget is spent, for each
	// record of a key new to its Agg, under the read lock, which readers share.
	mu   sync.RWMutex
	kept map[keptKey]struct{}
}

// keptKey is a kept key and how much shorter than it its team is (0: the team itself, a
// team's own row; len(key): a key of no team), as the index tells rows apart (rowHash).
type keptKey struct {
	key   string
	short int
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

// keep marks key of team (a prefix of key), which drew a row, as kept until the next
// seal.
func (b *Budget) keep(key, team string) {
	if b == nil || b.max <= 0 || key == "" {
		return
	}
	b.mu.Lock()
	if b.kept == nil {
		b.kept = make(map[keptKey]struct{})
	}
	b.kept[keptKey{key, max(len(key)-len(team), 0)}] = struct{}{}
	b.mu.Unlock()
}

// isKept reports whether key of team (a prefix of key) drew a row since the last seal,
// in any Agg of the budget.
func (b *Budget) isKept(key, team string) bool {
	if b == nil || b.max <= 0 || key == "" {
		return false
	}
	b.mu.RLock()
	_, ok := b.kept[keptKey{key, max(len(key)-len(team), 0)}]
	b.mu.RUnlock()
	return ok
}

// isKeptTeam is isKept of a team under any of its spellings: rows of one team carry its
// id as a team rule's key has it ("c:1") and as a composite key's first field, escaped
// ("c%3A1", keypart), which TeamOf reads as one team; kept under one, a team is kept
// under the other, and its users past the cap count in its row.
func (b *Budget) isKeptTeam(team string) bool {
	if b == nil || b.max <= 0 || team == "" {
		return false
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	// A team without ':' or '%' is spelt one way: one look-up, on the path every new
	// key takes past the cap.
	spellings, n := [...]string{team, "", ""}, 1
	if strings.ContainsAny(team, ":%") {
		spellings[1], spellings[2], n = keypart.Value(team), keypart.Escape(team), 3
	}
	for _, k := range spellings[:n] {
		if _, ok := b.kept[keptKey{key: k}]; ok { // a team's own row: its key the team
			return true
		}
	}
	return false
}

// forget starts the kept keys afresh: the Aggs of the budget were sealed.
func (b *Budget) forget() {
	if b == nil || b.max <= 0 {
		return
	}
	b.mu.Lock()
	clear(b.kept) // its buckets kept for the next seal's keys
	b.mu.Unlock()
}

// force claims a row whatever the budget holds: a kept key's (Record). Used may then
// exceed the cap by them.
func (b *Budget) force() {
	if b != nil && b.max > 0 {
		b.used.Add(1)
	}
}

func (b *Budget) give(n int) {
	if b != nil && b.max > 0 {
		b.used.Add(-int64(n))
	}
}

// Used returns the rows held.
func (b *Budget) Used() int64 { return b.used.Load() }

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
	// first is when the row's first record was routed (Unix ns): threshold and source
	// are that record's, and the earliest's win when Aggs' rows merge (absorb).
	first int64
}

// Agg aggregates the Fates one routing goroutine records between seals. Not safe for
// concurrent use (see the package doc).
type Agg struct {
	ivNs   int64
	budget *Budget
	// slots index each key's first row in entries; a key's other rows (other
	// intervals, outcomes, rules or reasons: few) follow entry.next. One string hashed a
	// record: the key's. A new row appends to entries, its key copied once, and nothing
	// else is allocated until the slices grow.
	slots   index
	entries []entry
	held    int   // rows drawn from the budget
	folded  int64 // records folded since the last seal
	// cur is the interval of the last record and its bounds in Unix ns: a record of
	// the same interval, nearly all, needs no division.
	cur, curFrom, curTo int64
	// classes are the rule and reason pairs seen, a slot's class indexing them; last is
	// the pair last looked up and its class. Rule names and reasons are constants (a
	// Fate's Rule and Reason are kept as given, as a row keeps them), so comparing with
	// last's strings finds their data the same and reads no bytes.
	classes                         []class
	lastRule, lastReason, lastTopic string
	lastClass                       uint16
}

// Touch fetches key's slot ahead of its Bump and returns key's hash, for BumpHashed:
// called once the key is known, before the record's limits are checked, it has the
// processor fetch the slot's line while the checks run (cpu.Prefetch), and the Bump finds
// the line in its caches. A gate's thousands of keys keep few of their slots there
// between two of their records: in the whole gate, between the records a transaction or
// a commit interval streams through the caches, nearly every slot read went to memory.
// Read with a load, as Touch first did, the slot held the instructions after it from
// retiring until its line came; prefetched, it holds nothing (profiled in
// BenchmarkOutcomes: docs/benchmarks.md).
func (a *Agg) Touch(key string) uint64 {
	x := &a.slots
	h := maphash.String(x.seed, key)
	cpu.Prefetch(unsafe.Pointer(&x.slots[h&uint64(len(x.slots)-1)]))
	return h
}

// rowHash returns the hash key's rows of team (a prefix of key) are indexed by: key's,
// as Touch returns it, when team is key itself (a team's own rows, nearly every record's:
// one compare), else key's mixed with how much shorter team is. A key's rows of one team
// are then another chain than its rows of another, a key of no team's ("42", a user id
// under a rule keyed by users, read from a record of no team) than team 42's own: for
// one key, the hashes of two lengths differ in every case (an odd multiplier), so no two
// such rows are ever found as one; the slot compares the key's bytes as before.
func (a *Agg) rowHash(key, team string) uint64 {
	h := maphash.String(a.slots.seed, key)
	if len(team) < len(key) {
		h ^= uint64(len(key)-len(team)) * 0x9e3779b97f4a7c15
	}
	return h
}

// classOf returns the class of rule, reason and topic (a Topic row's, else "") + 1, or 0
// past maxClasses.
func (a *Agg) classOf(rule, reason, topic string) uint16 {
	if a.lastClass != 0 && same(rule, a.lastRule) && same(reason, a.lastReason) && same(topic, a.lastTopic) {
		return a.lastClass
	}
	c := uint16(0)
	for i := range a.classes {
		if a.classes[i].rule == rule && a.classes[i].reason == reason && a.classes[i].topic == topic {
			c = uint16(i + 1)
			break
		}
	}
	if c == 0 {
		if len(a.classes) >= maxClasses {
			return 0
		}
		a.classes = append(a.classes, class{rule, reason, topic})
		c = uint16(len(a.classes))
	}
	a.lastRule, a.lastReason, a.lastTopic, a.lastClass = rule, reason, topic, c
	return c
}

// same reports whether a and b are one string, its bytes at one place (or both empty):
// the router's rule names and reasons are constants, so the pair last looked up is found
// with compares inline, not a call to compare bytes for each of the three (classOf falls
// back to comparing them).
func same(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.StringData(a) == unsafe.StringData(b))
}

// index maps a key to its first row: open addressing, linear probing, a power of two
// slots at most half full, each one cache line holding the key's hash, up to slotKey
// bytes of the key itself, and the first row's identity (interval, kind, and rule and
// reason as a class) and counts. The first row is the one the key's records last went
// to through the chain (bumpFront), so a record of it, nearly every record (a team's
// accepted row, or its overflow row while it is held), reads and writes one line: with
// a Go map, finding a key read the map's group, the key's bytes and then the row, three
// lines far apart for a gate's thousands of teams. The counts a slot holds are its row's, added to the row's
// own (those counted by the chain, Record's path) when the Agg is sealed (settle).
type index struct {
	seed  maphash.Seed
	slots []slot
	used  int
}

// slotKey is how many bytes of its key a slot holds.
const slotKey = 24

// longKey is slot.klen for a key longer than slotKey, compared at its row.
const longKey = 255

type slot struct {
	h    uint64
	row  int32 // the key's first row (its chain's head) + 1; 0: an empty slot
	klen uint8 // len(key), or longKey
	kind Kind  // the first row's
	// class is the first row's rule and reason (Agg.classOf) + 1; 0: records are
	// never counted in the slot (a folded first row, or a class past maxClasses).
	class          uint16
	iv             int64 // the first row's
	records, bytes int64 // counted in the slot, not yet in the row
	kb             [slotKey]byte
}

// class is a rule, reason and topic (a Topic row's: a rules file reloaded may give a
// rule another) triple, interned per Agg: few (the rules × the reasons).
type class struct{ rule, reason, topic string }

// topicOf is the topic that tells rows of kind apart: a Topic row's, none for the others.
func topicOf(kind Kind, topic string) string {
	if kind != Topic {
		return ""
	}
	return topic
}

// maxClasses bounds the pairs an Agg interns: a pair past it is counted through the
// rows' chain, as before the slots held counts.
const maxClasses = 1 << 12

const firstSlots = 1 << 10

func newIndex(seed maphash.Seed) index {
	return index{seed: seed, slots: make([]slot, firstSlots)}
}

// find returns key's first row (-1: none) and the slot it is in or would go in.
func (a *Agg) find(key string, h uint64) (int32, uint64) {
	x := &a.slots
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.row == 0 {
			return -1, i
		}
		if s.h == h && a.keyIs(s, key) {
			return s.row - 1, i
		}
	}
}

func (a *Agg) keyIs(s *slot, key string) bool {
	if len(key) <= slotKey {
		return int(s.klen) == len(key) && string(s.kb[:len(key)]) == key
	}
	return s.klen == longKey && a.entries[s.row-1].key == key
}

// put makes row the first of key (hash h) in slot i, as find returned it; the index
// grows first when it would be over half full, and i is found again. The slot counts the
// row's records from here on unless it is folded.
func (a *Agg) put(i uint64, h uint64, key string, row int32) {
	x := &a.slots
	if (x.used+1)*2 > len(x.slots) {
		old := x.slots
		x.slots = make([]slot, 2*len(old))
		mask := uint64(len(x.slots) - 1)
		for _, s := range old {
			if s.row == 0 {
				continue
			}
			j := s.h & mask
			for x.slots[j].row != 0 {
				j = (j + 1) & mask
			}
			x.slots[j] = s
		}
		for i = h & mask; x.slots[i].row != 0; i = (i + 1) & mask {
		}
	}
	s := slot{h: h, row: row + 1, klen: longKey}
	if e := &a.entries[row]; !e.folded {
		s.kind, s.iv, s.class = e.kind, e.iv, a.classOf(e.rule, e.reason, e.topic)
	}
	if len(key) <= slotKey {
		s.klen = uint8(len(key))
		copy(s.kb[:], key)
	}
	x.slots[i] = s
	x.used++
}

// NewAgg returns an Agg of the given interval (rows' interval_start is a multiple of it
// since the Unix epoch), drawing its rows from budget (nil: no cap).
func NewAgg(interval time.Duration, budget *Budget) *Agg {
	return NewAggSeeded(interval, budget, maphash.MakeSeed())
}

// NewAggSeeded is NewAgg hashing keys with seed, which a gate gives its limiters too
// (limit.Config.HashSeed): Touch's hash of a team is then the limiter's, and the router
// checks the team with it (limit.Limiter.CheckTallyHashed) rather than hashing it again.
func NewAggSeeded(interval time.Duration, budget *Budget, seed maphash.Seed) *Agg {
	if interval <= 0 {
		interval = time.Minute
	}
	return &Agg{ivNs: int64(interval), budget: budget, slots: newIndex(seed), curFrom: 1, curTo: 0}
}

// Seed returns the seed of the hash Touch returns.
func (a *Agg) Seed() maphash.Seed { return a.slots.seed }

// Record counts f: route.Scratch.Outcomes is an Agg, called with a Fate on the caller's
// stack (a pointer, as the Fate is some 200 bytes).
func (a *Agg) Record(f *Fate) {
	iv := a.interval(f.At)
	h := a.rowHash(f.Key, f.Team)
	first, at := a.find(f.Key, h)
	if a.count(first, at, iv, f.Kind, f.Rule, topicOf(f.Kind, f.Topic), f.Reason, f.Bytes) {
		return
	}
	// A key already kept keeps its other rows (another outcome, rule, reason or
	// interval: a handful, at most its rules × outcomes × reasons a seal), drawn from the
	// budget all the same so that they bring the cap on new keys nearer: folded, a kept
	// team's overflow would leave its history (its key is gone from a folded row) just
	// when it matters. Only a key that first comes once the cap is reached is folded.
	// Kept by another Agg of the budget counts as kept here (Budget.kept).
	kept := f.Key != "" && first >= 0 // "" is the folded rows' too: not a kept key
	took := !kept && a.budget.take()
	if !kept && !took {
		if f.Key == f.Team {
			kept = a.budget.isKeptTeam(f.Key)
		} else {
			kept = a.budget.isKept(f.Key, f.Team)
		}
	}
	if kept {
		a.budget.force()
	}
	if kept || took {
		a.held++
		a.add(first, at, h, iv, f)
		if took {
			// The new row's copy of the key: f.Key may alias the record or the router's
			// scratch, which the next record writes over. A composite key keeps its team
			// too (below).
			e := &a.entries[len(a.entries)-1]
			a.budget.keep(e.key, e.team)
			if len(e.team) < len(e.key) {
				a.budget.keep(e.team, e.team)
			}
		}
		return
	}
	if f.Team != "" && len(f.Team) < len(f.Key) {
		// A new key of its team (a user, under a rule keyed by team and user): counted in
		// its team's row of the rule, outcome and reason, as a team's row under a
		// composite key is written (no threshold: that was a user's), if the team is kept,
		// else folded there. Folded at once, a kept team's limiting by a per-user rule,
		// a row per user and so what brings the cap near, left its history once the cap
		// was reached. A kept team's rows stay a handful (rules × outcomes × reasons).
		g := *f
		g.Key, g.Threshold, g.Forced, g.Limiter = f.Team, 0, false, nil
		a.Record(&g)
		return
	}
	// The budget is spent: the folded row of its interval, kind, rule and reason, which
	// is not drawn from the budget (there are few).
	a.folded++
	h = maphash.String(a.slots.seed, "")
	first, at = a.find("", h)
	if first >= 0 && a.bumpFolded(first, iv, f) {
		return
	}
	i := a.push(entry{iv: iv, kind: f.Kind, rule: f.Rule, reason: f.Reason, topic: topicOf(f.Kind, f.Topic), records: 1, bytes: int64(f.Bytes), folded: true, next: -1})
	a.link(first, at, h, "", i)
}

// Bump counts one record of bytes bytes routed at at in the row of key and team (a
// prefix of key, as Fate's) of its interval, kind, rule, topic (Fate.Topic: a Topic
// record's) and reason, when that row exists already: Record's work without a Fate,
// which the caller then needs only for a new row. It reports whether it counted.
func (a *Agg) Bump(at time.Time, key, team string, kind Kind, rule, topic, reason string, bytes int) bool {
	return a.BumpHashed(a.rowHash(key, team), at, key, kind, rule, topic, reason, bytes)
}

// BumpHashed is Bump of key whose hash h Touch returned: of key's rows whose team is key
// itself (a team's own rows; another team's rows of key are hashed apart, rowHash). A slot
// matches on its hash and its key both, so an h that is not key's finds no row: it
// reports false, and Record then counts the record where it belongs.
//
// It is find, count and bumpSlot written out in one function: nearly every record is
// counted in its key's slot, and the calls between them, each passing the strings
// again, took about a third of its time (BenchmarkRouteOutcomesTurns).
func (a *Agg) BumpHashed(h uint64, at time.Time, key string, kind Kind, rule, topic, reason string, bytes int) bool {
	topic = topicOf(kind, topic)
	iv := a.interval(at)
	x := &a.slots
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.row == 0 {
			return false
		}
		if s.h != h || !a.keyIs(s, key) {
			continue
		}
		c := a.classOf(rule, reason, topic)
		if s.class != 0 && s.iv == iv && s.kind == kind && s.class == c {
			s.records++
			s.bytes += int64(bytes)
			return true
		}
		return a.bumpFront(s, iv, kind, c, rule, topic, reason, bytes)
	}
}

// bumpFront counts a record in the row of its key's chain (s, its slot) that it belongs
// to, as bump does, and makes that row the chain's first, the one the slot counts: a
// key's records come in runs of one row (a team is accepted, then held over its limit
// for a while, its records all overflow), and counted along the chain every record of
// the second run read a row of entries, a line missing the caches for a gate's
// thousands of teams (half of BumpHashed's time in BenchmarkOutcomes' gate). The slot's
// counts go to the row it counted first (settled as at a seal). Which row heads a chain
// changes nothing else: a key's rows are its chain's in any order, and a seal writes
// them in entries' order.
func (a *Agg) bumpFront(s *slot, iv int64, kind Kind, c uint16, rule, topic, reason string, bytes int) bool {
	head := s.row - 1
	prev := int32(-1)
	for i := head; i >= 0; prev, i = i, a.entries[i].next {
		e := &a.entries[i]
		if e.iv != iv || e.kind != kind || e.reason != reason || e.rule != rule || e.topic != topic || e.folded {
			continue
		}
		if prev < 0 || c == 0 {
			// The first row already (a class past maxClasses, or its slot counting
			// nothing), or a row the slot could not count: counted in the row.
			e.records++
			e.bytes += int64(bytes)
			return true
		}
		if s.records != 0 {
			h := &a.entries[head]
			h.records += s.records
			h.bytes += s.bytes
		}
		a.entries[prev].next = e.next
		e.next = head
		s.row, s.kind, s.iv, s.class = i+1, kind, iv, c
		s.records, s.bytes = 1, int64(bytes)
		return true
	}
	return false
}

// count counts a record in its key's existing row, first being the key's first row (-1:
// none) and at its slot: in the slot when it is the first row, else along the chain.
func (a *Agg) count(first int32, at uint64, iv int64, kind Kind, rule, topic, reason string, bytes int) bool {
	return first >= 0 && (a.bumpSlot(at, iv, kind, rule, topic, reason, bytes) || a.bump(first, iv, kind, rule, topic, reason, bytes))
}

// bumpSlot counts a record in slot i, the slot of its key, when it is of the key's first
// row.
func (a *Agg) bumpSlot(i uint64, iv int64, kind Kind, rule, topic, reason string, bytes int) bool {
	s := &a.slots.slots[i]
	if s.class == 0 || s.iv != iv || s.kind != kind || s.class != a.classOf(rule, reason, topic) {
		return false
	}
	s.records++
	s.bytes += int64(bytes)
	return true
}

// settle adds the counts the slots hold to their rows.
func (a *Agg) settle() {
	for i := range a.slots.slots {
		if s := &a.slots.slots[i]; s.row != 0 && s.records != 0 {
			e := &a.entries[s.row-1]
			e.records += s.records
			e.bytes += s.bytes
			s.records, s.bytes = 0, 0
		}
	}
}

// interval is the index of the interval t is in.
func (a *Agg) interval(t time.Time) int64 {
	ns := t.UnixNano()
	if ns >= a.curFrom && ns < a.curTo {
		return a.cur
	}
	iv := ns / a.ivNs
	if ns < 0 && ns%a.ivNs != 0 {
		iv--
	}
	a.cur, a.curFrom, a.curTo = iv, iv*a.ivNs, (iv+1)*a.ivNs
	return iv
}

// bump counts a record in the row of its key's chain from i that matches it, if any.
func (a *Agg) bump(i int32, iv int64, kind Kind, rule, topic, reason string, bytes int) bool {
	for ; i >= 0; i = a.entries[i].next {
		if e := &a.entries[i]; e.iv == iv && e.kind == kind && e.reason == reason && e.rule == rule && e.topic == topic && !e.folded {
			e.records++
			e.bytes += int64(bytes)
			return true
		}
	}
	return false
}

// bumpFolded is bump for the folded rows (key "").
func (a *Agg) bumpFolded(i int32, iv int64, f *Fate) bool {
	for ; i >= 0; i = a.entries[i].next {
		if e := &a.entries[i]; e.iv == iv && e.kind == f.Kind && e.reason == f.Reason && e.rule == f.Rule && e.topic == topicOf(f.Kind, f.Topic) && e.folded {
			e.records++
			e.bytes += int64(f.Bytes)
			return true
		}
	}
	return false
}

// add makes f's row in interval iv, chained after its key's first (first ≥ 0), or
// first in slot at.
func (a *Agg) add(first int32, at, h uint64, iv int64, f *Fate) {
	e := entry{iv: iv, kind: f.Kind, rule: f.Rule, reason: f.Reason, key: strings.Clone(f.Key), topic: topicOf(f.Kind, f.Topic), records: 1, bytes: int64(f.Bytes), next: -1, first: f.At.UnixNano()}
	e.team = e.key[:min(len(f.Team), len(e.key))]
	if f.Key != "" {
		// No threshold, no source: a row the consumer decides (a dead letter after the
		// broker refused a record), or a team's under a composite key, has neither.
		e.threshold = f.Threshold
		switch {
		case f.Forced:
			e.source = "forced"
		case f.Limiter != nil:
			_, src := f.Limiter.ThresholdOf(cmp.Or(f.LimiterKey, f.Key))
			e.source = src.String()
		case f.Threshold > 0:
			e.source = limit.SourceStatic.String()
		}
	}
	i := a.push(e)
	a.link(first, at, h, e.key, i)
}

// link puts row i in key's chain: its first row (in slot at, key's hash being h), or
// after the first.
func (a *Agg) link(first int32, at, h uint64, key string, i int32) {
	if first < 0 {
		a.put(at, h, key, i)
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

// reset starts a afresh, giving its rows back to the budget. Its memory is kept for the
// next seal, but not room for more than twice the rows it held in this one: kept as it
// was, each of a gate's Aggs (one per routing goroutine, one per CPU) kept the room of
// its busiest seal, and a load of many keys that one goroutine, then another, routed
// (a partition of rotating keys, when the cap is reached) left every one with room for
// GATE_OUTCOMES_MAX_ROWS: 8 kept 5.1 times one Agg's memory (TestSealKeepsBoundedMemory).
// The index goes with the rows: it grew with their keys.
func (a *Agg) reset() {
	n := len(a.entries)
	clear(a.entries) // the strings go
	a.entries = a.entries[:0]
	if cap(a.entries) > 2*max(n, firstSlots) {
		a.entries, a.slots = nil, newIndex(a.slots.seed) // the seed stays: a limiter may share it
	} else {
		clear(a.slots.slots)
		a.slots.used = 0
	}
	a.budget.give(a.held)
	a.held = 0
	a.folded = 0 // the seal's rows count them (Folded: since the last seal)
}

// Seal returns the rows the aggs recorded since their last seal, one per (interval, key,
// team, rule, outcome, reason) whichever agg counted it, in the order the aggs first saw them
// (aggs in turn), each stamped with gate and the seal's id, and starts them afresh,
// giving their rows back to the budget. The aggs' rows are merged into the first's
// (absorb), through its index: a gate's routing goroutines seal together, and a Go map of
// every row cost more than the rest of the seal. Aggs of another interval than the
// first's (the consumer's share one) are not merged, their rows following.
func Seal(gate, id string, aggs ...*Agg) []Row { return SealAppend(nil, gate, id, aggs...) }

// SealAppend is Seal appending the rows to rows: a caller that seals often (under
// exactly-once, every transaction) reuses one slice of rows, some 200 bytes each.
func SealAppend(rows []Row, gate, id string, aggs ...*Agg) []Row {
	n := 0
	for _, a := range aggs {
		n += len(a.entries)
	}
	if n == 0 {
		return rows
	}
	for _, a := range aggs {
		a.settle()
	}
	a0 := aggs[0]
	own := []*Agg{a0}
	for _, a := range aggs[1:] {
		if a.ivNs != a0.ivNs {
			own = append(own, a)
			continue
		}
		for i := range a.entries {
			a0.absorb(&a.entries[i])
		}
	}
	rows = slices.Grow(rows, n) // n: at least the rows, as they were before merging
	for _, a := range own {
		for i := range a.entries {
			e := &a.entries[i]
			start := time.Unix(0, e.iv*a.ivNs).UTC()
			out := e.kind.String()
			if e.kind == Topic {
				out = "topic:" + e.topic
			}
			rows = append(rows, Row{
				Schema: SchemaVersion, ID: id, Gate: gate,
				IntervalStart: start, IntervalEnd: start.Add(time.Duration(a.ivNs)),
				Team: e.team, Key: e.key, Rule: e.rule, Outcome: out, Reason: e.reason,
				Records: e.records, Bytes: e.bytes, Threshold: e.threshold, ThresholdSource: e.source,
				Folded: e.folded,
			})
		}
	}
	for _, a := range aggs {
		a.reset()
	}
	for i, a := range aggs {
		if !slices.ContainsFunc(aggs[:i], func(b *Agg) bool { return b.budget == a.budget }) {
			a.budget.forget()
		}
	}
	return rows
}

// absorb adds e, a settled row of another Agg of the same interval, to a's row of the same
// interval, key and team, kind, rule, reason and folding, or as a row of its own, a copy of e
// drawn from no budget (e's Agg gives its rows back when reset). Merged, the row keeps
// the threshold and source of the one whose first record was routed first, whichever
// Agg counted it (docs/outcomes.md: the threshold when the row's first record was
// routed). a is settled and sealed: its slots' counts are not used again before it is
// reset.
func (a *Agg) absorb(e *entry) {
	h := a.rowHash(e.key, e.team)
	first, at := a.find(e.key, h)
	for i := first; i >= 0; i = a.entries[i].next {
		if x := &a.entries[i]; x.iv == e.iv && x.kind == e.kind && x.folded == e.folded && x.rule == e.rule && x.reason == e.reason && x.topic == e.topic {
			x.records += e.records
			x.bytes += e.bytes
			if e.first < x.first {
				x.threshold, x.source, x.first = e.threshold, e.source, e.first
			}
			return
		}
	}
	ne := *e
	ne.next = -1
	a.link(first, at, h, ne.key, a.push(ne))
}
