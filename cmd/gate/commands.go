package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/buildinfo"
	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/load"
)

// command is one of gate's subcommands: what run dispatches to and gate help lists.
type command struct {
	name    string
	args    string // its arguments, after its flags, as its usage line gives them
	summary string // one line for gate help
	// flags builds its flag set, as the command itself does when it runs (nil: it takes
	// none), so that gate help lists every flag it takes.
	flags func() *flag.FlagSet
	run   func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error
}

// commands are gate's subcommands in the order gate help lists them (help aside: run
// answers it before looking a command up).
func commands() []command {
	return []command{
		{name: "serve", summary: `run the gate (the default; "run" is the same)`, run: noArgs("serve", func(ctx context.Context, h host, _, stderr io.Writer) error {
			return serve(ctx, h, stderr)
		})},
		{name: "env", summary: "print the GATE_* environment variables as a Markdown table; -check: check this environment's as the gate does at start",
			flags: func() *flag.FlagSet { return envFlags(new(bool)) },
			run:   envCmd},
		{name: "load", summary: "produce the demo load to GATE_KAFKA_BROKERS",
			flags: func() *flag.FlagSet { s := load.DefaultSpec(); return loadFlags(&s) },
			run: func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
				err := loadCmd(ctx, args, h.getenv, h.names(), h.clock, stdout, stderr)
				if errors.Is(err, flag.ErrHelp) {
					return nil // the flags were printed
				}
				return err
			}},
		{name: "overrides", args: "list | set TEAM LIMIT | delete TEAM", summary: "show or change the live per-team limits every gate reads from Redis",
			flags: func() *flag.FlagSet { return overridesFlags(new(string)) },
			run: func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
				return overridesCmd(ctx, args, h.getenv, h.names(), h.clock, stdout, stderr)
			}},
		{name: "team", args: "TEAM | -top N", summary: "ask a running gate how it sees TEAM, or its top N teams (its /v1/teams view, as a table)",
			flags: func() *flag.FlagSet { return teamFlags(new(string), new(int)) },
			run: func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
				return teamCmd(ctx, args, h.getenv, stdout, stderr)
			}},
		{name: "outcomes", args: "[TEAM]", summary: "print a team's outcomes (accepted, limited and by which rule, per interval) from GATE_OUTCOMES_TOPIC, or the most limited teams",
			flags: func() *flag.FlagSet { return outcomesFlags(new(string), new(string), new(int), new(bool)) },
			run: func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
				return brokerHint(outcomesCmd(ctx, args, h.getenv, h.names(), h.clock, stdout, stderr), h.getenv)
			}},
		{name: "replay", summary: "replay the input topic through a rules file or GATE_* limits, and report what the gate would have done",
			flags: func() *flag.FlagSet { return replayFlags(new(replayOpts)) },
			run: func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
				return brokerHint(replayCmd(ctx, args, h.getenv, h.names(), h.clock, stdout, stderr), h.getenv)
			}},
		{name: "redrive", summary: "copy dead letters back into the input topic once their cause is fixed: key, value, original timestamp and headers, the gate's left out",
			flags: func() *flag.FlagSet { return redriveFlags(new(redriveOpts)) },
			run: func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
				return brokerHint(redriveCmd(ctx, args, h.getenv, h.names(), h.clock, stdout, stderr), h.getenv)
			}},
		{name: "rules", args: "check FILE", summary: "check a rules file (GATE_RULES_FILE) and print its rules",
			run: func(_ context.Context, args []string, h host, stdout, stderr io.Writer) error {
				return rulesCmd(args, h.getenv, h.names(), stdout, stderr)
			}},
		{name: "healthcheck", summary: "exit 0 when a running gate answers 200 (for container health checks)",
			flags: func() *flag.FlagSet { return new(healthcheckOpts).flags() },
			run: func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
				return healthcheckCmd(ctx, args, h.getenv, stdout, stderr)
			}},
		{name: "version", summary: "print the version, commit, Go and franz-go versions", run: noArgs("version", func(_ context.Context, _ host, stdout, _ io.Writer) error {
			_, err := io.WriteString(stdout, buildinfo.Get().String())
			return err
		})},
	}
}

