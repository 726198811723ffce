package consume

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// An error of the group session that the client retries (here the join answered
// UNKNOWN_SERVER_ERROR a few times) is warned of as the session's, not as a fetch of
// partition 0 of no topic, which it named before.
func TestGroupSessionErrorSaidAsTheSessions(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	env.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.JoinGroup}, Group: testGroup, Err: kerr.UnknownServerError, Count: 3})
	logs := &syncBuffer{}
	env.logs, env.logLevel = logs, slog.LevelInfo
	g := env.start(t, "a")
	waitFor(t, 30*time.Second, "ready once the join is taken", g.c.Ready)
	var lines []string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "UNKNOWN_SERVER_ERROR") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 || !strings.Contains(lines[0], "consumer group session failed; the client retries") || strings.Contains(lines[0], `"partition"`) {
		t.Errorf("lines naming the join's error %q; want the first to say the group session failed, naming no partition", lines)
	}
}
