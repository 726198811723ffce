package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/cli"
)

// gate outcomes TEAM prints one team's history: -top, which counts the teams listed
// without TEAM, cannot apply, and is refused (as gate team refuses -top with a TEAM)
// rather than ignored.
func TestOutcomesTopWithTeamRefused(t *testing.T) {
	t.Parallel()
	_, env := outcomesTopicEnv(t, 1)
	for _, args := range [][]string{{"-top", "5", "42"}, {"42", "-top", "5"}} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"outcomes"}, args...), testHost(env), &stdout, &stderr)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "-top") || stdout.Len() != 0 {
			t.Errorf("gate outcomes %q: %v, stdout %q; want a usage error naming -top, nothing on stdout", args, err, stdout.String())
		}
	}
}

// gate env -check prints every problem one a line, as its help and
// docs/configuration.md say, not all of them on the one line main prints an error on.
func TestEnvCheckOneProblemALine(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	bad := map[string]string{"GATE_WINDOW": "soon", "GATE_LIMIT_MODE": "maybe", "GATE_FOO": "1"}
	err := run(t.Context(), []string{"env", "-check"}, testHost(bad), &stdout, &stderr)
	if cli.ExitCode(err) != 2 || stdout.Len() != 0 {
		t.Fatalf("env -check: %v (exit %d), stdout %q; want exit status 2, nothing on stdout", err, cli.ExitCode(err), stdout.String())
	}
	// What the operator sees: stderr, then main's last line.
	out := stderr.String() + "gate: " + cli.OneLine(err) + "\n"
	for _, name := range []string{"GATE_WINDOW", "GATE_LIMIT_MODE", "GATE_FOO"} {
		n := 0
		for line := range strings.SplitSeq(out, "\n") {
			if strings.Contains(line, name) {
				n++
				if strings.Contains(strings.ReplaceAll(line, name, ""), "GATE_WINDOW=") || strings.Count(line, "GATE_") > 2 {
					t.Errorf("line %q holds more than the problem of %s", line, name)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s is named on %d lines, want 1:\n%s", name, n, out)
		}
	}
}

// gate rules -h prints the usage and exits 0, as every other command's -h does.
func TestRulesHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"check", "-h"}} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"rules"}, args...), testHost(nil), &stdout, &stderr)
		if err != nil || !strings.Contains(stderr.String(), "Usage: gate rules check FILE") {
			t.Errorf("gate rules %q: %v, stderr %q; want the usage and exit status 0", args, err, stderr.String())
		}
	}
}

// When Redis accepts the connection and never answers, gate overrides fails within its
// timeout with an error naming the Redis instance it tried, not a bare "i/o timeout".
func TestOverridesUnansweredRedisNamed(t *testing.T) {
	t.Parallel()
	ln := silentListener(t)
	url := "redis://" + ln.Addr().String() + "/0"
	env := map[string]string{"GATE_REDIS_URLS": url, "GATE_REDIS_READ_TIMEOUT": "200ms", "GATE_REDIS_WRITE_TIMEOUT": "200ms"}
	for _, args := range [][]string{{"set", "7", "10"}, {"delete", "7"}, {"list"}} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append([]string{"overrides"}, args...), testHost(env), &stdout, &stderr)
		if err == nil || cli.ExitCode(err) != 1 || !strings.Contains(err.Error(), ln.Addr().String()) {
			t.Errorf("gate overrides %q against a Redis that never answers: %v; want exit status 1 and an error naming %s", args, err, url)
		}
	}
}

// gate overrides set TEAM -5 says the limit is wrong, not that -5 is an unknown flag.
func TestOverridesNegativeLimitSaysLimit(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"overrides", "set", "7", "-5"}, testHost(nil), &stdout, &stderr)
	if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), `limit "-5"`) {
		t.Errorf("gate overrides set 7 -5: %v; want a usage error about the limit -5", err)
	}
}

// gate replay -html FILE where FILE cannot be written fails before it reads anything
// (here: before it dials a broker that is not there), not after an hours-long replay
// whose report it then loses.
func TestReplayHTMLUnwritableFailsFirst(t *testing.T) {
	t.Parallel()
	html := filepath.Join(t.TempDir(), "no-such-dir", "report.html")
	env := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1"}
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"replay", "-from", "1h", "-html", html}, testHost(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), html) || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("gate replay -html %s: %v; want an error naming the page file, before any broker is dialled", html, err)
	}
}

