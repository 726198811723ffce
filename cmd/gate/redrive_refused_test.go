package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// refusePartition makes the broker refuse, while on, every produce batch to partition p
// (of any topic: only gate redrive produces once it is set) with err, for good; the
// request's other partitions are answered NOT_ENOUGH_REPLICAS (not written, retried).
func refusePartition(t *testing.T, c *kfake.Cluster, p int32, err *kerr.Error) *atomic.Bool {
	t.Helper()
	var on atomic.Bool
	on.Store(true)
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		hit := false
		for _, tp := range req.Topics {
			for _, rp := range tp.Partitions {
				hit = hit || rp.Partition == p
			}
		}
		if !on.Load() || !hit {
			return nil, nil, false
		}
		return faulttest.ProduceRefused(req, func(_ int, rp *kmsg.ProduceRequestTopicPartition) int16 {
			if rp.Partition == p {
				return err.Code
			}
			return kerr.NotEnoughReplicas.Code
		}), nil, true
	})
	return &on
}

// A redrive whose copies the broker refused names them as -offsets takes them, so that
// once the fault is fixed a second run copies exactly those: its error said "a second
// run of their offsets may copy some twice" with no offsets anywhere, and running the
// range again copied every dead letter that had gone through twice.
func TestRedriveNamesTheLettersNotCopied(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"))
	const n, keys = 60, 10
	var dls []*kgo.Record
	for i := range n {
		reason := "not_json"
		if i%3 == 0 {
			reason = "field_missing" // left for -reason below: a run of offsets does not span it
		}
		dls = append(dls, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%keys), Value: fmt.Appendf(nil, "{%d", i),
			Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte(reason)}}})
	}
	if err := cl.ProduceSync(t.Context(), dls...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	refusing := refusePartition(t, c, 1, kerr.InvalidRecord)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"redrive", "-reason", "not_json"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive into a partition refusing records: %v\n%s", err, stdout.String())
	if err == nil {
		t.Fatal("gate redrive into a partition refusing every record: no error")
	}
	m := regexp.MustCompile(`gate redrive -offsets (\S+) -reason not_json \(of those it copies, 0 went through already\)`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("gate redrive's error names no run of -offsets copying the dead letters it did not copy: %v", err)
	}
	refusing.Store(false)
	stdout.Reset()
	if err := run(t.Context(), []string{"redrive", "-reason", "not_json", "-offsets", m[1]}, testHost(env), &stdout, &stderr); err != nil {
		t.Fatalf("gate redrive -offsets %s: %v\n%s", m[1], err, stderr.String())
	}
	t.Logf("gate redrive -offsets %s:\n%s", m[1], stdout.String())

	in, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	got := map[string]int{}
	for total := 0; total < n*2/3; {
		fs := in.PollFetches(t.Context())
		if err := fs.Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)]++; total++ })
	}
	for i := range n {
		want := 1
		if i%3 == 0 {
			want = 0
		}
		if v := fmt.Sprintf("{%d", i); got[v] != want {
			t.Errorf("dead letter %s is in the input %d times after the second run, want %d", v, got[v], want)
		}
	}
}

