package consume

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A rule topic the gate started with is one of Config.OutputTopics (internal/gate lists
// it there for the preflight), but once a reload drops its rule, or while it is marked
// missing, the gate writes nothing to it: its max.message.bytes read again every
// TopicConfigInterval must not have the gate warn that its batch limit changed and that
// the gates need a restart. Before, the start-up rule topics were read again whatever
// became of them: a topic no rule used any more, its max.message.bytes changed, was
// named in a warning to restart the gates; one deleted and created again, in the moment
// before the rule topic check learned it anew, too.
func TestRetiredStartRuleTopicNotWritten(t *testing.T) {
	t.Parallel()
	env := newEnv(t, 1)
	const merges = "merges"
	env.ccfg.TopicConfigInterval = 100 * time.Millisecond
	logs := &syncBuffer{}
	env.logs = logs
	var describes atomic.Int64 // the reads of topic configs, the gate's and the test's
	env.cluster.ControlKey(kmsg.DescribeConfigs.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.cluster.KeepControl()
		describes.Add(1)
		return nil, nil, false
	})
	g, w, _ := startOnSmallRuleTopic(t, env, merges)
	defer g.stop(t)

	// Marked missing (its WRITE ACL revoked, say): not one of the topics written.
	w.SetMissing(merges, true)
	if got := g.c.writtenTopics(); slices.Contains(got, merges) {
		t.Errorf("written topics %v with %s marked missing, want it left out", got, merges)
	}
	w.SetMissing(merges, false)

	w.Use(nil) // a reload drops its rule
	if got := g.c.writtenTopics(); slices.Contains(got, merges) {
		t.Errorf("written topics %v with %s no rule's any more, want it left out", got, merges)
	}
	setTopicConfig(t, env.cluster, "max.message.bytes", "8192", merges)
	n := describes.Load()
	waitFor(t, 20*time.Second, "the topics' limits read again", func() bool { return describes.Load() >= n+3 })
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "max.message.bytes changed") && strings.Contains(l, merges) {
			t.Errorf("a warning naming a topic no rule uses: %s", l)
		}
	}
}
