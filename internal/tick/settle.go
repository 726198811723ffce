// Settling writes: what each batch's answer does to the pending counts. This is what
// makes a count written exactly once while Redis keeps what it acknowledged. A batch
// answered is confirmed, and kept for KeepConfirmed's worth of ticks its lane is answered
// in; a refused batch's counts go in a new one; an unanswered batch stays in doubt and is
// resent as it is. When an answer shows a lane's number behind one this gate saw applied
// (a failover to a replica that had not received the batch, a restart), the kept batches
// past that number are sent again; those no longer kept are reported lost.

package tick

import (
	"slices"
	"time"
)

// settleWrites settles the writes sent: a batch answered is confirmed (applied now, or
// found applied by an earlier send whose reply was lost); a batch refused keeps its
// counts pending, to go in a new batch; a batch unanswered stays in doubt and is resent
// as it is.
func (t *Ticker) settleWrites(res *TickResult) {
	for i := range t.plans {
		p := &t.plans[i]
		for _, b := range p.batches {
			o := t.settle(b, res)
			res.Batches[o]++
			t.m.batches.WithLabelValues(o.String()).Inc()
		}
	}
	for li := range t.lanes {
		ln := &t.lanes[li]
		ln.doubt = slices.DeleteFunc(ln.doubt, func(b *batch) bool { return !b.doubt })
	}
	if res.Batches[outReplayed]+res.Batches[outLost] > 0 {
		// Once a minute at most: a lane's sequence key evicted tick after tick (an
		// allkeys-* policy under another tenant's pressure) is lost every tick.
		if ok, quiet := t.lostLog.Allow(); ok {
			t.log.Warn("redis lost writes it had acknowledged (a failover to a replica that had not received them, a restart, or its sequence key evicted); this gate's are sent again",
				"replayed_batches", res.Batches[outReplayed], "replayed_counts", res.Replayed,
				"lost_batches", res.Batches[outLost], "keep_confirmed", t.cfg.KeepConfirmed, "warnings_unlogged", quiet)
		}
	}
	if t.retired.Load() {
		t.cfg.Unwritten.publish(t)
	}
}

// settle applies one batch's outcome to the pending counts.
func (t *Ticker) settle(b *batch, res *TickResult) outcome {
	o, failed := b.out, b.failed
	ln := &t.lanes[b.lane]
	switch o {
	case outApplied, outDuplicate:
		t.recoverLost(ln, b.last, b.first, res)
		applied := b.items[:0:0]
		for j, it := range b.items {
			if b.doubt {
				t.addTo(t.doubt, it.k, -it.n)
			}
			if it.n == 0 {
				continue // a stale count taken out of the batch in doubt (dropStaleDoubt)
			}
			if slices.Contains(failed, int64(j+1)) {
				// This key failed on its own: its count stays pending, to go in a new batch.
				res.CarriedWrites++
				continue
			}
			t.addTo(t.pending, it.k, -it.n)
			res.Writes++
			if len(failed) > 0 {
				applied = append(applied, it)
			}
		}
		if len(failed) > 0 {
			b.items = applied
		}
		b.doubt = false
		if ln.answeredAt != t.tickN {
			ln.answeredAt = t.tickN
			ln.answers++
		}
		b.tick, b.answered = t.tickN, ln.answers
		// Kept for its items alone (recoverLost): the command, every key and boxed
		// argument again, is let go, or a kept count cost some 120 bytes, not 48.
		b.cmd = nil
		ln.kept = append(ln.kept, b)
	case outRefused:
		// Not applied. A batch in doubt stays in doubt, with its number: an earlier send
		// may have been applied. Otherwise its counts stay pending for a new batch.
		res.CarriedWrites += len(b.items)
	case outUnknown:
		if !b.doubt {
			b.doubt = true
			ln.doubt = append(ln.doubt, b)
			for _, it := range b.items {
				t.doubt[it.k] += it.n
			}
		}
		res.CarriedWrites += len(b.items)
	}
	return o
}

