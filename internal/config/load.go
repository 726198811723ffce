package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/capturegate/gate/internal/rules"
)

// Load reads Config through getenv and checks it (Validate). names lists the variables
// set in the environment (only their names); a GATE_ name among them that Config does not
// define is an error, since it is most likely a typo whose value would otherwise be
// ignored in silence, unless it is one of the variables Kubernetes sets for a Service
// named gate or gate-... (see isServiceLink).
//
// Each value is parsed by envconfig.Process, by its field's type: the types of the
// decoders_*.go files implement envconfig.Decoder and say what they want. Process itself
// reads only the process environment and stops at the first bad value, while the gate's
// environment is injected (getenv: run and its tests hold no global state) and every bad
// value is reported, so Load hands Process one variable at a time (see decode).
//
// getenv cannot tell an empty variable from an unset one (os.Getenv cannot either):
// an empty value means the default.
//
// Every error names the variable and what it wants, on one line; all problems are
// reported at once, joined by "; ".
func Load(getenv func(string) string, names []string) (Config, error) {
	var c Config
	var p Problems
	fields := configFields()
	known := make(map[string]bool, len(fields))
	for _, f := range fields {
		known[f.key] = true
	}
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		// A Kubernetes service link (GATE_SERVICE_HOST, ... of a Service named gate) is
		// not a setting; serve logs the ones ignored (see servicelinks.go).
		up := strings.ToUpper(n)
		if strings.HasPrefix(n, envPrefix+"_") && !known[n] && known[up] {
			p.add(&unknownVarError{Name: n, Suggest: up}) // GATE_window
		} else if strings.HasPrefix(n, envPrefix+"_") && !known[n] && !isServiceLink(n, getenv(n)) {
			p.add(&unknownVarError{Name: n, Suggest: closest(n, slices.Collect(maps.Keys(known)))})
		} else if up != n && known[up] {
			// A variable of the gate's written in another case (GATE_THRESHOLD in lower
			// case, from a values file's names): not read, and was not said (a review).
			p.add(&unknownVarError{Name: n, Suggest: up})
		}
	}

	v := reflect.ValueOf(&c).Elem()
	raw := make(map[string]string, len(fields)) // values as shown in errors
	failed := make(map[string]bool)             // reported once, not again by Validate
	for _, f := range fields {
		s := strings.TrimSpace(getenv(f.key))
		if s == "" {
			s = f.def
		}
		fv := v.FieldByIndex(f.index)
		raw[f.key] = s
		if r, ok := fv.Addr().Interface().(redacter); ok {
			raw[f.key] = r.redact(s)
		}
		if s == "" {
			continue // no value and no default: the zero value
		}
		if err := decode(fv, s); err != nil {
			e := &varError{Key: f.key, Value: raw[f.key], Want: wantFor(fv, f.def), Err: err}
			switch _, ok := fv.Addr().Interface().(wanter); {
			case ok:
				e.Detail = err.Error() // our own types' errors say which part is wrong
			case errors.Is(err, strconv.ErrRange):
				e.Detail = "out of range" // a number, but past what its field holds
			case fv.Type() == durationType && rules.DurationOutOfRange(s):
				e.Detail = "out of range (a duration is at most 2562047h)" // time.ParseDuration's error says only "invalid"
			}
			p.add(e)
			failed[f.key] = true
		}
	}
	// GATE_LIMITS, when set, is every limit: its first is the primary, in place of
	// GATE_WINDOW and GATE_THRESHOLD (setting those too would leave two primaries). Only
	// the environment tells a value set from a default, so this rule is Load's.
	window := windowVar
	if len(c.Limits) > 0 {
		if strings.TrimSpace(getenv(envPrefix+"_WINDOW")) != "" || strings.TrimSpace(getenv(envPrefix+"_THRESHOLD")) != "" {
			p.add(&varError{Key: envPrefix + "_LIMITS", Value: raw[envPrefix+"_LIMITS"],
				Want: "either GATE_LIMITS or GATE_WINDOW and GATE_THRESHOLD, not both (GATE_LIMITS's first window:threshold is the primary limit)"})
			failed[envPrefix+"_LIMITS"] = true
		} else {
			c.Window, c.Threshold = c.Limits[0].Window, c.Limits[0].Threshold
			c.Limits = c.Limits[1:]
			window = limitsWindow // GATE_WINDOW is unset: a message naming it would send the operator to set it
		}
	}
	// Any other GATE_KAFKA_TLS_* variable turns TLS on (KafkaTLSOn): GATE_KAFKA_TLS=false
	// beside one would be overruled without a word, and a gate meant to dial a plain
	// listener would wait on its TLS handshakes for a metadata timeout naming no TLS.
	if !failed[envPrefix+"_KAFKA_TLS"] && !c.KafkaTLS && strings.TrimSpace(getenv(envPrefix+"_KAFKA_TLS")) != "" {
		if on := c.kafkaTLSImpliedBy(); len(on) > 0 {
			p.add(&varError{Key: envPrefix + "_KAFKA_TLS", Value: raw[envPrefix+"_KAFKA_TLS"],
				Want: "true or unset with " + strings.Join(on, ", ") + " set, which turn TLS on; or those unset, for a broker without TLS"})
			failed[envPrefix+"_KAFKA_TLS"] = true
		}
	}
	// With a rules file each rule says its own key, limits, mode, cost, threshold mode and
	// forced keys: the variables that say them for the gate without rules would be
	// ignored, so setting one is an error.
	if c.RulesFile != "" {
		if set := RulesFileConflicts(getenv); len(set) > 0 {
			p.add(&varError{Key: envPrefix + "_RULES_FILE", Value: raw[envPrefix+"_RULES_FILE"],
				Want: "a rules file with " + strings.Join(set, ", ") + " unset: each rule says its own key, limits, mode, cost, threshold mode and forced keys"})
			failed[envPrefix+"_RULES_FILE"] = true
		}
	}
	// A value that failed holds a zero, not the operator's value: it is not reported
	// again, and the rules between values wait until every value reads.
	vs := c.validate(len(failed) == 0, window)
	problem := map[string]*varError{} // each variable's problem among vs
	for _, e := range vs {
		if o, ok := e.(*varError); ok {
			problem[o.Key] = o
		}
	}
	for _, e := range vs {
		if ve, ok := e.(*varError); ok && !failed[ve.Key] && !overWrongValue(ve, failed, problem) {
			ve.Value = raw[ve.Key] // as the operator wrote it
			if ve.Detail == "" && ve.Value != "" && strings.TrimSpace(getenv(ve.Key)) == "" {
				ve.Detail = againstSet(ve, getenv, raw)
			}
			p.add(ve)
		}
	}
	if len(p) > 0 {
		return Config{}, p
	}
	return c, nil
}

