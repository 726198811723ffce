package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"

	"github.com/capturegate/gate/internal/config"
)

func TestOneLine(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("building the limiter: %w", errors.Join(errors.New("a"), errors.New("b")))
	if got := OneLine(err); got != "building the limiter: a; b" {
		t.Errorf("OneLine = %q", got)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	_, cfgErr := config.Load(func(string) string { return "" }, []string{"GATE_TRESHOLD"})
	for _, tt := range []struct {
		err  error
		want int
	}{
		{&UsageError{Msg: "bad flag"}, 2},
		{fmt.Errorf("gate dev: %w", &UsageError{Msg: "bad flag"}), 2},
		{cfgErr, 2},
		{errors.New("Kafka consumer stopped"), 1},
	} {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	fs := func() *flag.FlagSet {
		fs := flag.NewFlagSet("gate load", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Int("rate", 1, "")
		return fs
	}
	if err := ParseFlags(fs(), []string{"-rate", "2"}); err != nil {
		t.Errorf("good flags: %v", err)
	}
	if err := ParseFlags(fs(), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	var ue *UsageError
	if err := ParseFlags(fs(), []string{"-bogus"}); !errors.As(err, &ue) || err.Error() != "gate load: flag provided but not defined: -bogus" {
		t.Errorf("-bogus: %v", err)
	}
	if err := ParseFlags(fs(), []string{"extra"}); !errors.As(err, &ue) || err.Error() != `gate load takes flags only, got ["extra"]` {
		t.Errorf("extra: %v", err)
	}
}

// Flags are taken anywhere among the arguments; "--" ends them.
func TestParseInterleaved(t *testing.T) {
	t.Parallel()
	type got struct {
		Rule    string
		Verbose bool
		Rest    []string
		Err     string
	}
	parse := func(args ...string) got {
		fs := flag.NewFlagSet("overrides", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		rule := fs.String("rule", "", "")
		v := fs.Bool("v", false, "")
		rest, err := ParseInterleaved(fs, args)
		g := got{Rule: *rule, Verbose: *v, Rest: rest}
		var ue *UsageError
		switch {
		case errors.Is(err, flag.ErrHelp):
			g.Err = "help"
		case errors.As(err, &ue):
			g.Err = "usage: " + err.Error()
		case err != nil:
			g.Err = "other: " + err.Error()
		}
		return g
	}
	for _, tt := range []struct {
		args []string
		want got
	}{
		{[]string{"-rule", "r", "set", "a", "5"}, got{Rule: "r", Rest: []string{"set", "a", "5"}}},
		{[]string{"set", "-rule", "r", "a", "5"}, got{Rule: "r", Rest: []string{"set", "a", "5"}}},
		{[]string{"set", "a", "5", "--rule=r"}, got{Rule: "r", Rest: []string{"set", "a", "5"}}},
		{[]string{"set", "-v", "a", "-rule", "r"}, got{Rule: "r", Verbose: true, Rest: []string{"set", "a"}}},
		{[]string{"set", "-v=false", "a"}, got{Rest: []string{"set", "a"}}},
		{[]string{"set", "--", "-a", "-rule", "5"}, got{Rest: []string{"set", "-a", "-rule", "5"}}},
		{[]string{"-rule", "--", "x", "-"}, got{Rule: "--", Rest: []string{"x", "-"}}}, // a value, not the end of the flags
		{nil, got{}},
		// A negative number is an argument (a LIMIT, a TEAM), no flag being named by one:
		// its own check then says what is wrong with it.
		{[]string{"set", "a", "-5"}, got{Rest: []string{"set", "a", "-5"}}},
		{[]string{"set", "-1.5", "-v", "5"}, got{Verbose: true, Rest: []string{"set", "-1.5", "5"}}},
		{[]string{"list", "-h"}, got{Err: "help"}},
		{[]string{"list", "-bogus"}, got{Err: "usage: overrides: flag provided but not defined: -bogus"}},
		{[]string{"set", "-rule"}, got{Err: "usage: overrides: flag needs an argument: -rule"}},
	} {
		if g := parse(tt.args...); fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", tt.want) {
			t.Errorf("%q: got %+v, want %+v", tt.args, g, tt.want)
		}
	}
}

// Shown leaves plain text as it is, spaces and non-ASCII letters included, and quotes
// anything a terminal or a table would not show as written.
func TestShown(t *testing.T) {
	for in, want := range map[string]string{
		"team-42":           "team-42",
		"phc_x:user%3A1":    "phc_x:user%3A1",
		"Zürich team":       "Zürich team",
		"":                  "",
		"a\xffb":            `"a\xffb"`,
		"tab\there":         `"tab\there"`,
		"new\nline":         `"new\nline"`,
		"t\x1b]0;pwned\x07": `"t\x1b]0;pwned\a"`,
		// A key that starts with '"' (a double-encoded JSON string) is quoted too: shown as
		// it is, it would read as the quoted form of another key.
		`"x\ny"`: `"\"x\\ny\""`,
		`"acme"`: `"\"acme\""`,
		// One that starts or ends with a space: as it is, "t1 " reads as t1.
		"t1 ": `"t1 "`,
		" t1": `" t1"`,
	} {
		if got := Shown(in); got != want {
			t.Errorf("Shown(%q) = %s, want %s", in, got, want)
		}
	}
}
