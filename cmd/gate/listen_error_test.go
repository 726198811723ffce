package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/redistest"
)

// A gate whose HTTP address is taken fails at start, after gate.New has built its Kafka
// client: it must leave no member in the group, which would hold partitions that no gate
// reads until its session times out (45 s), on every restart of a crash-looping pod. The
// client joins only in Consumer.Run, after the preflight, so this holds while the join
// stays there; it does not see whether serve closed the client (a review: with
// consumer.Close() removed it passed), which nothing outside the process shows.
func TestListenErrorLeavesNoGroupMember(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	kc, kenv := kafkaEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	err = run(t.Context(), []string{"serve"}, testHost(withEnv(kenv, map[string]string{
		"GATE_HTTP_ADDR":  ln.Addr().String(),
		"GATE_REDIS_URLS": rs.URL(),
		"GATE_GROUP_ID":   "listen-error",
	})), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "GATE_HTTP_ADDR=") {
		t.Fatalf("run: %v, want a GATE_HTTP_ADDR error", err)
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ac := kadm.NewClient(adm)
	// Give a leaked client time to join.
	deadline := time.Now().Add(3 * time.Second) // a join after run returned would show by then
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		gs, err := ac.DescribeGroups(ctx, "listen-error")
		cancel()
		if err == nil {
			if g, ok := gs["listen-error"]; ok && len(g.Members) > 0 {
				t.Fatalf("after run returned its start-up error, group listen-error has %d member(s) (state %s): the Kafka client built by gate.New was never closed", len(g.Members), g.State)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
