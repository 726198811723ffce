package config

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
)

// ruleLimits parses one rule with limits entries under c's options.
func ruleLimits(c Config, entries ...string) ([]rules.Limit, error) {
	quoted := make([]string, len(entries))
	for i, e := range entries {
		quoted[i] = fmt.Sprintf("%q", e)
	}
	s, err := rules.Parse("rules.yaml", []byte("rules:\n  - {name: r, key: key, limits: ["+strings.Join(quoted, ", ")+"]}\n"), c.RulesOptions())
	if err != nil {
		return nil, err
	}
	return s.Rules[0].Limits, nil
}

// A rule's limits take exactly the pairs GATE_LIMITS takes, under the same tick.
func TestRuleLimitsAreGateLimits(t *testing.T) {
	t.Parallel()
	tooBig := "1" + strings.Repeat("0", 18)
	for _, list := range []string{
		"1m:1000", "60s:5", "1h:20000000", "1.5m:10", "90s:10", "2s:1", "59m59s:3", "3600s:1",
		"1500ms:10", "1900ms:10", "1.5s:1", "1m0.5s:1", "1s:1", "500ms:1", "0s:5", "-1m:5", "1000000ns:1",
		"1m", "x:1", "m:1", "1m:0", "1m:-1", "1m:x", "1m:" + tooBig, "1m:1.5", " 1m : 10 ",
		"1m:1,60s:2", "1m:1,1h:2", "1m:1,1500ms:2", "2m:1,1s:2",
	} {
		env := map[string]string{"GATE_LIMITS": list}
		_, lerr := loadMap(env)
		c, err := loadMap(nil)
		if err != nil {
			t.Fatal(err)
		}
		lims, rerr := ruleLimits(c, strings.Split(list, ",")...)
		if (lerr == nil) != (rerr == nil) {
			t.Errorf("%q: GATE_LIMITS %v, a rule's limits %v: want both to take it or both to refuse it", list, lerr, rerr)
			continue
		}
		if rerr != nil {
			continue
		}
		if len(lims) != len(strings.Split(list, ",")) {
			t.Errorf("%q: %v", list, lims)
		}
	}
	// A refusal names the rule's file, line, column and limit.
	c, _ := loadMap(nil)
	_, err := ruleLimits(c, "1500ms:10", "1900ms:20")
	for _, want := range []string{
		`rules.yaml:2:34: rules[0] "r".limits[0]: "1500ms:10": window "1500ms" is not a whole number of seconds`,
		`rules.yaml:2:47: rules[0] "r".limits[1]: "1900ms:20": window "1900ms" is not a whole number of seconds`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("1500ms and 1900ms: %v, want %s", err, want)
		}
	}
}

