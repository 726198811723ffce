// Sending a plan: one pipeline per instance (per primary in cluster mode), all in
// parallel, each under the tick's deadline, so a node that hangs fails its own commands
// and no other node's. Every command's error is read, not only the pipeline's, because a
// pipeline can partly fail (writes refused while reads are answered); TRYAGAIN is no
// failure, and what it refused goes again next tick.

package tick

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/tlsreload"
)

// send runs the given parts of every instance's plan, one pipeline per instance, in
// parallel, and counts their commands and failed pipelines in res.
func (t *Ticker) send(ctx context.Context, part int, res *TickResult) {
	var wg sync.WaitGroup
	for i := range t.plans {
		if p := &t.plans[i]; p.has(part) {
			wg.Go(func() { t.execute(ctx, i, p, part) })
		}
	}
	wg.Wait()
	for i := range t.plans {
		p := &t.plans[i]
		if !p.has(part) {
			continue
		}
		res.Commands += p.sent
		if p.sendErr != nil {
			res.Errors++
		}
	}
}

// carryPipelineErr gives err, a pipeline's error, to each of its commands when none
// carries an error: go-redis leaves them so when it could not open a connection for a
// reason that is a Redis reply (a login refused when the connection opens, by the
// primary or by the sentinels), and read as replies, an MGET without one has no values.
// A pipeline that ran returns its first command's error, which that command carries.
func carryPipelineErr(cmds []redis.Cmder, err error) {
	if err == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return
		}
	}
	for _, c := range cmds {
		c.SetErr(err)
	}
}

