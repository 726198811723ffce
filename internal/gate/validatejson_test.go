package gate

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/capturegate/gate/internal/redistest"
)

// GATE_VALIDATE_JSON=true beside rules no enforced rule of which reads JSON is accepted (a
// reload may bring one in) but checks nothing: the rules line is followed by a warning
// saying so, for the file the gate starts with and for each reload's, and none for rules
// that read JSON (a review: it was accepted and did nothing, said only in its description).
func TestValidateJSONWithRulesReadingNoJSONIsSaid(t *testing.T) {
	t.Parallel()
	const warning = "GATE_VALIDATE_JSON=true checks nothing"
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeRules(t, path, "rules:\n  - {name: hdr, key: header:team, limits: [1m:100]}\n  - {name: shadowed, key: json:team_id, limits: [1m:100], shadow: true}\n")
	cfg := load(t, map[string]string{
		"GATE_KAFKA_BROKERS": "127.0.0.1:1",
		"GATE_REDIS_URLS":    srv.URL(),
		"GATE_RULES_FILE":    path,
		"GATE_VALIDATE_JSON": "true",
	})
	g, logs := startReloadingLogged(t, cfg, "validate-json-test")
	g.LogRules()
	if !strings.Contains(logs.String(), warning) || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("header rules and a shadow JSON rule under GATE_VALIDATE_JSON=true: no warning %q:\n%s", warning, logs)
	}
	writeRules(t, path, "rules:\n  - {name: team, key: json:team_id, limits: [1m:100]}\n")
	waitFor(t, "the reload's rules line", func() bool { return strings.Contains(logs.String(), "generation=2") })
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, warning) && strings.Contains(l, "generation=2") {
			t.Errorf("a rule reading JSON under GATE_VALIDATE_JSON=true warned:\n%s", l)
		}
	}
	writeRules(t, path, "rules:\n  - {name: hdr2, key: header:team, limits: [1m:50]}\n")
	waitFor(t, "the warning for the third file", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, warning) && strings.Contains(l, "generation=3") {
				return true
			}
		}
		return false
	})
}