// No two windows a parsed rule can have share a key prefix: a parsed window is a whole
// number of seconds, the prefix's {seconds} exact. The windows valid before keep their
// prefix.
func TestRuleKeyPrefixWindows(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{"GATE_REDIS_PREFIX": "prod"})
	if err != nil {
		t.Fatal(err)
	}
	team := func(w time.Duration) rules.Rule {
		return rules.Rule{Name: "team", Limits: []rules.Limit{{Window: time.Minute}, {Window: w}}}
	}
	if p := c.RuleKeyPrefix(team(time.Hour), 0); p != "prod:rule:team" {
		t.Errorf("first limit: %s", p)
	}
	if p := c.RuleKeyPrefix(team(time.Hour), 1); p != "prod:rule:team/w3600" {
		t.Errorf("a further 1h limit: %s", p)
	}
	// A bytes rule's counts are in another unit: its keys are its own.
	bytes := team(time.Hour)
	bytes.Cost = route.CostBytes
	if p0, p1 := c.RuleKeyPrefix(bytes, 0), c.RuleKeyPrefix(bytes, 1); p0 != "prod:rule:team/bytes" || p1 != "prod:rule:team/bytes/w3600" {
		t.Errorf("a bytes rule's prefixes: %s, %s", p0, p1)
	}
	windows := []string{"1500ms", "1900ms", "2s", "2500ms", "2.9s", "1m", "60s", "1m0.5s", "1m1s", "1h", "3600s", "3600.001s", "24h", "1m0.000000001s"}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		d := time.Duration(rnd.Int64N(200_000)) * time.Second
		d += []time.Duration{0, 0, 0, 1, time.Millisecond, 500 * time.Millisecond, time.Second - 1}[rnd.IntN(7)]
		windows = append(windows, d.String())
	}
	byPrefix := map[string]time.Duration{}
	parsed := 0
	for _, w := range windows {
		lims, err := ruleLimits(c, w+":1")
		if err != nil {
			continue
		}
		parsed++
		d := lims[0].Window
		p := c.RuleKeyPrefix(team(d), 1)
		if other, taken := byPrefix[p]; taken && other != d {
			t.Errorf("windows %s and %s share the prefix %s", other, d, p)
		}
		byPrefix[p] = d
		if want := fmt.Sprintf("prod:rule:team/w%d", d/time.Second); p != want {
			t.Errorf("window %s: prefix %s, want %s (as before)", d, p, want)
		}
	}
	if parsed < 500 {
		t.Errorf("only %d windows parsed", parsed)
	}
}

// A rule the parser reads but whose limits the gate's settings make unbuildable (an
// adaptive rule of 1h under GATE_ADAPTIVE_MAX_SPIKE=2h, valid against GATE_WINDOW's
// minute) is a problem of the file, at the rule's limits, so that a reload refuses it
// and gate rules check reports it. Before, it parsed, and the gate found it unusable
// only when building it: at start with an error in no FILE:LINE:COL form, at a reload
// after reporting it loaded and valid, keeping the old rules in silence.
func TestRuleLimitsTheGateCannotBuild(t *testing.T) {
	c, err := loadMap(map[string]string{"GATE_ADAPTIVE_MAX_SPIKE": "2h"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rules.Parse("r.yaml", []byte("rules:\n  - name: r\n    key: json:team_id\n    limits: [1h:1000]\n    threshold_mode: adaptive\n"), c.RulesOptions())
	if err == nil || !strings.Contains(err.Error(), `r.yaml:4:13: rules[0] "r".limits: limit 1h:1000`) {
		t.Fatalf("err = %v, want the rule's limits named at r.yaml:4:13", err)
	}
	if _, err := rules.Parse("r.yaml", []byte("rules:\n  - {name: r, key: json:team_id, limits: [1m:1000], threshold_mode: adaptive}\n"), c.RulesOptions()); err != nil {
		t.Errorf("a minute's adaptive rule under the same settings: %v", err)
	}
}

// An adaptive rule whose first window makes a GATE_ADAPTIVE_* value bad (valid against
// GATE_WINDOW's minute) is refused naming the variable and what the rule's window needs of
// it, not in the learner's own words ("max spike 1h30m"), which name no variable; its value
// as an operator writes one (1h30m for 90m, where it was time.Duration's 1h30m0s).
func TestAdaptiveRuleNamesTheVariable(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"GATE_ADAPTIVE_MAX_SPIKE", "90m", `GATE_ADAPTIVE_MAX_SPIKE="1h30m": want a duration from 2h (an hour and two of the rule's first windows) to 168h`},
		{"GATE_ADAPTIVE_HALF_LIFE", "10m", `GATE_ADAPTIVE_HALF_LIFE="10m": want a duration of at least the rule's first window (30m)`},
	} {
		c, err := loadMap(map[string]string{tc.key: tc.value})
		if err != nil {
			t.Fatal(err)
		}
		_, err = rules.Parse("r.yaml", []byte("rules:\n  - name: r\n    key: json:team_id\n    limits: [30m:1000]\n    threshold_mode: adaptive\n"), c.RulesOptions())
		if err == nil || !strings.Contains(err.Error(), `r.yaml:4:13: rules[0] "r".limits: `) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: err = %v, want %q at r.yaml:4:13", tc.key, tc.value, err, tc.want)
		}
	}
}

