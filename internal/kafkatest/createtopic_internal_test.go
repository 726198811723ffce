package kafkatest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A create the controller answered NOT_CONTROLLER, retried by the client after its first
// attempt had created the topic, finds it existing: that is the topic asked for, not a
// failure (TestLeaderFailover failed so in a suite run under load, three nodes starting,
// on its own topic "already exists"). One of another shape is refused.
func TestCreateTopicRetriedFindsItsOwnTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The first attempt's topic, created; its answer lost to the controller's move.
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	c.ControlKey(kmsg.CreateTopics.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refused.Load() > 0 {
			return nil, nil, false
		}
		refused.Add(1)
		req := kreq.(*kmsg.CreateTopicsRequest)
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.NotController.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	if err := NewTopic(ctx, adm, "t", 3, 1, nil); err != nil {
		t.Errorf("creating t, retried after NOT_CONTROLLER and found as asked: %v", err)
	}
	if refused.Load() == 0 {
		t.Error("the create was never refused: the test tried nothing")
	}
	err = NewTopic(ctx, adm, "t", 6, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") || !strings.Contains(err.Error(), "with 3 partitions of 1 replicas, not the 6 of 1 asked for") {
		t.Errorf("creating t of 6 partitions, existing with 3: %v; want it refused, naming both", err)
	}
}
