package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/config"
	"github.com/capturegate/gate/internal/gate"
	"github.com/capturegate/gate/internal/load"
)

// loadFlags is gate load's flag set, bound to spec, whose values are the defaults.
func loadFlags(spec *load.Spec) *flag.FlagSet {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	spec.AddFlags(fs)
	return fs
}

const loadUsage = `Usage: gate load [flags]

Produces the demo load (power-law teams, one hot team, a trickle of malformed records)
to GATE_KAFKA_BROKERS on GATE_INPUT_TOPIC.
`

// loadCmd is `gate load`: it produces the demo load (internal/load, as cmd/gate-dev
// does) to the brokers of GATE_KAFKA_BROKERS (with the GATE_KAFKA_TLS_* and
// GATE_KAFKA_SASL_* settings), on GATE_INPUT_TOPIC, and prints one line a second.
func loadCmd(ctx context.Context, args []string, getenv func(string) string, names []string, clk clock.Clock, stdout, stderr io.Writer) error {
	spec := load.DefaultSpec()
	fs := loadFlags(&spec)
	fs.SetOutput(stderr)
	fs.Usage = func() { writeUsage(fs.Output(), loadUsage, fs) } // as every command's
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := spec.Check(); err != nil {
		return &cli.UsageError{Msg: "load: " + cli.OneLine(err)}
	}
	cfg, err := config.Load(getenv, names)
	if err != nil {
		return err
	}
	log := gate.NewLogger(cfg, stderr)
	config.LogServiceLinks(log, getenv, names)
	opts, err := toolClientOpts(cfg, clk, log, "load") // TLS and SASL, as the gate connects
	if err != nil {
		return err
	}
	opts = append(opts, kgo.ProducerLinger(5*time.Millisecond))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("creating the Kafka client: %w", err)
	}
	defer cl.Close()
	log.Info("producing load", "brokers", strings.Join(cfg.KafkaBrokers, ","), "topic", cfg.InputTopic,
		"rate", spec.Rate, "teams", spec.Teams, "hot_share", spec.HotShare, "duration", spec.Duration.String())

	var counts load.Counts
	done := make(chan error, 1)
	go func() { done <- load.Produce(ctx, cl, cfg.InputTopic, spec, &counts, log) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last int64
	for {
		select {
		case err := <-done:
			p, f := counts.Produced.Load(), counts.Failed.Load()
			skipped := ""
			// Records sent and neither acknowledged nor refused when the wait for the last
			// acknowledgements ended (a broker or topic not answering): said, so that the
			// line accounts for every record the run made.
			if n := counts.Sent.Load() - p - f; n > 0 {
				skipped = fmt.Sprintf(" unanswered=%d (no acknowledgement or refusal before the wait for them ended)", n)
			}
			if n := counts.Skipped.Load(); n > 0 {
				skipped += fmt.Sprintf(" skipped=%d (behind the rate: the broker too slow for it)", n)
			}
			_, werr := fmt.Fprintf(stdout, "load: stopped; produced=%d failed=%d%s\n", p, f, skipped)
			if p == 0 {
				// No broker reached, or the topic refused every record: a failure, named so
				// even when the wait for the last acknowledgements timed out too.
				err = errors.Join(fmt.Errorf("load: no record acknowledged by GATE_KAFKA_BROKERS=%s on topic %s (%d refused): is the broker reachable and the topic there?",
					strings.Join(cfg.KafkaBrokers, ","), cfg.InputTopic, f), err)
			}
			return errors.Join(err, werr)
		case <-tick.C:
			p := counts.Produced.Load()
			if _, err := fmt.Fprintf(stdout, "load: %d records/s to %s (produced=%d failed=%d)\n", p-last, cfg.InputTopic, p, counts.Failed.Load()); err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
			last = p
		}
	}
}
