package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/cli"
	"github.com/capturegate/gate/internal/clock"
)

// gate load produces the load to a real (kfake) broker from GATE_KAFKA_BROKERS.
func TestLoadCommand(t *testing.T) {
	t.Parallel()
	_, env := kafkaEnv(t)
	var stdout bytes.Buffer
	stderr := &syncBuffer{}
	err := loadCmd(t.Context(), []string{"-duration", "1500ms", "-rate", "400"}, getenvFrom(env), nil, clock.Real{}, &stdout, stderr)
	if err != nil {
		t.Fatalf("gate load: %v\n%s", err, stderr)
	}
	m := regexp.MustCompile(`load: stopped; produced=(\d+) failed=0`).FindStringSubmatch(stdout.String())
	if m == nil || m[1] == "0" {
		t.Fatalf("output:\n%s", stdout.String())
	}
	want, _ := strconv.Atoi(m[1])
	cl, err := kgo.NewClient(kgo.SeedBrokers(env["GATE_KAFKA_BROKERS"]), kgo.ConsumeTopics("events"),
		kgo.FetchMaxWait(50*time.Millisecond), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for got < want && ctx.Err() == nil {
		got += cl.PollFetches(ctx).NumRecords()
	}
	if got != want {
		t.Errorf("events holds %d records, gate load says it produced %d", got, want)
	}
}

func TestLoadFlags(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := loadCmd(t.Context(), []string{"-hot-share", "1"}, getenvFrom(nil), nil, clock.Real{}, &stdout, &stderr)
	var ue *cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "-hot-share 1") {
		t.Errorf("err = %v, want a usage error about -hot-share", err)
	}
}

// gate load that gets no record acknowledged (no broker at GATE_KAFKA_BROKERS, or no
// GATE_INPUT_TOPIC there) has failed: exit status 1 and a message that says so, not a
// silent "produced=0" and exit 0 after its -duration.
func TestLoadNothingProducedFails(t *testing.T) {
	t.Parallel()
	_, kenv := kafkaEnv(t)
	for name, env := range map[string]map[string]string{
		"no broker": {"GATE_KAFKA_BROKERS": closedPort(t)},
		"no topic":  {"GATE_KAFKA_BROKERS": kenv["GATE_KAFKA_BROKERS"], "GATE_INPUT_TOPIC": "no_such_topic"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stdout bytes.Buffer
			stderr := &syncBuffer{}
			err := loadCmd(t.Context(), []string{"-duration", "1500ms", "-rate", "400"}, getenvFrom(env), nil, clock.Real{}, &stdout, stderr)
			if err == nil || cli.ExitCode(err) != 1 || !strings.Contains(err.Error(), env["GATE_KAFKA_BROKERS"]) {
				t.Errorf("gate load: err %v (exit %d); want a failure naming the brokers\nstdout:\n%s", err, cli.ExitCode(err), stdout.String())
			} else if !strings.HasPrefix(err.Error(), "load: ") {
				t.Errorf("gate load: err %q; want it to start \"load: \", as main prints it after \"gate: \"", err)
			}
			// The last line accounts for every record of the run (1.5 s at 400/s: 600):
			// acknowledged, refused, unanswered when the wait ended, or skipped.
			i := strings.LastIndex(stdout.String(), "load: stopped;")
			if i < 0 {
				t.Fatalf("no last line:\n%s", stdout.String())
			}
			last, _, _ := strings.Cut(stdout.String()[i:], "\n")
			sum := 0
			for _, m := range regexp.MustCompile(`\b(?:produced|failed|unanswered|skipped)=(\d+)`).FindAllStringSubmatch(last, -1) {
				n, _ := strconv.Atoi(m[1])
				sum += n
			}
			if sum != 600 {
				t.Errorf("the last line accounts for %d records, want the run's 600: %q", sum, last)
			}
		})
	}
}

// A slow load over a short run still produces: -rate 1 -duration 1s sends its one record
// at the start, and gate load succeeds, instead of sending none and failing with "no
// record acknowledged ... is the broker reachable".
func TestLoadSlowRateShortRun(t *testing.T) {
	t.Parallel()
	_, env := kafkaEnv(t)
	var stdout bytes.Buffer
	stderr := &syncBuffer{}
	err := loadCmd(t.Context(), []string{"-duration", "1s", "-rate", "1"}, getenvFrom(env), nil, clock.Real{}, &stdout, stderr)
	if err != nil || !strings.Contains(stdout.String(), "load: stopped; produced=1 failed=0") {
		t.Errorf("gate load -rate 1 -duration 1s: err %v (exit %d)\nstdout:\n%s", err, cli.ExitCode(err), stdout.String())
	}
}
