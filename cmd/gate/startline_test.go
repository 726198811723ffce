package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"regexp"
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
	cfg, err := config.Load(getenvFrom(map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    "redis://127.0.0.1:1/0",
	}), nil)
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
