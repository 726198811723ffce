package consume

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capturegate/gate/internal/route"
)

// newLogRouter serves partition 0's records at offsets [from, to) as a broker's new log
// would after an unclean leader election: the first time each is routed it is team
// "hot"'s, every later time team "cold"'s (kfake keeps the old records at those offsets,
// so the new log's other records are made here).
type newLogRouter struct {
	Router
	from, to int64
	mu       sync.Mutex
	seen     map[int64]int
}

func (n *newLogRouter) RouteInto(now time.Time, in *kgo.Record, sc *route.Scratch, out *kgo.Record) route.Outcome {
	if in.Partition == 0 && in.Offset >= n.from && in.Offset < n.to {
		n.mu.Lock()
		n.seen[in.Offset]++
		first := n.seen[in.Offset] == 1
		n.mu.Unlock()
		team := "cold"
		if first {
			team = "hot"
		}
		var e event
		_ = json.Unmarshal(in.Value, &e)
		e.TeamID = team
		in.Value, _ = json.Marshal(e)
	}
	return n.Router.RouteInto(now, in, sc, out)
}

// TestBrokerLossAboveCommitNewLogJudgedAfresh: the broker's log of partition 0 diverges
// at 65, above the last commit (50), while offsets 50..79 are in an open transaction
// (TestBrokerLossInOpenTransaction). The transaction aborts and the partition is read
// again from 50; the records at 65..79 are the new leader's, other records than the
// ones routed (here another team's, under its limit): judged afresh, by their own team's
// level, and counted. Before, the loss met in the transaction left the partition counted
// to 80 (resumeTxnGaps uncounts only for a divergence below the commit): the new records
// were routed as replays, not counted, and given the decisions kept for the old records
// at their offsets (route.Decisions): team "hot"'s, over its threshold of 1, to overflow.
func TestBrokerLossAboveCommitNewLogJudgedAfresh(t *testing.T) {
	t.Parallel()
	env, g, prod, stop := lossInTxnEnv(t, DataLossContinue, func(env *gateEnv) {
		env.lcfg.Overrides = map[string]int64{"hot": 1}
		env.wrap = func(r Router) Router { return &newLogRouter{Router: r, from: 65, to: 80, seen: map[int64]int{}} }
	})
	// The log diverged at 65; the fetch at 80 is out of range once.
	env.cluster.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		return epochEnds(kreq, func(p int32) int64 {
			if p == 0 {
				return 65
			}
			return 1 << 40
		}), nil, true
	})
	env.cluster.Fault(kfakeOutOfRangeOnce(0))
	produceTo(t, prod, 0, 200, 10) // offsets 80..89
	waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "broker") > 0 })
	stop()
	waitFor(t, 30*time.Second, "partition 0 committed to its end", func() bool {
		return env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 90
	})
	out := collect(t, env.cluster, 50+30+10, 20*time.Second, 300*time.Millisecond, readCommitted())
	g.stop(t)
	var over []int
	for id := 115; id < 130; id++ {
		for _, topic := range out.ids[id] {
			if topic != accTopic {
				over = append(over, id)
			}
		}
	}
	if len(over) > 0 {
		t.Errorf("the new log's records at offsets 65..79 (team cold, under its limit): %d of 15 not accepted (ids %v): "+
			"given the decisions of the old records at their offsets (team hot, over its limit)", len(over), over)
	}
	if st, ok := g.lim.Snapshot(time.Now(), "cold"); !ok || st.Pending != 15 {
		t.Errorf("team cold counted %v (known %v), want 15: the new log's records were taken for replays", st.Pending, ok)
	}
}

// kfakeOutOfRangeOnce makes one fetch of partition p of the input answer
// OFFSET_OUT_OF_RANGE.
func kfakeOutOfRangeOnce(p int32) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: inTopic, Partitions: []int32{p}, Err: kerr.OffsetOutOfRange, Count: 1}
}

// teamRouter makes partition 0's records at offsets [from, to) team's, and keeps where
// each went the first time it was routed.
type teamRouter struct {
	Router
	team     string
	from, to int64
	mu       sync.Mutex
	first    map[int64]route.Route
}

func (n *teamRouter) RouteInto(now time.Time, in *kgo.Record, sc *route.Scratch, out *kgo.Record) route.Outcome {
	mine := in.Partition == 0 && in.Offset >= n.from && in.Offset < n.to
	if mine {
		var e event
		_ = json.Unmarshal(in.Value, &e)
		e.TeamID = n.team
		in.Value, _ = json.Marshal(e)
	}
	o := n.Router.RouteInto(now, in, sc, out)
	if mine {
		n.mu.Lock()
		if _, ok := n.first[in.Offset]; !ok {
			n.first[in.Offset] = o.Route
		}
		n.mu.Unlock()
	}
	return o
}

// TestRetentionGapInsideCountedSpanGoesWhereItWent: partition 0's records at offsets
// 50..79, a team's whose threshold is 20, are routed in a transaction (20 accepted, 10
// to overflow, all 30 counted); retention then deletes the partition up to 65, and the
// transaction aborts (a failed produce). Read again from the commit (50), the fetch is
// out of range and the gap is handled outside a transaction (applyGap -> goOnAt): the
// records at 65..79 are the same records, and go where they went, counted once (the
// limiter 30). Before, goOnAt uncounted the partition from 65 as if its log had diverged
// there: those records were counted a second time and, their decisions dropped, judged
// afresh against levels holding the first attempt's counts (65..69, accepted the first
// time, to overflow).
func TestRetentionGapInsideCountedSpanGoesWhereItWent(t *testing.T) {
	t.Parallel()
	tr := &teamRouter{team: "near", from: 50, to: 80, first: map[int64]route.Route{}}
	env, g, _, stop := lossInTxnEnv(t, DataLossContinue, func(env *gateEnv) {
		env.lcfg.Overrides = map[string]int64{"near": 20}
		env.wrap = func(r Router) Router { tr.Router = r; return tr }
	})
	if err := env.cluster.DeleteRecords(inTopic, 0, 65); err != nil {
		t.Fatal(err)
	}
	abortOne(t, env, g)
	waitFor(t, 30*time.Second, "the loss counted", func() bool { return lostMetric(t, g.reg, 0, "retention") > 0 })
	stop()
	waitFor(t, 30*time.Second, "partition 0 committed to its end", func() bool {
		return env.cluster.GroupInfo(testGroup).Commits[inTopic][0].Offset == 80
	})
	out := collect(t, env.cluster, 50+15, 20*time.Second, 300*time.Millisecond, readCommitted())
	g.stop(t)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var moved []string
	for off := int64(65); off < 80; off++ {
		id := int(off) + 50
		want := accTopic
		if tr.first[off] != route.Accepted {
			want = ovfTopic
		}
		if got := out.ids[id]; len(got) != 1 || got[0] != want {
			moved = append(moved, strconv.Itoa(id)+": "+strings.Join(got, ",")+" (first "+want+")")
		}
	}
	if len(moved) > 0 {
		t.Errorf("records at offsets 65..79, kept by retention, not where their first routing sent them: %v", moved)
	}
	if st, ok := g.lim.Snapshot(time.Now(), "near"); !ok || st.Pending != 30 {
		t.Errorf("team near counted %v, want 30 (its 30 records once)", st.Pending)
	}
}
