// Package cli holds what the gate's commands (cmd/gate and cmd/gate-dev) share about
// their command lines: usage errors and the exit status they give, flag parsing, and
// errors flattened to one line.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/capturegate/gate/internal/config"
)

// UsageError is a command-line mistake: exit status 2, as flag parsing does.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ExitCode is 2 for a usage or configuration error (the operator must change how the
// command is started), 1 for anything else.
func ExitCode(err error) int {
	var ue *UsageError
	var cfgErr config.Problems
	if errors.As(err, &ue) || errors.As(err, &cfgErr) {
		return 2
	}
	return 1
}

// OneLine flattens an error that spans lines (errors.Join does), because start-up errors
// are read as log lines.
func OneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// Set reports whether the flag name was set on the command line of fs (parsed), as
// opposed to left at its default.
func Set(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Shown is s as a command prints it in a table or a line: as it is when it is plain
// printable text, else quoted (Go syntax). A team or key is whatever bytes an event
// carried: a raw 0xff is text/tabwriter's escape character (it would swallow the rest of
// a table), a tab or a newline would break the columns, and an escape sequence would
// reach the terminal. One that starts with '"' is quoted too: as it is, it would read as
// the quoted form of another (and docs/operations.md's copy of the overrides leaves out
// what is shown quoted). So is one that starts or ends with a space: as it is, "t1 "
// reads as t1 (gate overrides set 't1 ' 5 printed "set t1  = 5", a review).
func Shown(s string) string {
	if utf8.ValidString(s) && !strings.HasPrefix(s, `"`) && strings.TrimSpace(s) == s && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

// ShownList is a list of values as a line shows it: joined with ',', each Shown, and
// quoted besides when it holds a ',', '[' or ']'. Joined as they are, a match list
// ['a,b', c] read [a,b,c], three values where the rule has two.
func ShownList(vs []string) string {
	shown := make([]string, len(vs))
	for i, v := range vs {
		if shown[i] = Shown(v); shown[i] == v && strings.ContainsAny(v, ",[]") {
			shown[i] = strconv.Quote(v)
		}
	}
	return strings.Join(shown, ",")
}

// ParseFlags parses args into fs: -h prints the flags and returns flag.ErrHelp, which the
// commands turn into a clean exit; a bad flag or an argument left over is a usage error.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return flag.ErrHelp
	case err != nil:
		return &UsageError{Msg: fs.Name() + ": " + err.Error()}
	case fs.NArg() > 0:
		return &UsageError{Msg: fmt.Sprintf("%s takes flags only, got %q", fs.Name(), fs.Args())}
	}
	return nil
}

// ParseInterleaved parses args into fs with the flags allowed anywhere among the
// arguments, before, between and after them (gate overrides set -rule R TEAM LIMIT as
// well as gate overrides -rule R set TEAM LIMIT), and returns the arguments that are not
// flags, in order. "--" ends the flags: what follows it is arguments, a TEAM that starts
// with '-' included; a lone "-" is an argument, and so is a negative number that names no
// flag (gate overrides set TEAM -5: the command's check of LIMIT then says what is
// wrong). Errors are as ParseFlags's: -h returns flag.ErrHelp, a bad flag a usage error.
func ParseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' || isNegativeNumber(fs, a) {
			rest = append(rest, a)
			continue
		}
		// One flag at a time, with its value when it takes the next argument: fs.Parse
		// alone stops at the first argument that is not a flag.
		one := args[i : i+1]
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			one = args[i : i+2]
			i++
		}
		if err := fs.Parse(one); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flag.ErrHelp
			}
			return nil, &UsageError{Msg: fs.Name() + ": " + err.Error()}
		}
	}
	return rest, nil
}

// isNegativeNumber reports whether a is a negative number, such as -5 or -1.5, that is
// not the name of one of fs's flags.
func isNegativeNumber(fs *flag.FlagSet, a string) bool {
	if len(a) < 2 || a[0] != '-' || (a[1] < '0' || a[1] > '9') && a[1] != '.' {
		return false // not -Inf or -NaN, which ParseFloat takes
	}
	if _, err := strconv.ParseFloat(a, 64); err != nil {
		return false
	}
	return fs.Lookup(strings.TrimPrefix(a, "-")) == nil
}

// isBoolFlag reports whether f takes no value (-v rather than -v true), as flag decides.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
