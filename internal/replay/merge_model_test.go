package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// simPart is one partition's log as a read_committed reader sees it below the LSO:
// data records, control records, and gaps (aborted records, filtered).
type simPart struct {
	recs       []*kgo.Record // visible, offset order, control included
	lso        int64
	start, end int64 // what offsets() would give
}

// refMerge is the documented semantics (merge), computed directly from whole logs.
func refMerge(base time.Time, parts []simPart, from, to int64, ranged bool, lookAhead int) (out []string, ends []int64) {
	type item struct {
		r  *kgo.Record
		at int64
	}
	var seqs [][]item
	for _, p := range parts {
		hard := p.end
		if ranged && to != 0 && p.lso > p.end {
			hard = p.lso
		}
		var data []*kgo.Record
		for _, r := range p.recs {
			if r.Offset >= p.start && r.Offset < hard && !r.Attrs.IsControl() {
				data = append(data, r)
			}
		}
		var seq []item
		end := hard
		floor := int64(math.MinInt64) // the latest replay time so far; at first the first look-ahead's eighth
		if len(data) > 0 {
			var first []int64
			for _, r := range data[:min(lookAhead+1, len(data))] {
				first = append(first, r.Timestamp.UnixNano())
			}
			slices.Sort(first)
			floor = first[len(first)/8]
		}
		for i, r := range data {
			at := r.Timestamp.UnixNano()
			look := data[i+1 : min(i+1+lookAhead, len(data))]
			behind := len(look) > 0 // every record of the look-ahead below the floor
			for _, nx := range look {
				if t := nx.Timestamp.UnixNano(); t >= floor {
					behind, at = false, min(at, t)
				}
			}
			if behind {
				at = min(at, floor)
			}
			floor = max(floor, at)
			if ranged && to != 0 && r.Offset >= p.end && at >= to {
				end = r.Offset
				break
			}
			seq = append(seq, item{r, at})
		}
		if ranged && from != 0 {
			i := 0
			for i < len(seq) && seq[i].at < from {
				i++
			}
			seq = seq[i:]
		}
		seqs = append(seqs, seq)
		ends = append(ends, max(end, p.start))
	}
	for {
		best := -1
		for i, s := range seqs {
			if len(s) == 0 {
				continue
			}
			if best < 0 || s[0].at < seqs[best][0].at {
				best = i
			}
		}
		if best < 0 {
			return out, ends
		}
		it := seqs[best][0]
		seqs[best] = seqs[best][1:]
		out = append(out, fmt.Sprintf("%d/%d@%d", it.r.Partition, it.r.Offset, time.Duration(it.at-base.UnixNano()).Milliseconds()))
	}
}