// rulesReplace are the variables a rules file replaces (GATE_RULES_FILE).
var rulesReplace = []string{"KEY_FROM", "WINDOW", "THRESHOLD", "LIMITS", "LIMIT_MODE", "COST", "THRESHOLD_MODE", "OVERRIDES", "FORCE_OVERFLOW"}

// RulesFileConflicts are the variables getenv sets that a rules file replaces
// (GATE_THRESHOLD, ...): a gate with GATE_RULES_FILE refuses to start with any of them.
// RulesFileEnv reads them as unset, so that gate rules check can say them apart from
// the file's problems.
func RulesFileConflicts(getenv func(string) string) []string {
	var set []string
	for _, v := range rulesReplace {
		if strings.TrimSpace(getenv(envPrefix+"_"+v)) != "" {
			set = append(set, envPrefix+"_"+v)
		}
	}
	return set
}

// Names returns the GATE_ variable names Load checks for typos, from environ (the
// process environment, os.Environ), since getenv cannot list what it holds; a name counts
// only when getenv gives it a value. In production getenv is os.Getenv, so this is the
// process's GATE_ names (less empty ones, which set nothing); under a test's getenv, a
// stray GATE_ variable in the developer's shell is ignored, as its value is. Load's tests
// pass names directly.
func Names(environ []string, getenv func(string) string) []string {
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		// Any case: one of the gate's variables written in another is refused (Load).
		if strings.HasPrefix(strings.ToUpper(name), envPrefix+"_") && getenv(name) != "" {
			names = append(names, name)
		}
	}
	return names
}

// overWrongValue reports whether ve is a rule between its variable and another that is
// wrong itself: one that failed to read (failed: its value is a zero), or whose own
// problem (problem, by variable) names no other variable with a problem. The other is reported, and
// ve would restate its fault from the wrong side: a GATE_REDIS_MODE misspelt told the
// operator to unset GATE_REDIS_SENTINEL_MASTER ("unless GATE_REDIS_MODE=sentinel"). Two
// problems naming each other are both kept.
func overWrongValue(ve *varError, failed map[string]bool, problem map[string]*varError) bool {
	for _, name := range varsNamed(ve.Want, ve.Key) {
		if failed[name] {
			return true
		}
		if o := problem[name]; o != nil && !slices.ContainsFunc(varsNamed(o.Want, o.Key), func(n string) bool { return failed[n] || problem[n] != nil }) {
			return true
		}
	}
	return false
}

// varsNamed returns the GATE_ variables want names, but self, each once.
func varsNamed(want, self string) []string {
	var names []string
	for rest := want; ; {
		i := strings.Index(rest, envPrefix+"_")
		if i < 0 {
			return names
		}
		rest = rest[i:]
		n := strings.IndexFunc(rest, func(r rune) bool { return !(r == '_' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') })
		if n < 0 {
			n = len(rest)
		}
		if name := rest[:n]; name != self && !slices.Contains(names, name) {
			names = append(names, name)
		}
		rest = rest[n:]
	}
}

// againstSet is the detail of a rule between variables that failed on ve's, left unset:
// the value is its default, and the variables the rule names that the operator did set
// are named with their values, so that the line leads to the setting made (raising
// GATE_REVOKE_TIMEOUT alone fails on GATE_KAFKA_REBALANCE_TIMEOUT's default).
func againstSet(ve *varError, getenv func(string) string, raw map[string]string) string {
	var set []string
	for _, name := range varsNamed(ve.Want, ve.Key) {
		if v, ok := raw[name]; ok && strings.TrimSpace(getenv(name)) != "" {
			set = append(set, fmt.Sprintf("%s=%q", name, v))
		}
	}
	if len(set) == 0 {
		return "unset, its default"
	}
	return "unset, its default, against " + strings.Join(set, " and ") + " as set"
}
