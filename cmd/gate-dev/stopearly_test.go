package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// Ctrl-C while gate-dev starts its redis-server stops it, status 0, as a run that ends:
// it warned that redis-server would not start, fell back to the embedded miniredis and
// built both gates before it stopped (a review).
func TestDevStoppedWhileRedisStarts(t *testing.T) {
	needRedisServer(t)
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the signal came before redis-server answered
	var stdout bytes.Buffer
	stderr := &syncBuffer{}
	err := dev(ctx, []string{"-kafka-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, getenvFrom(nil), nil, &stdout, stderr,
		devDeps{lookPath: exec.LookPath, isTerminal: notTerminal})
	if err != nil {
		t.Errorf("gate-dev stopped while redis-server started: %v, want nil (status 0)", err)
	}
	if out := stdout.String() + stderr.String(); strings.Contains(out, "miniredis") {
		t.Errorf("gate-dev stopped while redis-server started fell back to miniredis:\n%s", out)
	}
}
