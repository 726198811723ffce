// Package cli holds what the gate's commands (cmd/gate and cmd/gate-dev) share about
// their command lines: usage errors and the exit status they give, flag parsing, and
// errors flattened to one line.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

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
