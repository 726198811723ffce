// Writing counts: the write script, the lanes and batches it runs on, and what its reply
// means. A lane (an instance; a hash tag in cluster mode) numbers this writer's batches,
// and the script applies a batch only if its number is above the lane's last and the
// lane's batch before it in the same pipeline was applied: a batch resent after a lost
// reply is applied at most once, and a lane's batches in the order of their numbers.
// A refusal (OOM, READONLY, MISCONF) stops the script before it changes anything. Each
// reply says where the lane stood before it, which reveals batches Redis acknowledged and
// then lost (settle.go).

package tick

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// writeScript adds one batch of counts to Redis at most once. KEYS[1] is the writer's
// sequence key on the lane, KEYS[2..] the counters, of any limiters whose counters live
// as long (limitState.ttlGroup): a gate's rules of one window share its commands; ARGV is the
// batch's sequence number, the sequence key's TTL and the counters' TTL in ms, the number
// of the lane's batch before it in the same pipeline (0: none), then each counter's
// increment.
//
// A batch whose number is not above the one the lane last took is a repeat of a batch
// already applied (its first reply was lost: a timeout, a stall, a broken connection) and
// changes nothing: that is what makes a write safe to send again. That holds only while a
// lane's batches are applied in the order of their numbers, and one pipeline can hold
// several of a lane's (a tick's counts past KeysPerCommand, or of limits of other
// lifetimes): when one is not run (TRYAGAIN on a slot in migration, kept in doubt with its
// number), a later one applied past it would make its resend look applied, its counts
// never written. So a batch whose predecessor in the pipeline has not been applied is not
// applied either ({2, last}: refused, its counts go in a new batch), and the predecessor's
// resend finds the lane where it left it. The sequence number is
// set before any counter, with redis.call, so a refusal (OOM, READONLY, MISCONF) stops the
// script before it changes anything. A counter that fails on its own (a key of the wrong
// type) is skipped with redis.pcall and its position returned, so its count is kept and
// sent again under a new number. A counter gets its TTL when this write created it (the
// reply equals the increment): one PEXPIRE per key and epoch instead of one per write.
// An increment of 0 is skipped, creating no key: a stale count taken out of a batch in
// doubt, its key kept in place (dropStaleDoubt).
// Each increment goes to INCRBY as the string it came in: a Lua number passed to
// redis.call is formatted back into a string by the server, which cost one gate's ticks
// about a tenth of their Redis CPU on redis-server 7.0 (BenchmarkFleetRedis, one gate:
// 0.0087 → 0.0078 CPU-s a second; four: 0.0064 → 0.0053 each).
// What the script costs Redis, against INCRBY + EXPIRE per count: docs/benchmarks.md.
//
// The sequence key holds the lane's number, the number it held before the run of batches
// the latest belongs to, and that run's first batch ("7 4:6"): a run is a lane's batches
// applied one after another, each found its predecessor in the pipeline just applied (a
// batch with none begins one). Then the resend of the lane's latest batch after a lost
// reply, found a repeat, still says where the lane stood before the run: the first write
// after Redis lost batches is the one whose reply reveals the loss, and a reply lost then
// hid it for good; with two of a lane's batches in one pipeline, both replies lost, the
// second alone would say only that the first was applied (TestLossFoundThoughTwoBatchesInDoubt).
// The run's first batch bounds what that reveals: batches confirmed below it and above the
// number before it were lost; the run's own, confirmed by the resends before the latest's,
// were not. A value without a run ("7 4", "7") is read as a run of its latest batch.
// A batch with counters that failed keeps their positions there too ("7 4:6 2,5"), so that
// its resend, found a repeat, hands them back and their counts stay pending: else they
// would be taken as written, lost. Only the lane's latest batch keeps them (an earlier
// one of two in doubt would not), and only until the lane's next batch; a counter failing
// is an operator's error (a key of the wrong type) in any case.
//
// Reply: {1, last, position, error, position, error...} when applied, for each counter
// that failed, and -position for one written whose PEXPIRE was refused (an ACL without
// it: the key would never expire, which an error must say; its count is in, not to be
// sent again); {0, last} when a repeat, {0, before, "position,position...", first} when a
// repeat of the lane's latest batch (before: the number the lane held before its run;
// positions: its counters that failed then, if any; first: the run's first batch); {2,
// last} when its predecessor was not applied; last is the number the lane held before. A
// last (or before) below a number this writer saw applied means Redis lost batches it had
// acknowledged (a failover promoted a replica that had not received them, or Redis
// restarted without them): the tick sends those again from what it kept
// (Config.KeepConfirmed).
const writeScript = `
local seq = tonumber(ARGV[1])
local cur = redis.call('GET', KEYS[1])
local last, before, start, failed = 0, 0, 0, ''
if cur then
  local l, b, s, f = string.match(cur, '^(%d+) ?(%d*):?(%d*) ?([%d,]*)$')
  last = tonumber(l) or 0
  before, start, failed = tonumber(b) or last, tonumber(s) or last, f or ''
end
if seq <= last then
  if seq == last then return {0, before, failed, start} end
  return {0, last}
end
local pred = tonumber(ARGV[4])
if last < pred then return {2, last} end
if pred == 0 or last ~= pred then before, start = last, seq end
local head = ARGV[1] .. ' ' .. before .. ':' .. start
redis.call('SET', KEYS[1], head, 'PX', ARGV[2])
local ttl = ARGV[3]
local pcall = redis.pcall
local out = {1, last}
for i = 2, #KEYS do
  local a = ARGV[i+3]
  if a ~= '0' then
    local v = pcall('INCRBY', KEYS[i], a)
    if v == tonumber(a) then
      local e = pcall('PEXPIRE', KEYS[i], ttl)
      if type(e) == 'table' then
        out[#out+1] = 1-i
        out[#out+1] = e.err
      end
    elseif type(v) == 'table' then
      out[#out+1] = i-1
      out[#out+1] = v.err
    end
  end
end
if #out > 2 then
  local f = {}
  for j = 3, #out, 2 do if out[j] > 0 then f[#f+1] = out[j] end end
  if #f > 0 then
    redis.call('SET', KEYS[1], head .. ' ' .. table.concat(f, ','), 'PX', ARGV[2])
  end
end
return out`