// gate replay -html DIR, an existing directory (or a name ending in '/'), fails before
// it reads anything too: the page's temporary file was made beside it, so the replay ran
// and only the last rename failed, the text report never printed.
func TestReplayHTMLDirectoryFailsFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1"}
	for _, html := range []string{dir, dir + "/"} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := run(ctx, []string{"replay", "-from", "1h", "-html", html}, testHost(env), &stdout, &stderr)
		cancel()
		if err == nil || !strings.Contains(err.Error(), html) || strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("gate replay -html %s: %v; want an error naming the page file, before any broker is dialled", html, err)
		}
	}
}

// gate outcomes "" (a script's unset $TEAM) is refused, not read as every row of one
// team and then reported as "no team limited" while teams were.
func TestOutcomesEmptyTeamRefused(t *testing.T) {
	t.Parallel()
	c, env := outcomesTopicEnv(t, 1)
	at := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	produceRows(t, c, testRow(at, "42", "42", "", "overflow", "rate_limited", 30))
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"outcomes", ""}, testHost(env), &stdout, &stderr)
	var ue *cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "TEAM") || stdout.Len() != 0 {
		t.Errorf(`gate outcomes "": %v, stdout %q; want a usage error naming TEAM, nothing on stdout`, err, stdout.String())
	}
}

// gate team and gate healthcheck read the gate's address from GATE_HTTP_ADDR: a bad one
// stops them with a line naming the variable (exit status 2), as the gate's own check
// does; a bad -addr, or one given empty, names -addr.
func TestGateAddrErrorNamesItsSource(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"team", "42"}, map[string]string{"GATE_HTTP_ADDR": "bad"}, `GATE_HTTP_ADDR="bad"`},
		{[]string{"team", "-top", "5"}, map[string]string{"GATE_HTTP_ADDR": "bad"}, `GATE_HTTP_ADDR="bad"`},
		{[]string{"healthcheck"}, map[string]string{"GATE_HTTP_ADDR": "bad"}, `GATE_HTTP_ADDR="bad"`},
		{[]string{"team", "-addr", "nope", "42"}, map[string]string{"GATE_HTTP_ADDR": "127.0.0.1:1"}, `-addr "nope"`},
		{[]string{"healthcheck", "-addr", "nope"}, nil, `-addr "nope"`},
		// Given empty (a script's variable unset), -addr was taken as not given: the
		// command asked GATE_HTTP_ADDR's gate, or 127.0.0.1:8080, without a word.
		{[]string{"team", "-addr", "", "42"}, map[string]string{"GATE_HTTP_ADDR": "127.0.0.1:1"}, `-addr is empty`},
		{[]string{"team", "-addr=", "-top", "5"}, nil, `-addr is empty`},
		{[]string{"healthcheck", "-addr", ""}, map[string]string{"GATE_HTTP_ADDR": "127.0.0.1:1"}, `-addr is empty`},
		// Port 0 has the gate choose a free one at start: asked at 127.0.0.1:0, the
		// commands said "connection refused", as if no gate ran.
		{[]string{"healthcheck"}, map[string]string{"GATE_HTTP_ADDR": "127.0.0.1:0"}, `GATE_HTTP_ADDR="127.0.0.1:0": port 0`},
		{[]string{"team", "42"}, map[string]string{"GATE_HTTP_ADDR": ":0"}, `GATE_HTTP_ADDR=":0": port 0`},
		{[]string{"healthcheck", "-addr", "127.0.0.1:0"}, nil, `-addr "127.0.0.1:0": port 0`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), tt.args, testHost(tt.env), &stdout, &stderr)
		if cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("gate %q with %v: %v; want exit status 2 and one line naming %s", tt.args, tt.env, err, tt.want)
		}
	}
}