// execute sends one instance's pipeline: every batch of writes (writeScript: resends
// first, in order), then the reads in MGETs of up to KeysPerCommand keys of one lane. In
// cluster mode the one pipeline goes to the ClusterClient, which splits it by node and
// runs the parts in parallel.
func (t *Ticker) execute(ctx context.Context, i int, p *plan, part int) {
	start := time.Now()
	pipes := t.pipelines(ctx, i, p)
	if part&partWrites != 0 {
		t.queueWrites(ctx, p, pipes)
	}
	if part&partReads != 0 {
		t.queueReads(ctx, p, pipes)
	}
	errs := make([]error, len(pipes))
	late := make([]bool, len(pipes))
	took := make([]time.Duration, len(pipes)) // from start, as dur: 0 for a pipeline not sent
	var wg sync.WaitGroup
	p.sent, p.sendErr = 0, nil
	for j, pipe := range pipes {
		if n := pipe.Len(); n > 0 {
			p.sent += n
			wg.Go(func() {
				var cmds []redis.Cmder
				cmds, errs[j] = pipe.Exec(ctx)
				late[j] = ctx.Err() != nil
				took[j] = time.Since(start)
				carryPipelineErr(cmds, errs[j])
			})
		}
	}
	wg.Wait()
	if part == partWrites {
		// A split tick's write phase: the lanes whose pipeline waited to the deadline
		// (their node hung, or is too slow) have their reads failed unsent (queueReads).
		for _, li := range p.lanes {
			t.lanes[li].hung = late[t.partOf[li]]
		}
	}
	for _, err := range errs {
		if err != nil {
			p.sendErr = err
			break
		}
	}
	p.dur += time.Since(start)
	for j, node := range p.nodes { // cluster mode: each primary's own
		if took[j] > 0 {
			if p.nodeDur == nil {
				p.nodeDur = make(map[string]time.Duration, len(p.nodes))
			}
			p.nodeDur[node] += took[j]
		}
	}
	if part&partWrites != 0 {
		for _, b := range p.batches {
			if t.writes != nil {
				b.out, b.failed, b.err = t.writes.result(b)
			} else {
				b.out, b.failed, b.err = b.result(t.cfg.Mode == ModeCluster)
			}
			if b.err != nil && p.sendErr == nil {
				// A key that failed on its own, or whose TTL was refused: the script's reply
				// says which.
				p.sendErr = b.err
			}
		}
		t.m.commands.WithLabelValues(cmdEval).Add(float64(len(p.batches) + len(p.pcmds) + p.holdEvals))
		t.profileResults(p)
		t.m.commands.WithLabelValues(cmdSet).Add(float64(p.holdSets))
	}
	if part&partReads != 0 {
		t.m.commands.WithLabelValues(cmdMget).Add(float64(len(p.rcmds)))
	}
	if p.sendErr == nil {
		return
	}
	// Every command's error, not only the first: a pipeline can partly fail. TRYAGAIN (a
	// multi-key command on a slot in migration) is no failure of Redis: the command was not
	// run, its writes stay pending and its reads are made again next tick. Nor is an ASK
	// the client's redirects ran out on (a slot in migration too, counted as it came:
	// redirectHook): go-redis resends a node's whole pipeline when its first command
	// answers TRYAGAIN, and an ASK'd command of it goes to both nodes: the owner's ASK,
	// answered last, is what it keeps (in half of TestClusterSlotMigrationKeyByKey's runs).
	var causes causeSet
	// addCause adds c to the plan's causes, and in cluster mode to those of pipeline j's
	// primary (j < 0: no pipeline's).
	addCause := func(j int, c cause) {
		causes.add(c)
		if t.cfg.Mode != ModeCluster {
			return
		}
		node := ""
		if j >= 0 && j < len(p.nodes) {
			node = p.nodes[j]
		}
		if p.nodeCauses == nil {
			p.nodeCauses = make(map[string]causeSet)
		}
		p.nodeCauses[node] |= 1 << c
	}
	note := func(j int, err error) bool {
		if errors.Is(err, context.Canceled) {
			// The gate stopping cut the pipeline short, not Redis: what it did not
			// settle stays pending or in doubt, for the final flush.
			return false
		}
		if redis.IsTryAgainError(err) {
			p.tryAgain++
			t.m.redirects.WithLabelValues("tryagain").Inc()
			return false
		}
		if _, ask := redis.IsAskError(err); ask {
			p.tryAgain++
			return false
		}
		addCause(j, classify(err))
		p.refusedLogin = p.refusedLogin || loginRefusal(err)
		p.missingCommand = p.missingCommand || commandMissing(err)
		p.tlsCert = p.tlsCert || tlsreload.Refused(err)
		return true
	}
	if part&partWrites != 0 {
		// The pipelines (in cluster mode, the primaries) that refused writes for what every
		// gate meets there: their lanes' reads are applied as refused (applyReads), and only
		// theirs, as one full node of a cluster refuses no other's writes.
		var fleetRefused []bool
		refusedOn := func(lane int, err error) {
			if fleetRefusals&(1<<classify(err)) == 0 && !commandMissing(err) {
				return
			}
			if fleetRefused == nil {
				fleetRefused = make([]bool, len(pipes))
			}
			fleetRefused[t.partOf[lane]] = true
		}
		for _, b := range p.batches {
			switch {
			case b.out == outRefused && b.err == nil:
				p.failedWrites += len(b.items) // behind a batch not applied, noted as its own
			case b.out == outRefused || b.out == outUnknown:
				p.failedWrites += len(b.items)
				if note(t.partOf[b.lane], b.err) {
					refusedOn(b.lane, b.err)
				}
			case len(b.failed) > 0:
				p.failedWrites += len(b.failed)
				addCause(t.partOf[b.lane], causeRedis)
			case b.err != nil:
				addCause(t.partOf[b.lane], causeRedis) // written, a TTL refused
			}
		}
		for _, pc := range p.pcmds {
			if err := pc.cmd.Err(); err != nil && note(t.partOf[pc.lane], err) { // a profile write: no count is lost with it
				refusedOn(pc.lane, err)
			}
		}
		for _, li := range p.lanes {
			if fleetRefused != nil && fleetRefused[t.partOf[li]] {
				t.lanes[li].refused = true
			}
		}
	}
	if part&partReads != 0 {
		for _, rc := range p.rcmds {
			if err := rc.cmd.Err(); err != nil && note(t.partOf[rc.lane], err) && !rc.unsent {
				p.failedReads += len(rc.teams)
			}
		}
	}
	if causes == 0 && (p.tryAgain > 0 || errors.Is(p.sendErr, context.Canceled)) {
		p.sendErr = nil // only TRYAGAIN, or the gate stopping: nothing to report
		return
	}
	if causes == 0 {
		// An error no command carries: the pipelines' own, each its node's.
		for j, err := range errs {
			if err != nil && !errors.Is(err, context.Canceled) {
				addCause(j, classify(err))
			}
		}
		if causes == 0 {
			addCause(-1, classify(p.sendErr))
		}
	}
	if cc, ok := t.instances[i].(*redis.ClusterClient); ok && causes&^(1<<causeRedis|1<<causeOOM|1<<causeMisconf|1<<causeNoReplicas) != 0 {
		// The cluster client refreshes its slot map on MOVED, or every minute, but
		// not when a node stops answering, nor when a demoted primary answers READONLY:
		// without this, writes for a dead primary's slots would keep failing for up to
		// a minute after its replica took over.
		cc.ReloadState(ctx)
	}
	p.causes |= causes
	if p.err == nil {
		p.err = p.sendErr
	}
}