// holdScript sets up to KeysPerCommand of a lane's hold flags (limit.HoldFlag) in one
// command, where a SET each cost a gate whose rules held a dozen teams a dozen commands a
// tick. KEYS are the flags;
// ARGV each one's value and TTL in ms. Each flag is set on its own (redis.pcall), as the
// SETs were: one refused does not stop the others, and the last refusal is the reply, so
// that it is counted and logged as a refused SET was.
const holdScript = `
local pcall = redis.pcall
local err
for i = 1, #KEYS do
  local r = pcall('SET', KEYS[i], ARGV[2*i-1], 'PX', ARGV[2*i])
  if type(r) == 'table' and r.err then err = r end
end
if err then return err end
return #KEYS`

// KeyTTLMargin is added to a counter's TTL: it is set when the key is created, which can
// be a little before its epoch began on another gate's clock (clock skew), and the key must
// outlive every gate's use of it. The docs state it (cmd/gate TestDocsStateKeyLifetimes).
// A gate whose clock check measured it further ahead of Redis's adds that too (createdEarly).
const KeyTTLMargin = 30 * time.Second

// ClusterShards is how many lanes cluster mode spreads teams over. A lane is one hash tag
// ({sN}), so one slot: its writes go in multi-key scripts and its reads in multi-key MGETs,
// which one slot allows. 256 tags spread over the 16,384 slots evenly enough for clusters
// of up to a few dozen primaries, and keep batches large (a tick writing 17,000 teams
// sends about 67 per script). Changing it changes every key: it is part of the layout.
const ClusterShards = 256

// lane is one sequence of writes: an instance in standalone and sentinel mode, one of
// ClusterShards hash tags in cluster mode. Invariant: batches of a lane reach Redis in the
// order of their numbers (one pipeline per instance per tick, in order on one connection;
// a lane's keys live on one node), and while a lane has batches in doubt no new batch is
// made for it, so a batch resent with its number is never skipped for a later one.
type lane struct {
	inst  int
	key   string   // this writer's sequence key on the lane
	seq   uint64   // the last number given
	doubt []*batch // sent, outcome unknown: resent as they are, in order, until answered
	kept  []*batch // confirmed in the lane's last KeepConfirmed of answered ticks, in order: sent again if Redis loses them
	// answers is how many ticks the lane's writes were answered in (the script's reply,
	// which says where the lane stood), the last at tick answeredAt: a kept batch ages by
	// them, not by the tick. Only an answer can reveal that Redis lost batches, so while
	// none comes (Redis down, hung, refusing writes) the batches such a loss would need
	// stay kept; nothing is confirmed meanwhile, so what is kept does not grow.
	answers, answeredAt uint64
	// The newest batch no longer kept, and when it was confirmed: a loss reaching back to
	// it is reported as beyond recovery.
	forgot     uint64
	forgotTick uint64
	// queued is the number of the lane's last batch queued in the pipeline being built
	// (queueWrites): the next one must not be applied unless it was (writeScript).
	queued uint64
	// hung: this tick's write phase waited for the lane's node to the deadline (execute);
	// its read phase fails the lane's reads unsent (queueReads).
	hung bool
	// refused: this tick's writes to the lane's node (its instance; in cluster mode its
	// primary, whichever lane they were for) were refused for what every gate meets there
	// (execute, fleetRefused), so its reads hold the other gates' counts only as predicted
	// (applyReads).
	refused bool
}

