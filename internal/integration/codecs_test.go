package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/faulttest"
)

// needKcat returns kcat's path (librdkafka's command-line client, Debian package kcat),
// skipping t without it, or failing it under CI=true.
func needKcat(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err == nil {
		return p
	}
	if v, _ := strconv.ParseBool(os.Getenv("CI")); v {
		t.Fatalf("kcat not found on PATH (%v); CI=%s, so this is a failure: install kcat (Debian package kcat; make deps-test does)", err, os.Getenv("CI"))
	}
	t.Skipf("kcat not found on PATH (%v); install kcat (Debian package kcat) to run it (set CI=true to make this a failure)", err)
	return ""
}

// TestLibrdkafkaCodecs: records produced by librdkafka (kcat) in batches compressed with
// each codec Kafka has are routed intact: every value once on an output topic, byte for
// byte, with the producer's header; the input batches really carry the codec.
func TestLibrdkafkaCodecs(t *testing.T) {
	t.Parallel()
	kcat := needKcat(t)
	s := newScenario(t, kafkaOpts{}, 3, 3)
	g := faulttest.StartGate(t, s.bin, "codecs", s.vars())
	waitReady(t, g)
	codecs := map[string]uint8{"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
	const perCodec = 300
	want := map[string]string{} // value -> codec
	for codec := range codecs {
		var in bytes.Buffer
		for i := range perCodec {
			// JSON with a team, a line of non-ASCII text and a value that differs per
			// record: what a codec could damage. librdkafka sends a batch uncompressed
			// when compressing it would make it larger (rdkafka_msgset_writer.c), as
			// LZ4's frame does to a lone short record that linger.ms cut off (CI saw
			// one): 100+ bytes of repetition make even a one-record batch shrink.
			v := fmt.Sprintf(`{"team_id":"team-%d","codec":%q,"seq":%d,"text":"ünïcödé ✓ %s"}`, i%7, codec, i, strings.Repeat("ab", 60+i%40))
			want[v] = codec
			in.WriteString(v)
			in.WriteByte('\n')
		}
		// Bounded: librdkafka retries an unreachable broker for message.timeout.ms (5 min).
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, kcat, "-b", s.k.Brokers, "-t", s.n.In, "-P", "-z", codec,
			"-H", "codec="+codec, "-X", "linger.ms=50", "-X", "batch.num.messages=100")
		cmd.Stdin = &in
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("kcat -z %s (within 2 minutes): %v\n%s", codec, err, out)
		}
	}
	faulttest.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d output records", len(want)), func() bool {
		return s.outputs() >= int64(len(want))
	})
	s.waitDrained()
	for _, r := range s.k.ReadAll(t, nil, s.n.In) {
		codec, _ := faulttest.Header(r, "codec")
		if got := r.Attrs.CompressionType(); got != codecs[codec] {
			t.Errorf("input %s/%d/%d produced with -z %s carries codec %d, want %d", r.Topic, r.Partition, r.Offset, codec, got, codecs[codec])
		}
	}
	seen := map[string]int{}
	for _, r := range s.k.ReadAll(t, nil, s.n.Outs()...) {
		v := string(r.Value)
		codec, ok := want[v]
		if !ok {
			t.Errorf("output %s/%d/%d holds a value no input had: %.80q", r.Topic, r.Partition, r.Offset, v)
			continue
		}
		if h, _ := faulttest.Header(r, "codec"); h != codec {
			t.Errorf("output of a -z %s record has header codec=%q", codec, h)
		}
		if r.Topic == s.n.Dlq {
			e, _ := faulttest.Header(r, "gate-error")
			t.Errorf("a -z %s record was dead-lettered (%s)", codec, e)
		}
		seen[v]++
	}
	for v, codec := range want {
		if seen[v] != 1 {
			t.Errorf("a -z %s record is on the outputs %d times, want once: %.80q", codec, seen[v], v)
		}
	}
	t.Logf("FIGURES real_kafka_codecs records=%d per codec, codecs=gzip,snappy,lz4,zstd, all routed once intact: %v", perCodec, !t.Failed())
	g.Term(t, time.Minute)
}
