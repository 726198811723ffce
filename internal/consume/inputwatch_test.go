package consume

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestInputTopicDeletedStopsTheGate: an input topic deleted, or deleted and created
// again, under a running gate left it ready with no lag while its client failed every
// fetch with UNKNOWN_TOPIC_ID (thousands a second), never taking the new topic up: 50
// records written to the new topic went unrouted for 90 s on Apache Kafka. The gate
// stops with an error naming the topic, committing nothing onto the new topic, and a
// gate started again routes the new topic's records from its start. Both delivery modes.
func TestInputTopicDeletedStopsTheGate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		d         Delivery
		recreated bool
	}{{"deleted", AtLeastOnce, false}, {"recreated", AtLeastOnce, true}, {"recreated exactly once", ExactlyOnce, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t, 2)
			env.ccfg.WatchInterval = 50 * time.Millisecond
			env.ccfg.Delivery = tc.d
			if tc.d == ExactlyOnce {
				env.ccfg.TransactionTimeout = 10 * time.Second
			}
			g := env.start(t, "a")
			prod := producer(t, env.cluster)
			produceAll(t, prod, teamInputs("team-1", 0, 10))
			collect(t, env.cluster, 10, 30*time.Second, 0, readCommitted())
			adm := kadm.NewClient(prod)
			if _, err := adm.DeleteTopic(t.Context(), inTopic); err != nil {
				t.Fatal(err)
			}
			if tc.recreated {
				if _, err := adm.CreateTopic(t.Context(), 2, 1, nil, inTopic); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			select {
			case err = <-g.done:
				g.cancel = nil // stopped by itself
			case <-time.After(60 * time.Second):
				t.Fatal("the gate still runs 60 s after its input topic was deleted")
			}
			gone, ok := errors.AsType[*InputGoneError](err)
			if !ok || gone.Topic != inTopic {
				t.Fatalf("Run returned %v; want an InputGoneError naming %s", err, inTopic)
			}
			if !tc.recreated {
				if _, err := adm.CreateTopic(t.Context(), 2, 1, nil, inTopic); err != nil {
					t.Fatal(err)
				}
			}
			// Nothing of the old topic's offsets committed onto the new one: a gate started
			// again routes the new topic's records from its start.
			var again []*kgo.Record
			for id := 10; id < 20; id++ {
				again = append(again, inputRecord(id, "team-1"))
			}
			produceAll(t, producer(t, env.cluster), again) // a client of its own: prod keeps the old topic's id
			env.start(t, "b")
			out := collect(t, env.cluster, 20, 30*time.Second, 0, readCommitted())
			for id := 10; id < 20; id++ {
				if len(out.ids[id]) == 0 {
					t.Errorf("record %d of the new topic not routed by the gate started again", id)
				}
			}
		})
	}
}

// TestInputTopicInDoubtCommitsNothing: between the input topic's deletion and the watch
// round that tells it (5 to 10 s by default), the commits went on by topic name: on a
// topic created again meanwhile they became the new topic's offsets, its first records
// skipped by the gate started again. A fetch failing with UNKNOWN_TOPIC_ID or
// UNKNOWN_TOPIC_OR_PARTITION puts the input in doubt, and nothing is committed until the
// watch has found the topic as it was.
func TestInputTopicInDoubtCommitsNothing(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.ccfg.WatchInterval = time.Hour // no watch round: the doubt stands
	g := env.start(t, "a")
	prod := producer(t, env.cluster)
	produceAll(t, prod, []*kgo.Record{inputRecord(0, "team-1")})
	collect(t, env.cluster, 1, 30*time.Second, 0)
	if _, err := kadm.NewClient(prod).DeleteTopic(t.Context(), inTopic); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the input in doubt", g.c.inputDoubt.Load)
	if _, err := g.c.commit(t.Context(), true, nil); !errors.Is(err, errInputDoubt) {
		t.Errorf("a commit with the input in doubt: %v, want errInputDoubt", err)
	}
}
