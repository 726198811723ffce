package gate

import (
	"errors"
	"hash/maphash"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/limit"
)

func load(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	cfg, err := config.Load(func(k string) string { return env[k] }, names)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// New builds every part without connecting (nothing listens on the addresses), one
// limiter per limit, on one registry, and passes the router through WrapRouter.
func TestNewConnectsNothing(t *testing.T) {
	t.Parallel()
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    "redis://127.0.0.1:1/0",
		"GATE_LIMITS":        "1m:1000,1h:20000",
	})
	var wrapped bool
	start := time.Now()
	g, err := New(cfg, slog.New(slog.DiscardHandler), Options{
		WrapRouter: func(r consume.Router) consume.Router { wrapped = true; return r },
		ClientOpts: []kgo.Opt{kgo.ClientID("test")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.CloseRedis(slog.New(slog.DiscardHandler))
	defer g.Consumer.Close()
	if time.Since(start) > 5*time.Second {
		t.Errorf("New took %s: it should not wait for any server", time.Since(start))
	}
	if !wrapped {
		t.Error("WrapRouter was not called")
	}
	if g.Lim == nil || len(g.Extra) != 1 || len(g.Clients) != 1 || g.Ticker == nil || g.Router == nil || g.Overrides == nil {
		t.Errorf("parts missing: %+v", g)
	}
	mfs, err := g.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"go_goroutines", "gate_owned_partitions"} {
		if !names[want] {
			t.Errorf("registry lacks %s", want)
		}
	}
}

// A file named by the configuration that cannot be read fails New with a configuration
// error (exit status 2), naming the variable.
func TestNewConfigurationError(t *testing.T) {
	t.Parallel()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := load(t, map[string]string{"GATE_REDIS_TLS_CA_FILE": ca, "GATE_REDIS_URLS": "rediss://127.0.0.1:6379/0"})
	_, err := New(cfg, slog.New(slog.DiscardHandler), Options{})
	if !errors.As(err, new(config.Problems)) {
		t.Errorf("err = %v, want a config.Problems naming GATE_REDIS_TLS_CA_FILE", err)
	}
}

// Every limiter of a gate, with or without a rules file, hashes keys with the seed its
// outcome aggregates are given (consume.Config.HashSeed): the hash a record's team is
// touched with for its row is then the one its check takes (route's
// TestOutcomesSharedSeedChecksAlike). With seeds apart, every record was hashed twice.
func TestLimitersShareTheOutcomesHashSeed(t *testing.T) {
	t.Parallel()
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte("rules:\n  - {name: team, key: json:team_id, limits: [1m:100, 1h:1000]}\n  - {name: user, key: json:team_id+distinct_id, limits: [1m:10]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"without rules", map[string]string{"GATE_LIMITS": "1m:1000,1h:20000"}},
		{"with rules", map[string]string{"GATE_RULES_FILE": rulesPath}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1", "GATE_REDIS_URLS": "redis://127.0.0.1:1/0", "GATE_OUTCOMES_TOPIC": "outcomes"}
			maps.Copy(env, c.env)
			g, err := New(load(t, env), slog.New(slog.DiscardHandler), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer g.CloseRedis(slog.New(slog.DiscardHandler))
			defer g.Consumer.Close()
			lims := append([]*limit.Limiter{g.Lim}, g.Extra...)
			if gen := g.gen.Load(); gen != nil {
				for _, rl := range gen.rules {
					lims = append(lims, rl.Lims...)
				}
			}
			if want := map[string]int{"without rules": 2, "with rules": 4}[c.name]; len(lims) != want {
				t.Fatalf("%d limiters, want %d", len(lims), want)
			}
			for i, l := range lims {
				if l.Seed() != g.seed {
					t.Errorf("limiter %d hashes with a seed of its own", i)
				}
			}
			if g.seed == (maphash.Seed{}) {
				t.Error("no seed")
			}
		})
	}
}