// refuseOlderThan makes the broker refuse, as one whose topics have
// message.timestamp.before.max.ms does (Kafka 3.6+, KIP-937), every produce batch holding
// a record stamped before cutoff (of any topic: only gate redrive produces once it is
// set): INVALID_TIMESTAMP for the batch, the request's other partitions
// NOT_ENOUGH_REPLICAS (not written, retried). It returns the count of batches refused.
func refuseOlderThan(t *testing.T, c *kfake.Cluster, cutoff time.Time) *atomic.Int64 {
	t.Helper()
	var refused atomic.Int64
	dec := kgo.DefaultDecompressor()
	old := func(raw []byte) bool {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			t.Errorf("reading a produce batch: %v", err)
			return false
		}
		recs := b.Records
		if codec := kgo.CompressionCodecType(b.Attributes & 0x7); codec != kgo.CodecNone {
			var err error
			if recs, err = dec.Decompress(recs, codec); err != nil {
				t.Errorf("decompressing a produce batch: %v", err)
				return false
			}
		}
		for range b.NumRecords {
			length, n := binary.Varint(recs)
			var r kmsg.Record
			if n <= 0 || r.ReadFrom(recs) != nil {
				t.Errorf("reading a produce batch's record")
				return false
			}
			if b.FirstTimestamp+r.TimestampDelta64 < cutoff.UnixMilli() {
				return true
			}
			recs = recs[n+int(length):]
		}
		return false
	}
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		bad := map[[2]int32]bool{}
		for i, tp := range req.Topics {
			for _, p := range tp.Partitions {
				if old(p.Records) {
					bad[[2]int32{int32(i), p.Partition}] = true
				}
			}
		}
		if len(bad) == 0 {
			return nil, nil, false
		}
		return faulttest.ProduceRefused(req, func(i int, p *kmsg.ProduceRequestTopicPartition) int16 {
			if bad[[2]int32{int32(i), p.Partition}] {
				refused.Add(1)
				return kerr.InvalidTimestamp.Code
			}
			return kerr.NotEnoughReplicas.Code
		}), nil, true
	})
	return &refused
}