// batch is one run of writeScript: up to KeysPerCommand counts of one lane and limiter.
type batch struct {
	lane int
	// ttl is its counters' lifetime (limitState.ttl): a batch holds counters of any limits
	// of one lifetime, as the script sets one.
	ttl   time.Duration
	seq   uint64
	items []item
	doubt bool   // sent before without an answer
	tick  uint64 // when confirmed (Ticker.tickN)
	// answered is the lane's answers when it was confirmed: kept until KeepConfirmed's
	// worth of ticks more were answered (forgetConfirmed).
	answered uint64
	cmd      *redis.Cmd

	// This tick's result (result).
	out    outcome
	failed []int64
	err    error
	last   int64 // the lane's number before this batch (or its run, in a repeat's reply), as the script read it
	// first is the first batch of the run a repeat of the lane's latest batch was applied
	// in (writeScript), 0 when the reply did not say: batches confirmed from it on are the
	// run's own, not lost whatever last says.
	first int64
}

type item struct {
	k countKey
	n int64
}

// outcome is what became of a batch in a tick.
type outcome uint8

const (
	outApplied   outcome = iota // the script added it
	outDuplicate                // the script found it applied already: a resend after a lost reply
	outRefused                  // an error reply: not applied
	outUnknown                  // no reply: maybe applied; resent as it is
	outReplayed                 // confirmed earlier, then lost by Redis: its counts sent again
	outLost                     // confirmed earlier, then lost by Redis, no longer kept: gone
	numOutcomes
)

func (o outcome) String() string {
	return [...]string{"applied", "duplicate", "refused", "unknown", "replayed", "lost"}[o]
}

// result reads a batch's reply: its outcome and, when applied, the positions (from 1) of
// counters that failed on their own, with the first one's error. cluster: the client is a
// Redis Cluster's, which resends a pipeline by itself (resentOn).
func (b *batch) result(cluster bool) (outcome, []int64, error) {
	v, err := b.cmd.Slice()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && !(cluster && resentOn(err)) {
			return outRefused, nil, err
		}
		return outUnknown, nil, err
	}
	if len(v) == 0 {
		return outUnknown, nil, errors.New("tick: empty reply from the write script")
	}
	if len(v) < 2 {
		return outUnknown, nil, fmt.Errorf("tick: short reply from the write script: %v", v)
	}
	b.last, _ = v[1].(int64)
	b.first = 0
	switch x, _ := v[0].(int64); x {
	case 0:
		// A repeat; of the lane's latest batch, with the positions of its counters that
		// failed when it was applied, and its run's first batch.
		if len(v) > 3 {
			b.first, _ = v[3].(int64)
		}
		var failed []int64
		if len(v) > 2 {
			ps, _ := v[2].(string)
			for p := range strings.SplitSeq(ps, ",") {
				if i, perr := strconv.ParseInt(p, 10, 64); perr == nil {
					failed = append(failed, i)
					if args := b.cmd.Args(); err == nil && 3+int(i) < len(args) {
						err = fmt.Errorf("writing %v: failed when first applied, its reply lost", args[3+int(i)])
					}
				}
			}
		}
		return outDuplicate, failed, err
	case 2:
		return outRefused, nil, nil // its predecessor's failure is the one to report
	}
	var failed []int64
	for j := 2; j+1 < len(v); j += 2 {
		i, ok := v[j].(int64)
		if !ok {
			continue
		}
		args := b.cmd.Args() // eval, script, numkeys, KEYS...
		if i < 0 {
			// Written, its TTL refused (an ACL without PEXPIRE): the count is in, but the
			// key never expires, which only an error says.
			if err == nil && 3-int(i) < len(args) {
				err = fmt.Errorf("PEXPIRE %v refused: the counter, written, never expires: %v", args[3-int(i)], v[j+1])
			}
			continue
		}
		failed = append(failed, i)
		if err == nil && 3+int(i) < len(args) {
			err = fmt.Errorf("writing %v: %v", args[3+int(i)], v[j+1])
		}
	}
	return outApplied, failed, err
}

// laneKey is the sequence key of writer on a lane: {prefix}:w:{writer}:seq in standalone and
// sentinel mode, {prefix}:{sN}:w:{writer}:seq in cluster mode (the lane's tag, so one
// script can hold it and the lane's counters). No counter key can take this form: a
// counter's last part is its epoch, a number.
func laneKey(m Mode, prefix, writer string, shard int) string {
	if m == ModeCluster {
		return prefix + ":{s" + strconv.Itoa(shard) + "}:w:" + writer + ":seq"
	}
	return prefix + ":w:" + writer + ":seq"
}

// batchWriter writes a tick's count batches in place of writeScript (Ticker.writes):
// queue puts b's commands on pipe, result reads what became of them once it has run.
type batchWriter interface {
	queue(ctx context.Context, t *Ticker, pipe redis.Pipeliner, b *batch)
	result(b *batch) (outcome, []int64, error)
}
