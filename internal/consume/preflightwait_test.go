package consume

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestPreflightProblemFixedClearsWhileItWaits: the preflight finds the dead-letter topic
// missing (and the transaction coordinator not available); the operator creates the
// topic, and the next preflight, finding only the coordinator (an answer a retry cures,
// waited on quietly for a while), says the topic no more. /readyz went on saying the
// topic did not exist until the wait's 30 s were up (a review).
func TestPreflightProblemFixedClearsWhileItWaits(t *testing.T) {
	env := newEOSEnv(t, 1)
	env.ccfg.PreflightInterval = 100 * time.Millisecond
	env.ccfg.OutputTopics = []string{accTopic, ovfTopic, dlqTopic}
	var asked atomic.Int64
	var down atomic.Bool
	down.Store(true)
	txnCoordinatorUnavailable(env.cluster, &down, &asked)
	adm := kadm.NewClient(producer(t, env.cluster))
	if _, err := adm.DeleteTopics(t.Context(), dlqTopic); err != nil {
		t.Fatal(err)
	}
	g := env.start(t, "a")
	waitFor(t, 20*time.Second, "the preflight naming the dead-letter topic", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), "; "), `topic "dead-letter" does not exist`)
	})
	if _, err := adm.CreateTopic(t.Context(), 3, 1, nil, dlqTopic); err != nil {
		t.Fatal(err)
	}
	n := asked.Load()
	waitFor(t, 20*time.Second, "two more preflights", func() bool { return asked.Load() >= n+3 })
	if why := strings.Join(g.c.NotReady(), "; "); strings.Contains(why, `topic "dead-letter" does not exist`) {
		t.Errorf("the dead-letter topic exists, and the gate still says: %s", why)
	}
}
