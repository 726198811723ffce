package kafkatest_test

import (
	"bytes"
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
// start time and memory. The record is snappy-compressed, and the broker unpacks
// snappy-java's native library to read it: into the node's own temporary directory,
// removed with it (the system's /tmp gathered one for every broker a test killed).
func TestSingleNode(t *testing.T) {
	c := kafkatest.Start(t, kafkatest.Options{})
	c.CreateTopic(t, "t", 1)
	cl := c.Client(t, kgo.DefaultProduceTopic("t"), kgo.ConsumeTopics("t"), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Compressible: franz-go sends a batch as it is when compressing does not shrink it.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: bytes.Repeat([]byte("v"), 4096)}).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatalf("fetching: %v", err)
	}
	if n := fs.NumRecords(); n != 1 {
		t.Fatalf("fetched %d records, want 1", n)
	}
	if libs, _ := filepath.Glob(filepath.Join(c.TmpDir(1), "*snappy*")); len(libs) == 0 {
		ents, _ := os.ReadDir(c.TmpDir(1))
		t.Errorf("no snappy library in the node's temporary directory %s after a snappy batch (it holds %v): the JVM unpacked it elsewhere", c.TmpDir(1), ents)
	}
	t.Logf("FIGURES kafka_single_start_s=%.2f kafka_single_rss_mib=%d", c.StartTime.Seconds(), c.RSS()[1]>>20)
}
