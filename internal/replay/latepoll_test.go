package replay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/faulttest"
)

// slowPoll holds up the poll goroutine once, after a poll has taken its records and
// before PollFetches returns them: as a GC pause or a loaded machine can when records
// come near the end of a poll's stallAfter.
type slowPoll struct{ once sync.Once }

func (h *slowPoll) OnFetchRecordUnbuffered(_ *kgo.Record, polled bool) {
	if polled {
		h.once.Do(func() { time.Sleep(stallAfter + 500*time.Millisecond) })
	}
}

// A poll whose time runs out once it has taken records (a pause of the process as it
// returns them) hands them on: the client's cursor is past them. Before, they were taken
// for a stall and dropped, and Read returned no error having handed on 10 of 20.
func TestReadKeepsRecordsOfALatePoll(t *testing.T) {
	t.Parallel()
	c := faulttest.NewCluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for b := range 2 { // two batches
		var recs []*kgo.Record
		for i := range 10 {
			r := event("a", "u", time.Duration(b*10+i)*time.Second)
			r.Timestamp = r.Timestamp.Truncate(time.Millisecond)
			recs = append(recs, r)
		}
		if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	var n int
	parts, err := Read(ctx, Range{Topic: "events"}, func(*kgo.Record, time.Time) { n++ }, nil,
		kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxBytes(1), kgo.FetchMaxPartitionBytes(1), kgo.WithHooks(&slowPoll{}))
	t.Logf("read %d records of offsets %v: %v", n, parts, err)
	if err != nil || n != 20 {
		t.Errorf("Read handed on %d of the range's 20 records (error %v): a late poll is no stall", n, err)
	}
}