// GATE_FORCE_OVERFLOW and GATE_OVERRIDES name keys as GATE_KEY_FROM builds them, as a
// rule's force list does: under a composite key, unescaped, it names nothing the gate counts, and the gate
// refuses it at start, naming the variable.
func TestForceOverflowKeysEscaped(t *testing.T) {
	if _, err := loadMap(map[string]string{"GATE_KEY_FROM": "json:token+distinct_id", "GATE_FORCE_OVERFLOW": "phc_x:user:1"}); err == nil || !strings.Contains(err.Error(), "GATE_FORCE_OVERFLOW") {
		t.Errorf("unescaped composite key: err = %v, want GATE_FORCE_OVERFLOW named", err)
	}
	// GATE_OVERRIDES, named beside it, likewise.
	if _, err := loadMap(map[string]string{"GATE_KEY_FROM": "json:token+distinct_id", "GATE_OVERRIDES": "phc_x:user:1=5"}); err == nil || !strings.Contains(err.Error(), "GATE_OVERRIDES") {
		t.Errorf("unescaped composite override: err = %v, want GATE_OVERRIDES named", err)
	}
	if _, err := loadMap(map[string]string{"GATE_KEY_FROM": "json:token+distinct_id", "GATE_OVERRIDES": "phc_x:user%3A1=5"}); err != nil {
		t.Errorf("escaped composite override: %v", err)
	}
	for _, env := range []map[string]string{
		{"GATE_KEY_FROM": "json:token+distinct_id", "GATE_FORCE_OVERFLOW": "phc_x:user%3A1,phc_y:u2"},
		{"GATE_FORCE_OVERFLOW": "team:with:colons"}, // one field: never escaped
	} {
		if _, err := loadMap(env); err != nil {
			t.Errorf("%v: %v", env, err)
		}
	}
}

// A forced or overridden key longer than GATE_MAX_KEY_BYTES names nothing the gate counts
// (its records are dead-lettered, key_too_long): refused at start, as an unescaped one is,
// in GATE_FORCE_OVERFLOW, GATE_OVERRIDES and a rule's force list.
func TestForcedKeyLongerThanMaxKeyBytes(t *testing.T) {
	for _, env := range []map[string]string{
		{"GATE_MAX_KEY_BYTES": "8", "GATE_FORCE_OVERFLOW": "short,123456789"},
		{"GATE_MAX_KEY_BYTES": "8", "GATE_OVERRIDES": "123456789=5"},
		{"GATE_MAX_KEY_BYTES": "8", "GATE_KEY_FROM": "json:a+b", "GATE_FORCE_OVERFLOW": "1234:%3A12"}, // 10 bytes as escaped
	} {
		if _, err := loadMap(env); err == nil || !strings.Contains(err.Error(), "GATE_MAX_KEY_BYTES") {
			t.Errorf("%v: err = %v, want the key refused for GATE_MAX_KEY_BYTES", env, err)
		}
	}
	c, err := loadMap(map[string]string{"GATE_MAX_KEY_BYTES": "8", "GATE_FORCE_OVERFLOW": "12345678", "GATE_OVERRIDES": "12345678=5"})
	if err != nil {
		t.Fatalf("keys of exactly GATE_MAX_KEY_BYTES: %v", err)
	}
	_, err = rules.Parse("r.yaml", []byte("rules:\n  - {name: r, key: json:team_id, limits: [1m:1000], force: [\"12345678\", \"123456789\"]}\n"), c.RulesOptions())
	if err == nil || !strings.Contains(err.Error(), "force[1]") || strings.Contains(err.Error(), "force[0]") {
		t.Errorf("rule force list: err = %v, want force[1] alone refused", err)
	}
}

