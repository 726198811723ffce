package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
)

// TestSIGTERMDrainsAndCommits runs the built binary as a real process: on SIGTERM it
// routes what it polled, commits every input offset, leaves the group, flushes its
// counts to Redis and exits 0.
func TestSIGTERMDrainsAndCommits(t *testing.T) {
	t.Parallel()
	bin := gateBinary(t)
	rs := redistest.Start(t)
	kc, kenv := kafkaEnv(t)

	cmd := exec.Command(bin)
	// Only PATH and HOME from the test's environment: a stray GATE_ variable in the shell
	// must not change the test.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, "GATE_HTTP_ADDR=127.0.0.1:0", "GATE_REDIS_URLS="+rs.URL(),
		"GATE_KAFKA_BROKERS="+kenv["GATE_KAFKA_BROKERS"], "GATE_GROUP_ID=sigterm")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitFor(t, 20*time.Second, "partitions assigned", func() bool {
		return strings.Contains(stderr.String(), `"msg":"partitions assigned"`)
	})

	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 500
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, `{"team_id":"t%d"}`, i%10)}
	}
	if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Let the gate see some of it; the rest is routed or left to the next owner, and the
	// commit says which.
	waitFor(t, 20*time.Second, "records routed", func() bool {
		return committedTotal(kc, "sigterm") > 0
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM\n%s", stderr)
	}
	logs := stderr.String()
	for _, want := range []string{`"msg":"shutting down"`, `"msg":"consumer stopped"`, `"msg":"stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	// Everything the gate routed is committed: outputs and commits agree.
	routed := outputCount(t, kc)
	if got := committedTotal(kc, "sigterm"); got != int64(routed) {
		t.Errorf("committed %d input records, but %d are on the outputs", got, routed)
	}
	if keys, err := rs.Client(t).Keys(context.Background(), "gate:t*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("no counts flushed to Redis: %v %v", keys, err)
	}
}

// committedTotal sums a group's committed offsets on the input topic.
func committedTotal(c *kfake.Cluster, group string) int64 {
	gi := c.GroupInfo(group)
	if gi == nil {
		return 0
	}
	var n int64
	for _, gc := range gi.Commits["events"] {
		n += gc.Offset
	}
	return n
}

// outputCount counts the records on the three output topics.
func outputCount(t *testing.T, c *kfake.Cluster) int {
	t.Helper()
	var n int64
	for _, topic := range []string{"events_accepted", "events_overflow", "events_dead_letter"} {
		for _, p := range c.PartitionInfos(topic) {
			n += p.HighWatermark
		}
	}
	return int(n)
}
