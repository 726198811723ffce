package consume

import (
	"strings"
	"testing"
	"time"
)

// TestTransactionsBeginAgainIsLogged: exactly once, the transaction coordinator becomes
// unavailable and the rebuilt client cannot set its producer id up: the gate warns and is
// not ready, naming the transactional id. When the coordinator is back it must say so in
// its log too, as every other not-ready condition does. Before, the reason left /readyz
// with no line: the last word in the log was the warning.
func TestTransactionsBeginAgainIsLogged(t *testing.T) {
	t.Parallel()
	env := newEOSEnv(t, 1)
	var logs logSink
	env.logs = &logs
	g, down := coordinatorLostAfterACommit(t, env)
	waitFor(t, 30*time.Second, "not ready, naming the transactional id", func() bool {
		return strings.Contains(strings.Join(g.c.NotReady(), ";"), "no transaction can begin")
	})
	down.Store(false)
	waitFor(t, 30*time.Second, "ready again", g.c.Ready)
	waitFor(t, 5*time.Second, "the recovery logged", func() bool {
		return strings.Contains(logs.String(), "transactional producer initialised")
	})
}