// noArgs is the run of a command (name) that takes no arguments: its settings are GATE_*
// environment variables.
func noArgs(name string, run func(ctx context.Context, h host, stdout, stderr io.Writer) error) func(context.Context, []string, host, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, h host, stdout, stderr io.Writer) error {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			_, _ = io.WriteString(stderr, helpText()) // as every command's -h: the usage, exit status 0
			return nil
		}
		if len(args) > 0 {
			_, _ = io.WriteString(stderr, helpText())
			return &cli.UsageError{Msg: fmt.Sprintf("%s takes no arguments, got %q (settings are GATE_* environment variables)", name, args)}
		}
		return run(ctx, h, stdout, stderr)
	}
}

// lookupCommand is the command called name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandNames lists the commands for an error message: "serve, env, ... or help".
func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ") + " or help"
}

const helpFooter = `  help    print this help

The gate is configured through GATE_* environment variables only; see "gate env".
The demo (in-process broker, Redis, two gates, live view) is a separate binary,
cmd/gate-dev: make run.
`

// helpText is gate help: every command, with every flag its flag set defines.
func helpText() string {
	var b strings.Builder
	b.WriteString("Usage: gate [command]\n\nCommands:\n")
	for _, c := range commands() {
		var fs *flag.FlagSet
		if c.flags != nil {
			fs = c.flags()
		}
		line := c.name
		if hasFlags(fs) {
			line += " [flags]"
		}
		if c.args != "" {
			line += " " + c.args
		}
		if len(line) < 8 {
			fmt.Fprintf(&b, "  %-8s%s\n", line, c.summary)
		} else {
			fmt.Fprintf(&b, "  %s\n          %s\n", line, c.summary)
		}
		writeFlags(&b, fs, "            ")
	}
	b.WriteString(helpFooter)
	return b.String()
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	if fs != nil {
		fs.VisitAll(func(*flag.Flag) { n++ })
	}
	return n > 0
}

// writeFlags lists fs's flags on w, one a line after indent: -name VALUE, what it does
// and its default when it has one. VALUE is the back-quoted word of its usage, else its
// type (flag.UnquoteUsage).
func writeFlags(w io.Writer, fs *flag.FlagSet, indent string) {
	if !hasFlags(fs) {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		name := "-" + f.Name
		if value != "" {
			name += " " + value
		}
		if !zeroDefault(f) {
			usage += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(tw, "%s%s\t%s\n", indent, name, usage)
	})
	_ = tw.Flush()
}

// zeroDefault reports whether f's default is its type's zero value, which help leaves
// unsaid.
func zeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", time.Duration(0).String():
		return true
	}
	return false
}

// writeUsage writes a command's usage text, then its flags.
// parseCommand parses a command's args into fs, flags anywhere among them
// (cli.ParseInterleaved), its usage and errors written to stderr: it returns the
// arguments, or done when -h printed the usage (the command then returns nil), or the
// error of a bad flag.
func parseCommand(fs *flag.FlagSet, usage string, args []string, stderr io.Writer) (rest []string, done bool, err error) {
	fs.SetOutput(stderr)
	fs.Usage = func() { writeUsage(stderr, usage, fs) }
	rest, err = cli.ParseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, true, nil
	}
	return rest, false, err
}

func writeUsage(w io.Writer, usage string, fs *flag.FlagSet) {
	_, _ = io.WriteString(w, usage)
	if hasFlags(fs) {
		_, _ = io.WriteString(w, "\nFlags:\n")
		writeFlags(w, fs, "  ")
	}
}

// brokerHint adds to a tool's err, when it is a failure to reach a broker (a dial
// refused or timed out, or a connection that took no request or gave no answer: a
// broker that accepts and stays silent), where the brokers' addresses came from:
// GATE_KAFKA_BROKERS, or its default when unset. A review ran gate replay without it and
// read only "dial tcp 127.0.0.1:9092: connect: connection refused", naming neither.
func brokerHint(err error, getenv func(string) string) error {
	var op *net.OpError
	if err == nil || !errors.As(err, &op) || op.Op != "dial" && op.Op != "read" && op.Op != "write" {
		return err
	}
	if v := strings.TrimSpace(getenv("GATE_KAFKA_BROKERS")); v != "" {
		return fmt.Errorf("%w (the brokers are GATE_KAFKA_BROKERS's: %s)", err, v)
	}
	return fmt.Errorf("%w (GATE_KAFKA_BROKERS is unset: the brokers are its default; set it to the cluster's)", err)
}

