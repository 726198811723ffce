package faulttest_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/faulttest"
)

// badConfig holds, for each GATE_ variable, a malformed value. freeForm lists the
// variables that take any string, so have none.
var badConfig = map[string]string{
	"GATE_KAFKA_BROKERS":           "kafka-1",
	"GATE_INPUT_TOPIC":             "bad topic",
	"GATE_ACCEPTED_TOPIC":          "a/b",
	"GATE_OVERFLOW_TOPIC":          "x y",
	"GATE_DEAD_LETTER_TOPIC":       "..",
	"GATE_KEY_FROM":                "body:team",
	"GATE_VALIDATE_JSON":           "maybe",
	"GATE_COST":                    "records",
	"GATE_MAX_KEY_BYTES":           "0",
	"GATE_FORCE_OVERFLOW":          "a,,b",
	"GATE_DRY_RUN":                 "yes please",
	"GATE_OVERFLOW_KEEP_KEY":       "2",
	"GATE_MAX_POLL_RECORDS":        "-1",
	"GATE_COMMIT_INTERVAL":         "10",
	"GATE_PRODUCE_RETRIES":         "ten",
	"GATE_MAX_BUFFERED_RECORDS":    "0",
	"GATE_MAX_BUFFERED_BYTES":      "1KB",
	"GATE_KAFKA_MAX_MESSAGE_BYTES": "100",
	"GATE_REVOKE_TIMEOUT":          "-5s",
	"GATE_SHUTDOWN_TIMEOUT":        "forever",
	"GATE_KAFKA_SESSION_TIMEOUT":   "10ms",
	"GATE_KAFKA_REBALANCE_TIMEOUT": "1s",
	"GATE_KAFKA_FETCH_MAX_WAIT":    "soon",
	"GATE_KAFKA_FETCH_MAX_BYTES":   "100",
	"GATE_KAFKA_START_OFFSET":      "newest",
	"GATE_KAFKA_GROUP_PROTOCOL":    "eager",
	"GATE_ON_UNDELIVERABLE":        "drop",
	"GATE_STALL_RESTART":           "-1s",
	"GATE_STALL_NOT_READY":         "soon",
	"GATE_ON_DATA_LOSS":            "ignore",
	"GATE_KAFKA_TLS":               "on",
	"GATE_KAFKA_TLS_CA_FILE":       "/nonexistent/ca.pem",
	"GATE_KAFKA_TLS_CERT_FILE":     "/nonexistent/cert.pem", // without a key file
	"GATE_KAFKA_TLS_KEY_FILE":      "/nonexistent/key.pem",  // without a cert file
	"GATE_KAFKA_SASL_MECHANISM":    "gssapi",
	"GATE_KAFKA_CLIENT_ID":         strings.Repeat("c", 248), // at most 247 bytes
	"GATE_LIMIT_MODE":              "drop",
	"GATE_CLOCK":                   "processing",
	"GATE_EVENT_TIME_FROM":         "header:ts",
	"GATE_MAX_EVENT_AGE":           "-1h",
	"GATE_DELIVERY":                "exactly-twice",
	"GATE_TRANSACTIONAL_ID":        "gate 0",
	"GATE_TRANSACTION_TIMEOUT":     "100ms",
	"GATE_TRANSACTION_INTERVAL":    "a tenth",
	"GATE_TRANSACTION_MAX_RECORDS": "0",
	"GATE_OUTCOMES_TOPIC":          "out comes",
	"GATE_OUTCOMES_INTERVAL":       "7s",
	"GATE_OUTCOMES_MAX_ROWS":       "0",
	"GATE_OUTCOMES_FLUSH_INTERVAL": "50ms",
	"GATE_WINDOW":                  "1 minute",
	"GATE_THRESHOLD":               "-5",
	"GATE_LIMITS":                  "1h",
	"GATE_RULES_FILE":              "/nonexistent/rules.yaml",
	"GATE_OVERRIDES":               "team1:5000",
	"GATE_SYNC_INTERVAL":           "0",
	"GATE_OVERRIDES_REFRESH":       "hourly",
	"GATE_OVERRIDES_MAX_ENTRIES":   "-1",
	"GATE_HOT_EVERY_TICK":          "sometimes",
	"GATE_PENDING_READ_SHARE":      "NaN",
	"GATE_SYNC_FLOOR":              "0.5",
	"GATE_COLD_WRITE_INTERVAL":     "2h",
	"GATE_DIVERT_HOLD":             "-5s",
	"GATE_DIVERT_RELEASE":          "2",
	"GATE_THRESHOLD_MODE":          "learned",
	"GATE_ADAPTIVE_FACTOR":         "1",
	"GATE_ADAPTIVE_FLOOR":          "0",
	"GATE_ADAPTIVE_CEILING":        "-1",
	"GATE_ADAPTIVE_HALF_LIFE":      "soon",
	"GATE_ADAPTIVE_MAX_SPIKE":      "10m",
	"GATE_ADAPTIVE_MIN_HISTORY":    "a day",
	"GATE_CACHE_CAPACITY":          "-1",
	"GATE_CACHE_TTL":               "1d",
	"GATE_CACHE_IDLE_TIMEOUT":      "-1s",
	"GATE_TICK_INTERVAL":           "0s",
	"GATE_REDIS_MODE":              "ring",
	"GATE_REDIS_SENTINEL_MASTER":   "my master",
	"GATE_REDIS_SENTINEL_ADDRS":    "sentinel-1",
	"GATE_REDIS_SENTINEL_USERNAME": "gate",      // without GATE_REDIS_MODE=sentinel
	"GATE_REDIS_SENTINEL_PASSWORD": "hunter2pw", // without GATE_REDIS_MODE=sentinel, and never repeated
	"GATE_REDIS_URLS":              "http://127.0.0.1:6379",
	"GATE_REDIS_KEY_TTL":           "-1s",
	"GATE_REDIS_TLS_CA_FILE":       "/nonexistent/ca.pem",
	"GATE_REDIS_TLS_CERT_FILE":     "/nonexistent/cert.pem", // without a key file
	"GATE_REDIS_TLS_KEY_FILE":      "/nonexistent/key.pem",  // without a cert file
	"GATE_REDIS_USERNAME":          "gate",                  // without GATE_REDIS_PASSWORD
	"GATE_REDIS_READ_TIMEOUT":      "fast",
	"GATE_REDIS_WRITE_TIMEOUT":     "-250ms",
	"GATE_REDIS_DIAL_TIMEOUT":      "0",
	"GATE_KEYS_PER_COMMAND":        "1",
	"GATE_KEYS_PER_TICK":           "1",
	"GATE_MAX_PENDING_WRITES":      "0",
	"GATE_MAX_READS_PER_TICK":      "-3",
	"GATE_HTTP_ADDR":               "8080",
	"GATE_TEAM_API":                "sure",
	"GATE_LOG_LEVEL":               "verbose",
	"GATE_LOG_FORMAT":              "xml",
	"GATE_MEMORY_LIMIT_RATIO":      "1.5",
}

