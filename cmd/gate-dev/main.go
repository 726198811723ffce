// Command gate-dev runs the whole capture gate pipeline in one process, to watch it work:
// an in-memory Kafka broker (kfake) on a fixed loopback port, a Redis (GATE_REDIS_URLS,
// else a redis-server it starts, else an embedded miniredis), two gates in one consumer
// group sharing the limit, each serving its HTTP endpoints as gate serve does (on
// 127.0.0.1:8081 and :8082 by default), a load generator and a live view (`make run`;
// gate-dev -h for its flags).
//
// It is the demo, not the production binary. The gates are built, and their endpoints
// served, as cmd/gate does (internal/config, internal/gate, internal/endpoints) and the
// load is cmd/gate's `gate load` (internal/load), but the broker, the embedded Redis and
// the terminal view live here only, so that cmd/gate links none of them (cmd/gate's
// TestProductionBinaryLinksNoDemoCode checks it).
//
// Exit status: 0 when the run ends (its -duration, or Ctrl-C / SIGTERM / SIGHUP: the load stops,
// the gates route what was produced, commit and flush); 2 for a bad flag or GATE_
// variable; 1 for any other failure. A second signal kills it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/config"
)

func main() {
	// SIGHUP too: a terminal closed (or an SSH session lost) stops the demo as Ctrl-C
	// does, its gates' final flush made, its redis-server and temporary rules file gone;
	// left to kill it, they were left behind (a review).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	// After the first signal, restore the default handling, so a second one kills a
	// shutdown that hangs instead of being swallowed.
	go func() { <-ctx.Done(); stop() }()
	err := dev(ctx, os.Args[1:], os.Getenv, config.Names(os.Environ(), os.Getenv), os.Stdout, os.Stderr, realDevDeps())
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) { // -h: the flags were printed
		msg := cli.OneLine(err)
		if !strings.HasPrefix(msg, "gate-dev") {
			msg = "gate-dev: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(cli.ExitCode(err))
	}
}