// queueWrites queues the plan's count batches and hold flags on its pipelines.
func (t *Ticker) queueWrites(ctx context.Context, p *plan, pipes []redis.Pipeliner) {
	seqTTL := t.seqTTL()
	for _, li := range p.lanes {
		t.lanes[li].queued = 0
	}
	now := t.limits[0].l.Clock().Now()
	for _, b := range p.batches {
		ln := &t.lanes[b.lane]
		pipe := pipes[t.partOf[b.lane]]
		if t.writes != nil {
			t.writes.queue(ctx, t, pipe, b)
			continue
		}
		keys := make([]string, 1, 1+len(b.items))
		keys[0] = ln.key
		args := make([]any, 4, 4+len(b.items))
		// The lane's batch before it in this pipeline, which it must not overtake.
		args[0], args[1], args[2], args[3] = b.seq, seqTTL, (b.ttl + KeyTTLMargin + t.createdEarly(b, now)).Milliseconds(), ln.queued
		ln.queued = b.seq
		for _, it := range b.items {
			keys = append(keys, t.key(it.k.lim, it.k.team, it.k.epoch))
			args = append(args, it.n)
		}
		// EVAL, not EVALSHA: a node that has not seen the script (restarted, promoted, a
		// slot's new owner, or its script cache evicted) runs it all the same, and the
		// hash Redis computes per call costs nothing measurable (docs/benchmarks.md).
		b.cmd = pipe.Eval(ctx, writeScript, keys, args...)
	}
	// Hold flags: not part of a batch, as setting a flag twice is harmless and one lost is
	// set again next tick. One command a lane (holdScript) per KeysPerCommand flags, or a
	// SET for a lane's only one. A rule keyed by user holds every user over its limit, and
	// a script holds Redis for every other client while it runs: 50,000 flags in one kept
	// another client's PING waiting up to 0.36 s, past the gates' read timeout (250 ms); in
	// scripts of 200, 9 ms.
	slices.SortStableFunc(p.holds, func(a, b holdWrite) int { return cmp.Compare(a.lane, b.lane) })
	p.holdSets, p.holdEvals = 0, 0
	for i := 0; i < len(p.holds); {
		j := i + 1
		for j < len(p.holds) && p.holds[j].lane == p.holds[i].lane {
			j++
		}
		pipe := pipes[t.partOf[p.holds[i].lane]]
		if j == i+1 {
			hw := p.holds[i]
			pipe.Set(ctx, hw.key, hw.val, hw.ttl)
			p.holdSets++
			i = j
			continue
		}
		for ; i < j; i += t.cfg.KeysPerCommand {
			hs := p.holds[i:min(i+t.cfg.KeysPerCommand, j)]
			keys := make([]string, 0, len(hs))
			args := make([]any, 0, 2*len(hs))
			for _, hw := range hs {
				keys = append(keys, hw.key)
				args = append(args, hw.val, max(hw.ttl.Milliseconds(), 1))
			}
			pipe.Eval(ctx, holdScript, keys, args...)
			p.holdEvals++
		}
		i = j
	}
	t.queueProfiles(ctx, pipes, p)
}