var freeForm = []string{
	"GATE_GROUP_ID", "GATE_KAFKA_TLS_SERVER_NAME",
	"GATE_KAFKA_SASL_USERNAME", "GATE_KAFKA_SASL_PASSWORD", "GATE_REDIS_PASSWORD", "GATE_REDIS_PREFIX",
}

// TestConfigErrorsAtProcessLevel runs the built binary once per malformed variable:
// it exits with status 2 at once, having written one line, which names the variable,
// and nothing else: no log line, so nothing started (the HTTP listener, the consumer
// and the tick all come after the "gate started" line).
func TestConfigErrorsAtProcessLevel(t *testing.T) {
	needGate(t)
	t.Parallel()
	out, err := exec.Command(gateBin, "env").Output()
	if err != nil {
		t.Fatalf("gate env: %v", err)
	}
	vars := regexp.MustCompile("(?m)^\\| `(GATE_[A-Z0-9_]+)`").FindAllStringSubmatch(string(out), -1)
	if len(vars) < 40 {
		t.Fatalf("gate env lists %d variables:\n%s", len(vars), out)
	}
	for _, v := range vars {
		if _, ok := badConfig[v[1]]; !ok && !slices.Contains(freeForm, v[1]) {
			t.Errorf("%s: no malformed value in this test's table", v[1])
		}
	}
	cases := map[string]map[string]string{}
	for k, v := range badConfig {
		cases[k+"="+v] = map[string]string{k: v}
	}
	// A password in a URL that cannot be parsed is not repeated.
	cases["GATE_REDIS_URLS=unparsable with password"] = map[string]string{"GATE_REDIS_URLS": "redis://:hunter2pw@[::1"}
	cases["GATE_REDIS_PASSWORD is not repeated"] = map[string]string{"GATE_REDIS_PASSWORD": "hunter2pw", "GATE_REDIS_KEY_TTL": "-1s"}
	cases["GATE_KAFKA_SASL_MECHANISM=plain without password"] = map[string]string{"GATE_KAFKA_SASL_MECHANISM": "plain", "GATE_KAFKA_SASL_USERNAME": "u"}
	cases["GATE_WINDOWS (typo)"] = map[string]string{"GATE_WINDOWS": "60s"}
	cases["GATE_TICK_INTERVAL >= GATE_WINDOW"] = map[string]string{"GATE_TICK_INTERVAL": "10s", "GATE_WINDOW": "5s"}
	cases["GATE_ACCEPTED_TOPIC = GATE_INPUT_TOPIC"] = map[string]string{"GATE_ACCEPTED_TOPIC": "events"}
	// A rules file with a problem, and one beside a variable it replaces.
	dir := t.TempDir()
	badRules, goodRules := filepath.Join(dir, "bad.yaml"), filepath.Join(dir, "good.yaml")
	for path, body := range map[string]string{
		badRules:  "rules:\n  - {name: a, key: key, limits: [1m:zero]}\n",
		goodRules: "rules:\n  - {name: a, key: key, limits: [1m:10]}\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases["GATE_RULES_FILE with a bad limit"] = map[string]string{"GATE_RULES_FILE": badRules}
	cases["GATE_RULES_FILE with GATE_KEY_FROM"] = map[string]string{"GATE_RULES_FILE": goodRules, "GATE_KEY_FROM": "json:x"}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{
				// Were the gate to start anyway, it would reach nothing real.
				"GATE_HTTP_ADDR":     "127.0.0.1:0",
				"GATE_KAFKA_BROKERS": "127.0.0.1:1",
				"GATE_REDIS_URLS":    "redis://127.0.0.1:1/0",
			}
			var named string
			for k, v := range env {
				vars[k] = v
				if named == "" || k < named {
					named = k
				}
			}
			if name == "GATE_KAFKA_TLS_KEY_FILE=/nonexistent/key.pem" {
				named = "GATE_KAFKA_TLS_CERT_FILE" // the pair is reported under the certificate
			}
			g := faulttest.StartGate(t, gateBin, "bad-config", vars)
			code := g.Wait(20 * time.Second)
			logs := g.Logs()
			if code != 2 {
				t.Errorf("exit status %d, want 2; output:\n%s", code, logs)
			}
			lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
			if len(lines) != 1 {
				t.Errorf("%d lines of output, want one:\n%s", len(lines), logs)
			}
			if !strings.Contains(lines[0], named) {
				t.Errorf("the line does not name %s: %s", named, lines[0])
			}
			if name == "GATE_RULES_FILE with a bad limit" && !strings.Contains(lines[0], "bad.yaml:2:") {
				t.Errorf("the line does not name the rules file's line: %s", lines[0])
			}
			if strings.Contains(logs, "gate started") || strings.Contains(logs, `"level"`) {
				t.Errorf("something started: %s", logs)
			}
			if strings.Contains(logs, "hunter2pw") {
				t.Errorf("the password is repeated: %s", logs)
			}
		})
	}
}