// gateRouter builds the router a gate builds from env, as internal/gate does: the
// file-less gate's (NewMulti over GATE_WINDOW/GATE_LIMITS's limiters) or, with
// GATE_RULES_FILE, the router of file's rules (rules.Parse, RuleLimitConfigs,
// RouteRule, NewRules), every limiter on clk.
func gateRouter(t *testing.T, env map[string]string, file string, clk *clock.Fake) *route.Router {
	t.Helper()
	if file != "" {
		env = withEnv(env, map[string]string{"GATE_RULES_FILE": "rules.yaml"})
	}
	c, err := loadMap(env)
	if err != nil {
		t.Fatal(err)
	}
	if file == "" {
		var lims []*limit.Limiter
		for _, lc := range append([]limit.Config{c.LimitConfig()}, c.ExtraLimitConfigs()...) {
			l, err := limit.New(lc, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			lims = append(lims, l)
		}
		r, err := route.NewMulti(c.RouteConfig(), lims, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	set, err := rules.Parse("rules.yaml", []byte(file), c.RulesOptions())
	if err != nil {
		t.Fatal(err)
	}
	var rrs []route.Rule
	for _, ru := range set.Rules {
		var lims []*limit.Limiter
		for _, lc := range c.RuleLimitConfigs(ru) {
			l, err := limit.New(lc, clk, nil)
			if err != nil {
				t.Fatal(err)
			}
			lims = append(lims, l)
		}
		rrs = append(rrs, RouteRule(ru, lims))
	}
	r, err := route.NewRules(c.RouteConfig(), rrs, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A gate with a rules file of one rule saying what the file-less gate's variables say
// (GATE_KEY_FROM as key, GATE_WINDOW/GATE_LIMITS as limits, GATE_LIMIT_MODE as mode,
// GATE_COST as cost, GATE_FORCE_OVERFLOW as force; docs/rules.md's "Moving from
// GATE_LIMITS to a rules file") routes every record as the file-less gate does, byte for
// byte, but for what docs/rules.md says the rule's name adds: gate-overflow-rule on a
// record sent to overflow, and the rule named in gate-error-detail (not for a value that
// is not JSON). The route package's TestRulesOneRuleFileRoutesAsFileless holds the router
// to it record by record; this holds the way the gate builds either router from its
// settings.
func TestOneRuleFileRoutesAsFileless(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		common map[string]string // both gates' settings
		vars   map[string]string // the file-less gate's
		rule   string            // the rule's fields past its name
	}{
		{"team", map[string]string{},
			map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "3", "GATE_FORCE_OVERFLOW": "forced,42"},
			"key: json:team_id, limits: [1m:3], force: [forced, \"42\"]"},
		{"team_limits_cap_bytes", map[string]string{"GATE_OVERFLOW_KEEP_KEY": "true"},
			map[string]string{"GATE_LIMITS": "1m:90,1h:200", "GATE_LIMIT_MODE": "cap", "GATE_COST": "bytes", "GATE_FORCE_OVERFLOW": "forced"},
			"key: json:team_id, limits: [1m:90, 1h:200], mode: cap, cost: bytes, force: [forced]"},
		{"header", map[string]string{"GATE_DRY_RUN": "true"},
			map[string]string{"GATE_KEY_FROM": "header:team", "GATE_LIMITS": "1m:3,2m:4", "GATE_FORCE_OVERFLOW": "forced"},
			"key: header:team, limits: [1m:3, 2m:4], force: [forced]"},
		{"key", map[string]string{"GATE_MAX_KEY_BYTES": "8"},
			map[string]string{"GATE_KEY_FROM": "key", "GATE_WINDOW": "1m", "GATE_THRESHOLD": "3", "GATE_FORCE_OVERFLOW": "forced"},
			"key: key, limits: [1m:3], force: [forced]"},
		{"composite", map[string]string{"GATE_VALIDATE_JSON": "true"},
			map[string]string{"GATE_KEY_FROM": "json:team_id+distinct_id", "GATE_WINDOW": "1m", "GATE_THRESHOLD": "3", "GATE_FORCE_OVERFLOW": "forced:u%3A2"},
			// track: all, as the file-less gate keeps every key (docs/rules.md: track)
			"key: json:team_id+distinct_id, limits: [1m:3], force: [\"forced:u%3A2\"], track: all"},
		{"event", map[string]string{"GATE_CLOCK": "event"},
			map[string]string{"GATE_WINDOW": "1m", "GATE_THRESHOLD": "3"},
			"key: json:team_id, limits: [1m:3]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clkA, clkB := clock.NewFake(time.Unix(1_800_000_000, 0)), clock.NewFake(time.Unix(1_800_000_000, 0))
			fileless := gateRouter(t, withEnv(c.common, c.vars), "", clkA)
			file := gateRouter(t, c.common, "rules:\n  - {name: team, "+c.rule+"}\n", clkB)
			var values []string
			for i := range 6 {
				values = append(values, fmt.Sprintf(`{"team_id":"t1","distinct_id":"u1","n":%d}`, i))
			}
			values = append(values,
				`{"team_id":"forced","distinct_id":"u:2"}`, `{"team_id":42,"distinct_id":"u"}`, `{"team_id":"t2"}`,
				`{"distinct_id":"u"}`, `{"team_id":null}`, `{"team_id":""}`, `{"team_id":true}`, `{"team_id":{}}`,
				`{"team_id":"a","team_id":"b"}`, `{"team_id":"`+strings.Repeat("x", 300)+`"}`, `{"team_id":"t2",`,
				`{"team_id":"t2","distinct_id":"u","x":}`, `[1]`, `not json`, ``, "{\"team_id\":\"\xff\"}",
				`{"team_id":"t3","distinct_id":"u","blob":"`+strings.Repeat("b", 10_000)+`"}`)
			var sA, sB route.Scratch
			for i, v := range values {
				for _, h := range []string{"t1", "forced", "", "a-much-too-long-team"} {
					in := &kgo.Record{Topic: "events", Partition: 1, Offset: int64(i), Value: []byte(v), Key: []byte(h),
						Timestamp: time.Unix(1_799_999_990, 0), Headers: []kgo.RecordHeader{{Key: "team", Value: []byte(h)}}}
					var outA, outB kgo.Record
					oA := fileless.RouteInto(clkA.Now(), in, &sA, &outA)
					oB := file.RouteInto(clkB.Now(), in, &sB, &outB)
					want := outA
					want.Headers = nil
					for _, hd := range outA.Headers {
						if hd.Key == route.HeaderErrorDetail && oA.Reason != route.ReasonNotJSON {
							hd.Value = append([]byte("rule team: "), hd.Value...)
						}
						want.Headers = append(want.Headers, hd)
						if hd.Key == route.HeaderOverflowReason {
							want.Headers = append(want.Headers, kgo.RecordHeader{Key: route.HeaderOverflowRule, Value: []byte("team")})
						}
					}
					show := func(r kgo.Record) string {
						return fmt.Sprintf("%s key=%q %q", r.Topic, r.Key, r.Headers)
					}
					if show(outB) != show(want) || string(outB.Value) != string(outA.Value) || outB.Timestamp != outA.Timestamp {
						t.Errorf("value %.60q header/key %q:\n file     %s\n fileless %s", v, h, show(outB), show(outA))
					}
					oB.Rule, oB.KeyRule, oB.DeadRule = "", "", "" // the file-less rule has no name
					if fmt.Sprint(oA) != fmt.Sprint(oB) {
						t.Errorf("value %.60q header/key %q: outcome\n file     %+v\n fileless %+v", v, h, oB, oA)
					}
				}
				clkA.Advance(time.Second)
				clkB.Advance(time.Second)
			}
		})
	}
}

// TestRulesFileTickNotCheckedAgainstGateWindow: with a rules file GATE_WINDOW must be
// unset, and each rule's window is checked against the tick by the rules themselves; a
// tick of a minute (every rule's window an hour) was refused against GATE_WINDOW's
// default, a variable the user may not set.
func TestRulesFileTickNotCheckedAgainstGateWindow(t *testing.T) {
	env := map[string]string{"GATE_RULES_FILE": "rules.yaml", "GATE_TICK_INTERVAL": "60s", "GATE_SYNC_INTERVAL": "60s"}
	if _, err := loadMap(env); err != nil {
		t.Errorf("GATE_RULES_FILE with GATE_TICK_INTERVAL=60s: %v; want it loaded (each rule's window is checked by the rules)", err)
	}
	// Without a rules file, GATE_WINDOW's check stands.
	if _, err := loadMap(map[string]string{"GATE_TICK_INTERVAL": "60s", "GATE_SYNC_INTERVAL": "60s"}); err == nil || !strings.Contains(err.Error(), "GATE_TICK_INTERVAL") {
		t.Errorf("GATE_TICK_INTERVAL=60s without a rules file: %v; want it refused against GATE_WINDOW (60s)", err)
	}
}

// TestDivertHoldUnsetIsOnePrimaryWindow: GATE_DIVERT_HOLD unset holds a team one
// GATE_WINDOW (a rule's first window) after it calmed, under every limit; a further
// limit's hold was its own window (a team over a 24h limit held a day after it calmed).
// A hold that is set is every limit's.
func TestDivertHoldUnsetIsOnePrimaryWindow(t *testing.T) {
	c, err := loadMap(map[string]string{"GATE_LIMITS": "1m:1000,1h:20000,24h:100000"})
	if err != nil {
		t.Fatal(err)
	}
	for i, lc := range c.ExtraLimitConfigs() {
		if lc.DivertHold != time.Minute {
			t.Errorf("GATE_LIMITS limit %d (%s): hold %s, want GATE_WINDOW's 1m", i+1, lc.Window, lc.DivertHold)
		}
	}
	r := rules.Rule{Name: "r", Limits: []rules.Limit{{Window: 30 * time.Second, Threshold: 10}, {Window: 24 * time.Hour, Threshold: 1000}}}
	for i, lc := range c.RuleLimitConfigs(r) {
		if want := time.Duration(0); i == 0 && lc.DivertHold != want || i > 0 && lc.DivertHold != 30*time.Second {
			t.Errorf("rule limit %d (%s): hold %s, want the rule's first window (30s; the first limit's 0: the limiter's default, its window)", i, lc.Window, lc.DivertHold)
		}
	}
	c, err = loadMap(map[string]string{"GATE_LIMITS": "1m:1000,24h:100000", "GATE_DIVERT_HOLD": "5m"})
	if err != nil {
		t.Fatal(err)
	}
	if h := c.ExtraLimitConfigs()[0].DivertHold; h != 5*time.Minute {
		t.Errorf("GATE_DIVERT_HOLD=5m: the 24h limit's hold %s, want 5m", h)
	}
}

// TestRulesFileColdWriteNotCheckedAgainstGateWindow: with a rules file GATE_WINDOW must be
// unset, and each rule's limit takes GATE_COLD_WRITE_INTERVAL capped at its own window
// (RuleLimitConfigs); an interval of 5m (every rule's window an hour) was refused against
// GATE_WINDOW's default, a variable the user may not set.
func TestRulesFileColdWriteNotCheckedAgainstGateWindow(t *testing.T) {
	c, err := loadMap(map[string]string{"GATE_RULES_FILE": "rules.yaml", "GATE_COLD_WRITE_INTERVAL": "5m"})
	if err != nil {
		t.Fatalf("GATE_RULES_FILE with GATE_COLD_WRITE_INTERVAL=5m: %v; want it loaded (each rule's limit caps it at its window)", err)
	}
	r := rules.Rule{Name: "r", Limits: []rules.Limit{{Window: time.Hour, Threshold: 10}, {Window: time.Minute, Threshold: 1}}}
	for i, lc := range c.RuleLimitConfigs(r) {
		if want := min(5*time.Minute, r.Limits[i].Window); lc.ColdWriteInterval != want {
			t.Errorf("rule limit %d (%s): cold-write interval %s, want %s", i, lc.Window, lc.ColdWriteInterval, want)
		}
	}
	// Without a rules file, GATE_WINDOW's check stands.
	if _, err := loadMap(map[string]string{"GATE_COLD_WRITE_INTERVAL": "5m"}); err == nil || !strings.Contains(err.Error(), "GATE_COLD_WRITE_INTERVAL") {
		t.Errorf("GATE_COLD_WRITE_INTERVAL=5m without a rules file: %v; want it refused against GATE_WINDOW (60s)", err)
	}
}

// TestRulesFileAdaptiveNotCheckedAgainstGateWindow: with a rules file GATE_WINDOW must be
// unset, and each adaptive rule's durations are checked against its own first window as
// the file is read (RulesOptions' Check). GATE_ADAPTIVE_MAX_SPIKE=1h1m, which an adaptive
// rule of 10 s takes (an hour and 20 s), was refused against GATE_WINDOW's default (an
// hour and two minutes), as was GATE_ADAPTIVE_MIN_HISTORY=30s with no adaptive rule (a
// review). What no window changes is still refused.
func TestRulesFileAdaptiveNotCheckedAgainstGateWindow(t *testing.T) {
	c, err := loadMap(map[string]string{"GATE_RULES_FILE": "rules.yaml", "GATE_ADAPTIVE_MAX_SPIKE": "1h1m", "GATE_ADAPTIVE_MIN_HISTORY": "30s", "GATE_ADAPTIVE_HALF_LIFE": "30s"})
	if err != nil {
		t.Fatalf("GATE_RULES_FILE with GATE_ADAPTIVE_MAX_SPIKE=1h1m, _MIN_HISTORY=30s, _HALF_LIFE=30s: %v; want it loaded (each adaptive rule's window is checked with the file)", err)
	}
	check := c.RulesOptions().Check
	ten := rules.Rule{Name: "r", Adaptive: true, Limits: []rules.Limit{{Window: 10 * time.Second, Threshold: 500}}}
	if err := check(ten); err != nil {
		t.Errorf("an adaptive rule of 10 s under these: %v, want it taken", err)
	}
	minute := rules.Rule{Name: "m", Adaptive: true, Limits: []rules.Limit{{Window: time.Minute, Threshold: 500}}}
	if err := check(minute); err == nil || !strings.Contains(err.Error(), "GATE_ADAPTIVE") {
		t.Errorf("an adaptive rule of a minute under these: %v, want it refused, naming the variable", err)
	}
	for k, v := range map[string]string{"GATE_ADAPTIVE_MAX_SPIKE": "59m", "GATE_ADAPTIVE_MIN_HISTORY": "0s", "GATE_ADAPTIVE_HALF_LIFE": "-1s"} {
		if _, err := loadMap(map[string]string{"GATE_RULES_FILE": "rules.yaml", k: v}); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("GATE_RULES_FILE with %s=%s: %v; want it refused", k, v, err)
		}
	}
	// Without a rules file, GATE_WINDOW's check stands.
	if _, err := loadMap(map[string]string{"GATE_ADAPTIVE_MAX_SPIKE": "1h1m"}); err == nil || !strings.Contains(err.Error(), "GATE_ADAPTIVE_MAX_SPIKE") {
		t.Errorf("GATE_ADAPTIVE_MAX_SPIKE=1h1m without a rules file: %v; want it refused against GATE_WINDOW (60s)", err)
	}
}
