package consume

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A gate whose preflight fails (here an output topic not created: a rollout's first pod
// with a setting naming a topic that does not exist yet) joins no group, so the gates
// that can route keep every partition: it joined as soon as its client was built, took
// its share of the partitions and routed none of them until a check passed (38 of 100
// records unrouted in a black-box run). Once the topic is created it joins and routes.
func TestFailingPreflightTakesNoPartition(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			const parts, n = 4, 200
			env := newEnv(t, parts)
			if mode == "exactly-once" {
				env = newEOSEnv(t, parts)
			}
			a := env.start(t, "a")
			waitFor(t, 30*time.Second, "gate a owning every partition", func() bool {
				a.c.partsMu.Lock()
				defer a.c.partsMu.Unlock()
				return len(a.c.parts) == parts
			})
			env.ccfg.OutputTopics = append(slices.Clone(env.ccfg.OutputTopics), "not-created")
			b := env.start(t, "b")
			waitFor(t, 30*time.Second, "gate b's preflight to fail on the topic", func() bool {
				return slices.ContainsFunc(b.c.NotReady(), func(s string) bool { return strings.Contains(s, `"not-created" does not exist`) })
			})
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = inputRecord(i, "team-"+string(rune('a'+i%7)))
			}
			produceAll(t, producer(t, env.cluster), recs)
			var opts []kgo.Opt
			if mode == "exactly-once" {
				opts = append(opts, readCommitted())
			}
			out := collect(t, env.cluster, n, 60*time.Second, 300*time.Millisecond, opts...)
			if lost, dup := out.conservation(n); len(lost) > 0 || len(dup) > 0 {
				t.Errorf("with gate b failing its preflight: %d records unrouted %v, %d twice", len(lost), head(lost), len(dup))
			}
			b.c.partsMu.Lock()
			held := len(b.c.parts)
			b.c.partsMu.Unlock()
			if held != 0 {
				t.Errorf("gate b, failing its preflight, holds %d partitions", held)
			}
			if gi := env.cluster.GroupInfo(testGroup); gi == nil || len(gi.Members) != 1 {
				t.Errorf("the group while gate b fails its preflight: %+v, want gate a alone", gi)
			}
			// The topic created, gate b's next check passes and it joins: it is given
			// partitions and routes what comes to them.
			if _, err := kadm.NewClient(producer(t, env.cluster)).CreateTopic(t.Context(), 1, 1, nil, "not-created"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 60*time.Second, "gate b joined, owning partitions", func() bool {
				b.c.partsMu.Lock()
				defer b.c.partsMu.Unlock()
				return len(b.c.parts) > 0
			})
		})
	}
}
