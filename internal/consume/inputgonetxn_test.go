package consume

import (
	"errors"
	"testing"
	"time"
)

// TestInputGoneAbortsTheOpenTransaction: exactly once, the input watch finding the topic
// gone while a transaction holding its records is open (routing over, the transaction
// filling) ended the run as a shutdown does, which commits what was routed: the old
// topic's offsets were committed onto the topic's name, all 10 records visible to a
// read_committed reader. The transaction aborts.
func TestInputGoneAbortsTheOpenTransaction(t *testing.T) {
	t.Parallel()
	env, g := openTransactionOfTen(t)
	g.c.inputGone(&InputGoneError{Topic: inTopic, Recreated: true})
	var err error
	select {
	case err = <-g.done:
		g.cancel = nil
	case <-time.After(30 * time.Second):
		t.Fatal("still running")
	}
	if _, ok := errors.AsType[*InputGoneError](err); !ok {
		t.Errorf("Run returned %v", err)
	}
	nothingCommitted(t, env, "after the input was found gone")
}

// TestInputInDoubtAbortsTheOpenTransaction: exactly once, a transaction ending while the
// input is in doubt (a fetch failed UNKNOWN_TOPIC_ID, the watch yet to look) aborts, here
// at a graceful stop, which otherwise commits what was routed: its offsets would go by the
// topic's name onto a topic created again.
func TestInputInDoubtAbortsTheOpenTransaction(t *testing.T) {
	t.Parallel()
	env, g := openTransactionOfTen(t)
	g.c.inputDoubt.Store(true)
	g.stop(t)
	nothingCommitted(t, env, "with the input in doubt")
}

// openTransactionOfTen starts an exactly-once gate whose transaction holds 10 records
// routed and stays open (its interval 5 minutes), nothing committed yet.
func openTransactionOfTen(t *testing.T) (*gateEnv, *testGate) {
	t.Helper()
	env := newEnv(t, 1)
	env.ccfg.Delivery = ExactlyOnce
	env.ccfg.TransactionTimeout = 6 * time.Minute
	// The transaction commits once its input is quiet for a tenth of the interval: 30 s,
	// well past what reading its 10 records takes on a loaded machine (at 2 s, a CI run
	// saw the commit before the check below).
	env.ccfg.TransactionInterval = 5 * time.Minute
	g := env.start(t, "a")
	prod := producer(t, env.cluster)
	produceAll(t, prod, teamInputs("team-1", 0, 10))
	collect(t, env.cluster, 10, 30*time.Second, 0) // read uncommitted: routed into the open transaction
	if gi := env.cluster.GroupInfo(testGroup); gi != nil {
		if gc, ok := gi.Commits[inTopic][0]; ok {
			t.Fatalf("committed %d with the transaction open: the test raced", gc.Offset)
		}
	}
	return env, g
}

// nothingCommitted fails t if the group committed an offset of the input or a
// read_committed reader finds a record on the outputs.
func nothingCommitted(t *testing.T, env *gateEnv, when string) {
	t.Helper()
	if gi := env.cluster.GroupInfo(testGroup); gi != nil {
		if gc, ok := gi.Commits[inTopic][0]; ok {
			t.Errorf("offset %d committed %s", gc.Offset, when)
		}
	}
	if out := collect(t, env.cluster, 10, 3*time.Second, 0, readCommitted()); len(out.ids) > 0 {
		t.Errorf("%d records of the open transaction committed %s", len(out.ids), when)
	}
}