// recoverLost is called with each answer of the write script on a lane: last is the
// number the lane held in Redis before the batch, or before the run of batches it was
// applied in, whose first is first (0: none said). Batches confirmed earlier with a higher
// number, below first, are no longer in Redis: a failover promoted a replica that had not
// received them, or Redis restarted without them. Their counts go back to pending and are
// sent again in new batches; batches confirmed too long ago to be kept are reported as
// lost. Those from first on are the run's own, applied after last.
func (t *Ticker) recoverLost(ln *lane, last, first int64, res *TickResult) {
	end := len(ln.kept)
	if first > 0 {
		for end > 0 && int64(ln.kept[end-1].seq) >= first {
			end--
		}
	}
	i := end
	for i > 0 && int64(ln.kept[i-1].seq) > last {
		i--
	}
	for _, b := range ln.kept[i:end] {
		var n int64
		for _, it := range b.items {
			if it.k.epoch < t.limits[it.k.lim].oldest {
				continue // no longer written: as if dropped
			}
			t.pending[it.k] += it.n
			n += it.n
		}
		if n == 0 {
			continue // every count stale: nothing is sent again, nothing replayed
		}
		res.Replayed += n
		res.Batches[outReplayed]++
		t.m.batches.WithLabelValues(outReplayed.String()).Inc()
	}
	ln.kept = slices.Delete(ln.kept, i, end)
	// The sequence key lives as long as the counters (seqTTL); a lane idle for longer
	// starts again from 0 without having lost anything that still counts.
	if ln.forgot > 0 && int64(ln.forgot) > last && time.Duration(t.tickN-ln.forgotTick)*t.cfg.TickInterval < t.seqTTLDur() {
		res.Batches[outLost]++
		t.m.batches.WithLabelValues(outLost.String()).Inc()
		ln.forgot = 0 // reported once
	}
}

// forgetConfirmed stops keeping batches confirmed more than KeepConfirmed ago, counted
// in ticks that their lane's writes were answered in: a loss is revealed only by an
// answer, so a tick without one (Redis down, hung, refusing writes) must not age what it
// could need. Before, a Redis down for more than KeepConfirmed that came back empty (or a
// primary that died, replaced after Sentinel's 30 s) had every batch it lost forgotten.
// Batches are confirmed only in answered ticks, so a lane keeps at most KeepConfirmed's
// worth of ticks' batches, as before. A batch whose every count is of an epoch no longer
// written is let go too, whatever its age: recoverLost would send none of it again, and a
// lane no longer written to (its teams quiet) would otherwise keep its last batches for
// good. Called once the tick has each limiter's oldest epoch.
func (t *Ticker) forgetConfirmed() {
	keep := uint64(max(1, int64(t.cfg.KeepConfirmed/t.cfg.TickInterval)))
	for li := range t.lanes {
		ln := &t.lanes[li]
		n := 0
		for n < len(ln.kept) && ln.kept[n].answered+keep <= ln.answers {
			ln.forgot, ln.forgotTick = ln.kept[n].seq, ln.kept[n].tick
			n++
		}
		if n > 0 {
			clear(ln.kept[:n])
			ln.kept = slices.Delete(ln.kept, 0, n)
		}
		ln.kept = slices.DeleteFunc(ln.kept, func(b *batch) bool {
			for _, it := range b.items {
				if it.k.epoch >= t.limits[it.k.lim].oldest {
					return false
				}
			}
			return true
		})
	}
}

// dropStaleDoubt forgets batches in doubt whose every count is of an epoch no longer
// written (prepare's step 1 dropped those counts from pending and counted them). In a
// batch that keeps live counts, a stale one's increment becomes 0, which the script
// skips: counted dropped, it must not be written by the resend. Its key keeps its place,
// as a repeat's reply names the counters that failed by their position in the batch.
func (t *Ticker) dropStaleDoubt() {
	for li := range t.lanes {
		ln := &t.lanes[li]
		ln.doubt = slices.DeleteFunc(ln.doubt, func(b *batch) bool {
			live := false
			for j, it := range b.items {
				if it.k.epoch < t.limits[it.k.lim].oldest {
					b.items[j].n = 0
				} else {
					live = true
				}
			}
			return !live
		})
	}
}

// addTo adds n to m[k], deleting the key at zero or below.
func (t *Ticker) addTo(m map[countKey]int64, k countKey, n int64) {
	v, ok := m[k]
	if !ok {
		return
	}
	if v += n; v <= 0 {
		delete(m, k)
		return
	}
	m[k] = v
}