// describeTopicConfigs makes the broker describe topic's settings as settings say (kfake
// has no timestamp bounds of its own), and no other.
func describeTopicConfigs(c *kfake.Cluster, topic string, settings map[string]string) {
	c.ControlKey(kmsg.DescribeConfigs.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			for _, name := range r.ConfigNames {
				if v, ok := settings[name]; ok && r.ResourceName == topic {
					rc := kmsg.NewDescribeConfigsResponseResourceConfig()
					rc.Name, rc.Value = name, kmsg.StringPtr(v)
					rr.Configs = append(rr.Configs, rc)
				}
			}
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
}

// A dead letter older than the input topic takes (message.timestamp.before.max.ms: a
// redrive after a long weekend, or a rejected one whose original timestamp was why its
// output topic refused it) is left out and named, not handed to the producer: the
// broker refuses a batch whole, and franz-go fails every record buffered behind it in
// the partition, so one such dead letter kept 128 others of its partition from being
// copied (171 of 300 copied), in a batch a second run would refuse again.
func TestRedriveLeavesOutLettersOlderThanTheInputTakes(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events_dead_letter"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n, bad = 300, 150
	old := testNow.Add(-72 * time.Hour)
	var dls []*kgo.Record
	for i := range n {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, "{%d", i), Timestamp: testNow.Add(-time.Hour),
			Headers: []kgo.RecordHeader{{Key: "gate-error", Value: []byte("not_json")}}}
		if i == bad {
			r.Headers = []kgo.RecordHeader{{Key: "gate-error", Value: []byte("rejected")},
				{Key: "gate-original-timestamp", Value: strconv.AppendInt(nil, old.UnixMilli(), 10)}}
		}
		dls = append(dls, r)
	}
	if err := cl.ProduceSync(t.Context(), dls...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	describeTopicConfigs(c, "events", map[string]string{"message.timestamp.type": "CreateTime",
		"message.timestamp.before.max.ms": "86400000", "message.timestamp.after.max.ms": "9223372036854775807"})
	refused := refuseOlderThan(t, c, testNow.Add(-24*time.Hour))

	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"redrive", "-dry-run"}, testHost(env), &stdout, &stderr); err != nil {
		t.Errorf("gate redrive -dry-run: %v", err)
	}
	if out := stdout.String(); !strings.Contains(out, "events_dead_letter/0/150 (rejected)") || !strings.Contains(out, "would re-drive 299 dead letters") {
		t.Errorf("gate redrive -dry-run said:\n%s", out)
	}
	stdout.Reset()
	err = run(t.Context(), []string{"redrive"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive: %v\n%s", err, stdout.String())
	if err == nil || !strings.Contains(err.Error(), "gate redrive -offsets 0:150-151 ") {
		t.Errorf("gate redrive leaving out a dead letter too old for the input: %v, want an error naming it as -offsets takes it", err)
	}
	if !strings.Contains(stdout.String(), "events_dead_letter/0/150 (rejected)") {
		t.Errorf("gate redrive does not name the dead letter too old for the input:\n%s", stdout.String())
	}
	copied := inputRecords(t, cl)
	if copied != n-1 || refused.Load() != 0 {
		t.Errorf("the input holds %d of the %d dead letters it takes (%d batches refused)", copied, n-1, refused.Load())
	}
}

// letterOffsets gives one range a partition, from its first dead letter not copied to its
// last, and counts those between that a run of it copies again: gone through already, or
// left out by -from and -to (which -offsets does not take).
func TestLetterOffsets(t *testing.T) {
	t.Parallel()
	ls := []readLetter{
		{partition: 1, offset: 40, again: 9, inTime: 5},
		{partition: 0, offset: 7, again: 3, inTime: 3},
		{partition: 1, offset: 10, again: 2, inTime: 2}, // 3 between in time, 4 not
		{partition: 0, offset: 8, again: 4, inTime: 4},
	}
	offsets, twice, untimed := letterOffsets(ls)
	if offsets != "0:7-9,1:10-41" || twice != 2 || untimed != 4 {
		t.Errorf("letterOffsets = %q, %d twice, %d untimed; want 0:7-9,1:10-41, 2, 4", offsets, twice, untimed)
	}
}

// A dead letter of an input record met earlier in a run whose first letter was stamped
// outside the times the input takes is not copied either, and in the -offsets that copy
// the first: it was left out as "already copied", and the -offsets given left it out.
func TestRedriveTwinOfALetterOutsideTheInputsTimes(t *testing.T) {
	t.Parallel()
	c, env := kafkaEnv(t)
	cl := kafkaClient(t, c, kgo.DefaultProduceTopic("events_dead_letter"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	old := testNow.Add(-72 * time.Hour)
	var dls []*kgo.Record
	for _, src := range []string{"events/0/7", "events/0/7", "events/1/3"} {
		dls = append(dls, &kgo.Record{Key: []byte("k"), Value: []byte("{bad"), Timestamp: testNow.Add(-time.Hour), Headers: []kgo.RecordHeader{
			{Key: "gate-error", Value: []byte("rejected")}, {Key: "gate-source", Value: []byte(src)},
			{Key: "gate-original-timestamp", Value: strconv.AppendInt(nil, old.UnixMilli(), 10)}}})
	}
	dls[2].Headers = dls[2].Headers[:2] // stamped an hour ago, which the input takes
	if err := cl.ProduceSync(t.Context(), dls...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	describeTopicConfigs(c, "events", map[string]string{"message.timestamp.type": "CreateTime",
		"message.timestamp.before.max.ms": "86400000", "message.timestamp.after.max.ms": "9223372036854775807"})
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"redrive"}, testHost(env), &stdout, &stderr)
	t.Logf("gate redrive: %v\n%s", err, stdout.String())
	if out := stdout.String(); !strings.Contains(out, "re-drove 1 dead letter ") || strings.Contains(out, "left out") ||
		!strings.Contains(out, "; 1 dead letter of an input record met earlier in this run not copied, as the first of it was not") {
		t.Errorf("gate redrive of two letters of one input record too old for the input, and another, said:\n%s", out)
	}
	if err == nil || !strings.Contains(err.Error(), "gate redrive -offsets 0:0-2 ") {
		t.Errorf("gate redrive: %v, want the -offsets of both letters of the input record too old for the input", err)
	}
	if copied := inputRecords(t, cl); copied != 1 {
		t.Errorf("the input holds %d records, want the 1 it takes", copied)
	}
}