// TestMergeMatchesModel: the merge hands on what the model says (replay times over a
// look-ahead of 1 to 4 records, order,
// -from and -to by replay time, ends, progress Done never past Total), over 3,000 random
// logs of 1 to 3 partitions (far-ahead records, control records, gaps of aborted records,
// exact -offsets ranges) and fetches of 1, 2, 3 and 100 records: whatever the batching.
// (Written by a reviewing helper.)
func TestMergeMatchesModel(t *testing.T) {
	t.Parallel()
	base := time.UnixMilli(1_800_000_000_000)
	for seed := range 3000 {
		rnd := rand.New(rand.NewPCG(uint64(seed), 7))
		np := 1 + rnd.IntN(3)
		var parts []simPart
		var from, to int64
		ranged := rnd.IntN(3) > 0
		fromMs, toMs := int64(-1), int64(-1)
		if ranged {
			if rnd.IntN(2) == 0 {
				fromMs = int64(rnd.IntN(50))
			}
			if rnd.IntN(4) > 0 {
				toMs = max(fromMs+1, int64(20+rnd.IntN(60)))
			}
			if fromMs >= 0 {
				from = base.Add(time.Duration(fromMs) * time.Millisecond).UnixNano()
			}
			if toMs >= 0 {
				to = base.Add(time.Duration(toMs) * time.Millisecond).UnixNano()
			}
		}
		for p := range np {
			n := rnd.IntN(12)
			var recs []*kgo.Record
			off := int64(0)
			ms := int64(0)
			for range n {
				off += int64(rnd.IntN(2)) // a gap: aborted, filtered
				r := &kgo.Record{Partition: int32(p), Offset: off}
				switch x := rnd.IntN(10); {
				case x == 0:
					r.Attrs = kgo.RecordAttrs{}
					r.Attrs = controlAttrs()
				case x == 1:
					ms += int64(1000) // stamped far ahead
					r.Timestamp = base.Add(time.Duration(ms) * time.Millisecond)
					ms -= 1000
				default:
					ms += int64(rnd.IntN(10)) - 2
					r.Timestamp = base.Add(time.Duration(ms) * time.Millisecond)
				}
				if r.Attrs.IsControl() {
					r.Timestamp = base.Add(time.Duration(ms) * time.Millisecond)
				}
				recs = append(recs, r)
				off++
			}
			lso := off
			sp := simPart{recs: recs, lso: lso, start: 0, end: lso}
			if ranged {
				// ListOffsets: first offset with timestamp >= t (control records count: they are in the log)
				list := func(ms int64) int64 {
					for _, r := range recs {
						if r.Timestamp.Sub(base).Milliseconds() >= ms {
							return r.Offset
						}
					}
					return lso
				}
				if fromMs >= 0 {
					sp.start = list(fromMs)
				}
				if toMs >= 0 {
					sp.end = min(lso, list(toMs))
				}
				sp.start = min(sp.start, sp.end)
			}
			if !ranged && rnd.IntN(2) == 0 && lso > 0 {
				sp.end = rnd.Int64N(lso + 1)
				sp.start = rnd.Int64N(sp.end + 1)
			}
			parts = append(parts, sp)
		}
		// A look-ahead of 1 to 4 records, against logs of up to 12: runs of records
		// stamped ahead longer than it, and shorter.
		lookAhead := 1 + rnd.IntN(4)
		want, wantEnds := refMerge(base, parts, from, to, ranged, lookAhead)
		var prs []PartitionRange
		hard := map[int32]int64{}
		for i, p := range parts {
			prs = append(prs, PartitionRange{Partition: int32(i), Start: p.start, End: p.end})
			hard[int32(i)] = p.lso
		}
		for _, batch := range []int{1, 2, 3, 100} {
			m := newMerge(prs)
			for _, q := range m.all {
				q.lookAhead = lookAhead
			}
			if ranged {
				var f, tt time.Time
				if from != 0 {
					f = time.Unix(0, from)
				}
				if to != 0 {
					tt = time.Unix(0, to)
				}
				m.bound(f, tt, hard)
			}
			var got []string
			for steps := 0; !m.done(); steps++ {
				if steps > 1000 {
					t.Fatalf("seed %d batch %d: no progress; waiting %v", seed, batch, m.waiting())
				}
				for _, q := range slices.Clone(m.live) {
					var b []*kgo.Record
					for _, r := range parts[q.Partition].recs {
						if r.Offset >= q.next && len(b) < batch {
							b = append(b, r)
						}
					}
					m.add(q.Partition, b)
				}
				m.emit(func(r *kgo.Record, at time.Time) {
					got = append(got, fmt.Sprintf("%d/%d@%d", r.Partition, r.Offset, at.Sub(base).Milliseconds()))
				})
				if m.offsets > m.total || m.offsets < 0 {
					t.Fatalf("seed %d batch %d: progress %d of %d", seed, batch, m.offsets, m.total)
				}
			}
			if g, w := strings.Join(got, " "), strings.Join(want, " "); g != w {
				t.Fatalf("seed %d batch %d from %d to %d parts %+v:\n got %s\nwant %s", seed, batch, fromMs, toMs, dump(parts), g, w)
			}
			rd := m.read()
			var total int64
			for i, r := range rd {
				if r.End != wantEnds[i] {
					t.Fatalf("seed %d batch %d: read %v, want ends %v (%s)", seed, batch, rd, wantEnds, dump(parts))
				}
				total += r.End - r.Start
			}
			if m.offsets != m.total || m.total != total {
				t.Fatalf("seed %d batch %d: progress %d of %d, ranges sum %d (%v)", seed, batch, m.offsets, m.total, total, rd)
			}
		}
	}
}

func controlAttrs() kgo.RecordAttrs {
	return kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Control: true})
}

func dump(parts []simPart) string {
	var b strings.Builder
	for i, p := range parts {
		fmt.Fprintf(&b, "[p%d %d-%d lso %d:", i, p.start, p.end, p.lso)
		for _, r := range p.recs {
			c := ""
			if r.Attrs.IsControl() {
				c = "c"
			}
			fmt.Fprintf(&b, " %d%s@%d", r.Offset, c, r.Timestamp.Sub(time.UnixMilli(1_800_000_000_000)).Milliseconds())
		}
		b.WriteString("]")
	}
	return b.String()
}
