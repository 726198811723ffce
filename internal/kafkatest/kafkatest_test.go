package kafkatest_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/kafkatest"
)

// TestPomPinsVersion: the POM resolves the Version the package says it runs.
func TestPomPinsVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("maven", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<kafka.version>([^<]+)</kafka.version>`).FindSubmatch(b)
	if m == nil || string(m[1]) != kafkatest.Version {
		t.Fatalf("maven/pom.xml kafka.version %q, want kafkatest.Version %s", m, kafkatest.Version)
	}
}

// TestSingleNode: one node starts, takes a record and gives it back; it reports its
// start time and memory.
func TestSingleNode(t *testing.T) {
	c := kafkatest.Start(t, kafkatest.Options{})
	c.CreateTopic(t, "t", 1)
	cl := c.Client(t, kgo.DefaultProduceTopic("t"), kgo.ConsumeTopics("t"), kgo.FetchMaxWait(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatalf("fetching: %v", err)
	}
	if n := fs.NumRecords(); n != 1 {
		t.Fatalf("fetched %d records, want 1", n)
	}
	t.Logf("FIGURES kafka_single_start_s=%.2f kafka_single_rss_mib=%d", c.StartTime.Seconds(), c.RSS()[1]>>20)
}