// TestFreeFormVariablesTakeAnyValue: each variable freeForm exempts from badConfig takes
// any string (a long one with spaces, ':' and braces), as docs/reliability.md says of
// them, and that page counts them as freeForm does; a variable that came to be checked
// must move to badConfig, with a value its check refuses.
func TestFreeFormVariablesTakeAnyValue(t *testing.T) {
	t.Parallel()
	value := "a b:{c}/%" + strings.Repeat("z", 300)
	for _, name := range freeForm {
		env := map[string]string{name: value}
		if strings.HasPrefix(name, "GATE_KAFKA_SASL_") {
			env["GATE_KAFKA_SASL_MECHANISM"] = "plain" // the user and password need one
			env["GATE_KAFKA_SASL_USERNAME"], env["GATE_KAFKA_SASL_PASSWORD"] = "u", "p"
			env[name] = value // one of the two just set
		}
		names := slices.Collect(maps.Keys(env))
		if _, err := config.Load(func(k string) string { return env[k] }, names); err != nil {
			t.Errorf("%s is in freeForm, but a value of %d bytes is refused: %v", name, len(value), err)
		}
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "reliability.md"))
	if err != nil {
		t.Fatal(err)
	}
	words := []string{"none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	if len(freeForm) >= len(words) {
		t.Fatalf("%d free-form variables: extend this test's words", len(freeForm))
	}
	want := "except " + words[len(freeForm)] + " free-form strings"
	if doc := strings.Join(strings.Fields(string(b)), " "); !strings.Contains(doc, want) {
		t.Errorf("docs/reliability.md does not say %q: %d variables take any value (%v)", want, len(freeForm), freeForm)
	}
}
