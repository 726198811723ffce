package endpoints

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"testing"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/faulttest"
)

// readinessFromEnv is the readiness a gate with the GATE_* variables of env runs (its
// Redis clients dialled as the gate dials them, Kafka saying nothing), running until t's
// cleanup, and the buffer it logs to.
func readinessFromEnv(t *testing.T, env map[string]string) (*Readiness, *faulttest.Buffer) {
	t.Helper()
	cfg, err := config.Load(func(k string) string { return env[k] }, slices.Collect(maps.Keys(env)))
	if err != nil {
		t.Fatal(err)
	}
	o, err := cfg.RedisOptions()
	if err != nil {
		t.Fatal(err)
	}
	clients, err := cfg.DialRedis(o, config.Reload{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients[0].Close() })
	logs := &faulttest.Buffer{}
	r := newReadiness(clients, cfg, func() []string { return nil }, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, logs
}
