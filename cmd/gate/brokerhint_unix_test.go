//go:build unix

package main

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
)

// A tool that cannot reach the brokers says where their addresses came from: a review
// ran gate replay with GATE_KAFKA_BROKERS unset and read only "dial tcp 127.0.0.1:9092:
// connect: connection refused". Each of the tools that read topics (replay, outcomes,
// redrive) names GATE_KAFKA_BROKERS and its value, or says it is unset and its default
// was dialled; an error that is no dial's is left as it is.
func TestToolsNameTheBrokersTheyCouldNotReach(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	env := map[string]string{"GATE_KAFKA_BROKERS": addr, "GATE_OUTCOMES_TOPIC": "outcomes"}
	want := "(the brokers are GATE_KAFKA_BROKERS's: " + addr + ")"
	for _, args := range [][]string{{"replay", "-from", "1h"}, {"outcomes", "-top", "3"}, {"redrive"}} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), args, testHost(env), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "dial tcp "+addr) || !strings.Contains(err.Error(), want) {
			t.Errorf("gate %q against a closed port: %v, want the dial's error and %q", args, err, want)
		}
	}

	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	unset := brokerHint(dial, func(string) string { return "" })
	if !errors.Is(unset, dial) || !strings.Contains(unset.Error(), "GATE_KAFKA_BROKERS is unset: the brokers are its default") {
		t.Errorf("with GATE_KAFKA_BROKERS unset: %v", unset)
	}
	// A broker that took the connection and never answered: a read's timeout, the
	// brokers named all the same (a review's gate outcomes waited 40 s and said only
	// "i/o timeout").
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("i/o timeout")}
	if got := brokerHint(read, func(string) string { return addr }); !errors.Is(got, read) || !strings.Contains(got.Error(), want) {
		t.Errorf("a read's timeout: %v, want %q", got, want)
	}
	other := errors.New("the topic does not exist")
	if got := brokerHint(other, func(string) string { return addr }); got != other {
		t.Errorf("an error that is no dial's became %v", got)
	}
}
