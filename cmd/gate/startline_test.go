package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/gate"
)

// startLineElsewhere are the variables the start-up line states under another name, or
// leaves out as secrets.
var startLineElsewhere = map[string]string{
	"GATE_LIMITS":                  "further_limits",
	"GATE_REDIS_PASSWORD":          "redis_password_set",
	"GATE_KAFKA_SASL_PASSWORD":     "", // a secret
	"GATE_REDIS_SENTINEL_PASSWORD": "", // a secret
}

// TestStartLineStatesEverySetting: the "gate started" line, which the runbooks send an
// operator to for the effective settings (docs/operations.md, docs/configuration.md's
// GATE_LOG_LEVEL), names every GATE_ variable but the secrets. It left out 35 of 100,
// GATE_CLOCK, GATE_REDIS_MODE, GATE_OUTCOMES_TOPIC and GATE_ON_DATA_LOSS among them.
func TestStartLineStatesEverySetting(t *testing.T) {
	t.Parallel()
	var table bytes.Buffer
	if err := config.WriteEnvTable(&table); err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile("(?m)^\\| `(GATE_[A-Z0-9_]+)`").FindAllStringSubmatch(table.String(), -1)
	if len(vars) < 50 {
		t.Fatalf("only %d variables in the table", len(vars))
	}
	out := startupLog(t, nil)
	var line map[string]any
	if err := json.Unmarshal(bytes.SplitN(out.Bytes(), []byte("\n"), 2)[0], &line); err != nil || line["msg"] != "gate started" {
		t.Fatalf("start line %q: %v", out.String(), err)
	}
	var missing []string
	for _, v := range vars {
		key, ok := startLineElsewhere[v[1]]
		if !ok {
			key = strings.ToLower(strings.TrimPrefix(v[1], "GATE_"))
		}
		if key == "" {
			continue
		}
		if _, ok := line[key]; !ok {
			missing = append(missing, v[1])
		}
	}
	if len(missing) > 0 {
		t.Errorf("the start line leaves out %d of %d settings: %s", len(missing), len(vars), strings.Join(missing, " "))
	}
	for _, secret := range []string{"kafka_sasl_password", "redis_password", "redis_sentinel_password"} {
		if _, ok := line[secret]; ok {
			t.Errorf("the start line states %s", secret)
		}
	}
}

// GATE_KAFKA_TLS_SERVER_NAME alone turns TLS on (config's kafkaTLS): the start line said
// kafka_tls=false while the gate dialed the brokers over TLS, and an operator looking
// there for why a plaintext broker refused it was told TLS was off.
func TestStartLineKafkaTLSAsDialed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"GATE_KAFKA_TLS": "true"}, true},
		{map[string]string{"GATE_KAFKA_TLS_SERVER_NAME": "kafka.internal"}, true},
	} {
		env := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1", "GATE_REDIS_URLS": "redis://127.0.0.1:1/0"}
		for k, v := range tc.env {
			env[k] = v
		}
		cfg, err := config.Load(getenvFrom(env), nil)
		if err != nil {
			t.Fatal(err)
		}
		discard := slog.New(slog.DiscardHandler)
		g, err := gate.New(cfg, discard, gate.Options{Writer: "start-line-tls"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		logStartup(slog.New(slog.NewJSONHandler(&out, nil)), cfg, g.Lim, g.Ticker, "127.0.0.1:8080", memLimit{})
		g.CloseRedis(discard)
		g.Consumer.Close()
		var line map[string]any
		if err := json.Unmarshal(bytes.SplitN(out.Bytes(), []byte("\n"), 2)[0], &line); err != nil {
			t.Fatal(err)
		}
		if line["kafka_tls"] != tc.want {
			t.Errorf("%v: kafka_tls %v, want %v", tc.env, line["kafka_tls"], tc.want)
		}
	}
}

// The start-up warns of a password sent in clear (SASL PLAIN without TLS) and of a Redis
// whose certificate is not checked (skip_verify=true): each can be meant, neither should
// be an accident, and both were silent (a security review). Not of SCRAM without TLS,
// nor of PLAIN over TLS.
func TestStartUpWarnsOfCredentialsInClear(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // in the log's warnings
	}{
		{"plain without TLS", map[string]string{"GATE_KAFKA_SASL_MECHANISM": "plain", "GATE_KAFKA_SASL_USERNAME": "u", "GATE_KAFKA_SASL_PASSWORD": "p"},
			[]string{"GATE_KAFKA_SASL_MECHANISM=plain without TLS"}},
		{"plain over TLS", map[string]string{"GATE_KAFKA_SASL_MECHANISM": "plain", "GATE_KAFKA_SASL_USERNAME": "u", "GATE_KAFKA_SASL_PASSWORD": "p", "GATE_KAFKA_TLS": "true"}, nil},
		{"scram without TLS", map[string]string{"GATE_KAFKA_SASL_MECHANISM": "scram-sha-512", "GATE_KAFKA_SASL_USERNAME": "u", "GATE_KAFKA_SASL_PASSWORD": "p"}, nil},
		{"skip_verify", map[string]string{"GATE_REDIS_URLS": "rediss://127.0.0.1:1/0?skip_verify=true"}, []string{"skip_verify=true turns off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := startupLog(t, tc.env)
			var warns []string
			for l := range strings.SplitSeq(out.String(), "\n") {
				if strings.Contains(l, `"level":"WARN"`) {
					warns = append(warns, l)
				}
			}
			if len(warns) != len(tc.want) {
				t.Fatalf("warnings %q, want %d: %q", warns, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(warns[i], w) || strings.Contains(warns[i], `"p"`) {
					t.Errorf("warning %q, want it to say %q (and no password)", warns[i], w)
				}
			}
		})
	}
}

// startupLog is what logStartup writes for a gate configured by env, over a broker and a
// Redis that never answer (GATE_KAFKA_BROKERS and GATE_REDIS_URLS unless env sets them).
func startupLog(t *testing.T, env map[string]string) *bytes.Buffer {
	t.Helper()
	all := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1", "GATE_REDIS_URLS": "redis://127.0.0.1:1/0"}
	maps.Copy(all, env)
	cfg, err := config.Load(getenvFrom(all), slices.Collect(maps.Keys(all)))
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.DiscardHandler)
	g, err := gate.New(cfg, discard, gate.Options{Writer: "start-line"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.CloseRedis(discard)
	defer g.Consumer.Close()
	var out bytes.Buffer
	logStartup(slog.New(slog.NewJSONHandler(&out, nil)), cfg, g.Lim, g.Ticker, "127.0.0.1:8080", memLimit{})
	return &out
}