// toolClientOpts are the Kafka client options of a tool that connects as the gate does
// (GATE_KAFKA_BROKERS, TLS and SASL), under the client id GATE_KAFKA_CLIENT_ID-tool.
func toolClientOpts(cfg config.Config, clk clock.Clock, log *slog.Logger, tool string) ([]kgo.Opt, error) {
	ccfg, err := cfg.ConsumeConfig(config.Reload{Clock: clk, Log: log.With("component", "tls")})
	if err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}, ccfg.ClientOpts...)
	return append(opts, kgo.ClientID(cfg.KafkaClientID+"-"+tool)), nil
}

const envUsage = `Usage: gate env [-check]

Prints every GATE_* environment variable the gate reads, its default and what it does, as
a Markdown table (docs/configuration.md's). With -check, loads the GATE_* variables set
here as the gate does at start and prints ok and how many are set, or every problem, one
a line (exit status 2). The files the variables name are not read (a pipeline checks a
pod's environment where they are not mounted): check a rules file with gate rules check.
`

func envFlags(check *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	fs.BoolVar(check, "check", false, "load the GATE_* variables set here as the gate does at start: every problem, one a line (exit status 2), or how many are set")
	return fs
}

// envCmd runs `gate env [-check]`. -check is what a deploy pipeline runs on a pod's
// rendered environment (the chart's tests do, on each of its value sets): a gate given it
// would start, or every variable it would refuse, the files it names (GATE_RULES_FILE)
// left to their own checks.
func envCmd(_ context.Context, args []string, h host, stdout, stderr io.Writer) error {
	var check bool
	fs := envFlags(&check)
	args, done, err := parseCommand(fs, envUsage, args, stderr)
	if done || err != nil {
		return err
	}
	if len(args) > 0 {
		return &cli.UsageError{Msg: fmt.Sprintf("env takes no arguments, got %q (settings are GATE_* environment variables)", args)}
	}
	if !check {
		return config.WriteEnvTable(stdout)
	}
	names := h.names()
	cfg, err := config.Load(h.getenv, names)
	if err != nil {
		var ps config.Problems
		if !errors.As(err, &ps) {
			return err
		}
		// One problem a line, as its help and docs/configuration.md say (main prints an
		// error on one line, which serve's log wants): the error counts them after.
		for _, p := range ps {
			if _, err := fmt.Fprintln(stderr, cli.OneLine(p)); err != nil {
				return err
			}
		}
		return config.Problems{&printedProblems{path: "the GATE_* environment", n: len(ps), err: err}}
	}
	// Counted as the gate reads them: a value of spaces only is unset, and a Kubernetes
	// service link is ignored, not a setting.
	links := config.ServiceLinks(h.getenv, names)
	set := 0
	for _, n := range names {
		if strings.TrimSpace(h.getenv(n)) != "" && !slices.Contains(links, n) {
			set++
		}
	}
	noun := "variables"
	if set == 1 {
		noun = "variable"
	}
	line := fmt.Sprintf("ok: %d GATE_* %s set, the rest at their defaults", set, noun)
	if len(links) > 0 {
		line += fmt.Sprintf(" (%d ignored as Kubernetes service links: %s)", len(links), strings.Join(links, ", "))
	}
	if f := cfg.RulesFile; f != "" {
		// The file is not read here (a pipeline checks a pod's environment where it is
		// not mounted), and "ok" alone read as if it had been: a missing or bad file
		// passed, and the gate then refused to start.
		line += fmt.Sprintf("; the rules file %s (GATE_RULES_FILE) is not read here: gate rules check %s checks it", cli.Shown(f), cli.Shown(f))
	}
	_, err = fmt.Fprintln(stdout, line)
	return err
}
