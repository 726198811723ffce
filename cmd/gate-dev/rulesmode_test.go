package main

import (
	"testing"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/limit"
)

// The demo's rules take GATE_LIMIT_MODE, as its docs and its refusal of the other
// variables say: both of them. The user rule kept divert under GATE_LIMIT_MODE=cap (a
// review).
func TestDevRulesTakeTheLimitMode(t *testing.T) {
	env := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:9092", "GATE_REDIS_URLS": "redis://127.0.0.1:6379/0",
		"GATE_WINDOW": "10s", "GATE_THRESHOLD": "2000", "GATE_LIMIT_MODE": "cap"}
	cfg, err := config.Load(func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	set, err := devRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, ru := range set.Rules {
		if ru.Mode != limit.Cap {
			t.Errorf("rule %s in mode %s under GATE_LIMIT_MODE=cap, want cap", ru.Name, ru.Mode)
		}
	}
}
