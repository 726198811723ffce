package consume

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Brokers (or a proxy before them) answering DescribeConfigs with no resource for the
// group asked: the gate read the answer's first resource and panicked at start under
// GATE_KAFKA_GROUP_PROTOCOL=consumer (a review). It takes Kafka's default session
// timeout and says why.
func TestGroupSessionTimeoutOfAnAnswerWithoutTheGroup(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return req.(*kmsg.DescribeConfigsRequest).ResponseKind(), nil, true // no resource
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	con := &Consumer{cl: cl, cfg: Config{GroupID: "gate"}}
	d, from := con.groupSessionTimeout(t.Context())
	if d != kip848SessionDefault || !strings.Contains(from, "answered 0 resources") {
		t.Errorf("session timeout %v from %q; want Kafka's default, %v, saying the answer held no resource", d, from, kip848SessionDefault)
	}
}