// queueReads queues the plan's reads on its pipelines.
func (t *Ticker) queueReads(ctx context.Context, p *plan, pipes []redis.Pipeliner) {
	for _, li := range p.lanes {
		reads := t.laneReads[li]
		pipe := pipes[t.partOf[li]]
		if t.lanes[li].hung && len(reads) > 0 {
			// Its node held this tick's write phase to the deadline: the read phase, which
			// Run gives time of its own for the other nodes' reads (the write phase used
			// up the tick's), fails these at once as that deadline would have, rather than
			// wait for them.
			cmd := redis.NewSliceCmd(ctx)
			cmd.SetErr(context.DeadlineExceeded)
			p.rcmds = append(p.rcmds, readCmd{cmd: cmd, teams: reads, lane: li, unsent: true})
			p.failedReads += len(reads)
			continue
		}
		for j := 0; j < len(reads); {
			// Up to KeysPerCommand keys: two counters per team, its hold flag if asked, and
			// its profile (appendReadKeys).
			var keys []string
			k := j
			for ; k < len(reads) && (k == j || len(keys)+readKeys(reads[k].r) <= t.cfg.KeysPerCommand); k++ {
				keys = t.appendReadKeys(keys, reads[k])
			}
			p.rcmds = append(p.rcmds, readCmd{cmd: pipe.MGet(ctx, keys...), teams: reads[j:k], lane: li})
			j = k
		}
	}
}

// pipelines returns the pipelines instance i's plan is sent in, and sets partOf for its
// lanes. One, except in cluster mode: one per primary, each still a ClusterClient
// pipeline (it follows MOVED and ASK) but holding one node's lanes only, so that a node
// that hangs fails its own commands when the tick's deadline ends the wait, not every
// node's: the cluster client's pipeline, once its deadline passes between retries, sets
// the deadline's error on all of its commands, those already answered too.
func (t *Ticker) pipelines(ctx context.Context, i int, p *plan) []redis.Pipeliner {
	cc, ok := t.instances[i].(*redis.ClusterClient)
	if !ok {
		for _, li := range p.lanes {
			t.partOf[li] = 0
		}
		return []redis.Pipeliner{t.instances[i].Pipeline()}
	}
	var pipes []redis.Pipeliner
	byNode := make(map[*redis.Client]int)
	p.nodes = p.nodes[:0]
	for _, li := range p.lanes {
		node, err := cc.MasterForKey(ctx, t.lanes[li].key)
		if err != nil {
			node = nil // no slot map: one pipeline, which reports the error
		}
		j, ok := byNode[node]
		if !ok {
			j = len(pipes)
			byNode[node] = j
			pipes = append(pipes, cc.Pipeline())
			addr := ""
			if node != nil {
				addr = node.Options().Addr
			}
			p.nodes = append(p.nodes, addr)
		}
		t.partOf[li] = j
	}
	return pipes
}

// createdEarly is how long before the start of its window, by Redis's clock, a counter of
// b that this write creates is created: the time this host's clock was last measured
// ahead of Redis's (clockCheck.ahead), less how far into its window the counter's epoch
// is by this host's. The TTL a counter gets on creation runs from then, and the fleet
// reads it until its window's start + its lifetime (the margin covering clocks within
// 30 s of each other): a gate a window ahead created its keys a window early, gone 30 s
// after their window ended while every other gate still read them as the previous one
// (TestCountersOutliveTheirWindowWhenTheWriterIsAhead). Redis's clock is the reference,
// as the clock check's: a key only ever lives longer for it, so a Redis whose own clock
// is off shortens none. 0 when this host is not ahead. At most the counter's own lifetime
// (b.ttl): a gate further ahead (a host booted before its time service set it, a day off)
// gave every counter it created that much more, a new set each window kept for a day,
// and the fleet read its counts a day on (TestCreatedEarlyIsBounded).
func (t *Ticker) createdEarly(b *batch, now time.Time) time.Duration {
	ahead := t.clockCheck.ahead
	if ahead <= 0 {
		return 0
	}
	redisNow := now.Add(-ahead).UnixNano()
	var early int64
	for _, it := range b.items {
		early = max(early, it.k.epoch*t.limits[it.k.lim].window-redisNow)
	}
	return min(time.Duration(early), b.ttl)
}

// seqTTL is how long a lane's sequence key lives, in ms: as long as the longest-lived
// counter, since a batch in doubt is resent until its epochs are no longer written.
func (t *Ticker) seqTTL() int64 { return t.seqTTLDur().Milliseconds() }

func (t *Ticker) seqTTLDur() time.Duration {
	var d time.Duration
	for _, ls := range t.limits {
		d = max(d, ls.ttl)
	}
	return d + KeyTTLMargin
}
