package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/durtext"
)

const healthcheckUsage = `Usage: gate healthcheck [-addr HOST:PORT] [-path /readyz] [-timeout 2s]

Asks a running gate (its GATE_HTTP_ADDR; -addr overrides) for -path and exits 0 when it
answers 200, 1 otherwise, printing the answer. For container health checks: the image has
no shell and no curl (docker-compose.yml uses it).
`

// healthcheckOpts are gate healthcheck's flags.
type healthcheckOpts struct {
	addr, path string
	timeout    time.Duration
}

// flags is gate healthcheck's flag set, bound to o.
func (o *healthcheckOpts) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "", "the `HOST:PORT` of the gate's HTTP server (default: from GATE_HTTP_ADDR, else 127.0.0.1:8080)")
	fs.StringVar(&o.path, "path", "/readyz", "the `PATH` to ask: /readyz (ready to route) or /healthz (alive)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Second, "how long to wait for the answer")
	return fs
}

// healthcheckCmd runs `gate healthcheck`.
func healthcheckCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var o healthcheckOpts
	fs := o.flags()
	fs.SetOutput(stderr)
	fs.Usage = func() { writeUsage(stderr, healthcheckUsage, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &cli.UsageError{Msg: "healthcheck: " + err.Error()}
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return &cli.UsageError{Msg: fmt.Sprintf("healthcheck: takes no arguments, got %q", fs.Args())}
	}
	if !strings.HasPrefix(o.path, "/") {
		return &cli.UsageError{Msg: fmt.Sprintf("healthcheck: path %q must start with /", o.path)}
	}
	if o.timeout <= 0 {
		return &cli.UsageError{Msg: fmt.Sprintf("healthcheck: -timeout %s: want a positive duration, such as 2s", durtext.String(o.timeout))}
	}
	base, err := gateURL("healthcheck", o.addr, fs, getenv)
	if err != nil {
		return err
	}
	u := base + o.path
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := directClient().Do(req) // never through HTTP_PROXY
	// The deadline alone reads "context deadline exceeded": say it is -timeout's (the
	// caller's context still live), as gate team does, and how long it waited.
	if errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil {
		return fmt.Errorf("healthcheck: no answer from %s within %s (-timeout): %w", u, durtext.String(o.timeout), err)
	}
	if err != nil {
		return fmt.Errorf("healthcheck: asking %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s: %s", u, resp.Status, oneLineBody(body))
	}
	_, err = fmt.Fprintf(stdout, "%s: %s\n", u, oneLineBody(body))
	return err
}

// oneLineBody is an answer's body for one line: JSON (the team API's answers, indented)
// compacted, whose newlines the error line made "; " ({;   "error": ...; }), other text
// trimmed.
func oneLineBody(body []byte) string {
	var b bytes.Buffer
	if json.Valid(body) && json.Compact(&b, body) == nil {
		return b.String()
	}
	return strings.TrimSpace(string(body))
}