// gate replay -clock event with learned thresholds (GATE_THRESHOLD_MODE=adaptive, or a
// rule of threshold_mode: adaptive, in -rules or -against) is a usage error saying why:
// they are kept on the wall clock only. It was an internal error for the GATE_* limits
// (exit status 1), and blamed GATE_CLOCK=event, never set, for a rules file.
func TestReplayClockEventRefusesLearnedThresholds(t *testing.T) {
	t.Parallel()
	adaptive := filepath.Join(t.TempDir(), "adaptive.yaml")
	if err := os.WriteFile(adaptive, []byte("rules:\n  - name: team\n    key: json:team_id\n    limits: [1m:100]\n    threshold_mode: adaptive\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A drop rule reads only with GATE_OUTCOMES_TOPIC set, which replay sets for its
	// rules (it records every fate): unset here, as in an on-call engineer's shell.
	dropping := filepath.Join(t.TempDir(), "dropping.yaml")
	if err := os.WriteFile(dropping, []byte("rules:\n  - name: team\n    key: json:team_id\n    limits: [1m:100]\n    threshold_mode: adaptive\n    action: drop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	static := filepath.Join(t.TempDir(), "static.yaml")
	if err := os.WriteFile(static, []byte("rules:\n  - name: team\n    key: json:team_id\n    limits: [1m:100]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"GATE_* limits", map[string]string{"GATE_THRESHOLD_MODE": "adaptive"}, nil, "GATE_THRESHOLD_MODE=adaptive"},
		{"-rules", nil, []string{"-rules", adaptive}, "rule team of " + adaptive},
		{"-against", nil, []string{"-rules", static, "-against", adaptive}, "rule team of " + adaptive},
		{"-against current", map[string]string{"GATE_RULES_FILE": adaptive}, []string{"-rules", static, "-against", "current"}, "rule team of " + adaptive},
		{"a drop rule", nil, []string{"-rules", dropping}, "rule team of " + dropping},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1"}
			maps.Copy(env, c.env)
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := run(ctx, append([]string{"replay", "-clock", "event", "-from", "1h"}, c.args...), testHost(env), &stdout, &stderr)
			var ue *cli.UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "wall clock only") {
				t.Errorf("gate replay -clock event %v: %v; want a usage error naming %q and the wall clock", c.args, err, c.want)
			}
		})
	}
	// The same sets replay on the event clock when none of them learns.
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"replay", "-clock", "event", "-from", "1h", "-rules", static}, testHost(map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1"}), &stdout, &stderr)
	if err == nil || strings.Contains(err.Error(), "wall clock only") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("gate replay -clock event -rules %s: %v; want it to reach the broker (and fail to dial it)", static, err)
	}
}

// gate replay -clock event reads a rules file as the gate in its environment would:
// a rule's track: above_floor and max_keys (kept in a sketch on the wall clock only) are
// refused under GATE_CLOCK=event, which the gate refuses them under, and not for the
// flag, as replay counts every key exactly on either clock. The flag's clock was read
// as GATE_CLOCK: the file was refused naming a variable nobody had set.
func TestReplayClockEventReadsTheFileAsTheGate(t *testing.T) {
	t.Parallel()
	tracked := filepath.Join(t.TempDir(), "tracked.yaml")
	if err := os.WriteFile(tracked, []byte("rules:\n  - name: team-user\n    key: json:team_id+distinct_id\n    limits: [1m:100]\n    track: above_floor\n    max_keys: 500\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	replayed := func(env map[string]string, args ...string) error {
		e := map[string]string{"GATE_KAFKA_BROKERS": "127.0.0.1:1"}
		maps.Copy(e, env)
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return run(ctx, append([]string{"replay", "-from", "1h", "-rules", tracked}, args...), testHost(e), &stdout, &stderr)
	}
	if err := replayed(nil, "-clock", "event"); err == nil || strings.Contains(err.Error(), "GATE_CLOCK") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("gate replay -clock event -rules %s: %v; want it to reach the broker (and fail to dial it)", tracked, err)
	}
	err := replayed(map[string]string{"GATE_CLOCK": "event"})
	if err == nil || !strings.Contains(err.Error(), "GATE_CLOCK=event") || !strings.Contains(err.Error(), ".track") {
		t.Errorf("gate replay -rules %s under GATE_CLOCK=event: %v; want the file refused as the gate refuses it, naming track and GATE_CLOCK=event", tracked, err)
	}
}

// saysItWaitsForSilentBrokers runs gate with args (more variables in env) against a broker
// that takes connections and never answers, and waits up to a minute for its line that it
// waits for the brokers, naming them; stop ends the run and returns its error (failing t
// past a minute). gate replay, redrive and outcomes say so after brokerWait: each was silent
// for as long as the client's retries took (some 40 s) before (reviews).
func saysItWaitsForSilentBrokers(t *testing.T, env map[string]string, args ...string) (stop func() error, stderr *syncBuffer) {
	t.Helper()
	ln := silentListener(t)
	e := map[string]string{"GATE_KAFKA_BROKERS": ln.Addr().String()}
	maps.Copy(e, env)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	stderr = &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, testHost(e), io.Discard, stderr) }()
	cmd := strings.Join(args, " ")
	want := "gate " + args[0] + ": no answer yet from the brokers (" + ln.Addr().String() + "); waiting, Ctrl-C stops"
	for deadline := time.Now().Add(time.Minute); !strings.Contains(stderr.String(), want); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("gate %s ended before saying it waits: %v\n%s", cmd, err, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate %s said nothing of the silent brokers in a minute:\n%s", cmd, stderr)
		}
	}
	return func() error {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("gate %s did not stop within a minute of its context ending", cmd)
			return nil
		}
	}, stderr
}

// silentListener is a loopback listener that takes every connection and never reads nor
// answers (a server hung, or a port forwarded to nothing), closed with its connections
// when t ends.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln
}
