package consume

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TopicTimestampBounds reads the bounds as Kafka does: before.max.ms and after.max.ms,
// the older difference.max.ms for one left at its default, none for LogAppendTime.
func TestTopicTimestampBounds(t *testing.T) {
	t.Parallel()
	const never = "9223372036854775807"
	for _, c := range []struct {
		name          string
		settings      map[string]string
		before, after time.Duration
	}{
		{"defaults", map[string]string{"message.timestamp.type": "CreateTime", "message.timestamp.before.max.ms": never,
			"message.timestamp.after.max.ms": never, "message.timestamp.difference.max.ms": never}, 0, 0},
		{"before and after", map[string]string{"message.timestamp.before.max.ms": "86400000", "message.timestamp.after.max.ms": "3600000",
			"message.timestamp.difference.max.ms": "60000"}, 24 * time.Hour, time.Hour},
		{"difference", map[string]string{"message.timestamp.before.max.ms": never, "message.timestamp.difference.max.ms": "60000"}, time.Minute, time.Minute},
		{"an older broker", map[string]string{"message.timestamp.difference.max.ms": "60000"}, time.Minute, time.Minute},
		{"LogAppendTime", map[string]string{"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1000"}, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
			if err != nil {
				t.Fatal(err)
			}
			defer kc.Close()
			kc.ControlKey(kmsg.DescribeConfigs.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				kc.KeepControl()
				req := kreq.(*kmsg.DescribeConfigsRequest)
				resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
				for _, r := range req.Resources {
					rr := kmsg.NewDescribeConfigsResponseResource()
					rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
					for _, name := range r.ConfigNames {
						if v, ok := c.settings[name]; ok {
							rc := kmsg.NewDescribeConfigsResponseResourceConfig()
							rc.Name, rc.Value = name, kmsg.StringPtr(v)
							rr.Configs = append(rr.Configs, rc)
						}
					}
					resp.Resources = append(resp.Resources, rr)
				}
				return resp, nil, true
			})
			cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			before, after, err := TopicTimestampBounds(t.Context(), cl, "in")
			if err != nil || before != c.before || after != c.after {
				t.Errorf("bounds %v before, %v after, err %v; want %v, %v", before, after, err, c.before, c.after)
			}
		})
	}
}
