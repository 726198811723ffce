package consume

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/tick"
)

// e2eRedis is the redis-server the end-to-end benches' gate syncs with, as a gate does in
// production: its tick (internal/tick's Ticker, run as internal/gate runs it) writes the
// run's counts and reads the teams due, every second, and makes its final flush when the
// gate stops. One server for a benchmark's runs, emptied before each gate run (flush);
// its CPU time is read before and after each (cpu), apart from the bench process's.
type e2eRedis struct {
	srv   *redistest.Server
	admin *redis.Client // INFO and FLUSHALL; the gate has clients of its own (startTick)
	pid   int
}

// startE2ERedis starts the server (redistest: a free loopback port; skipped without
// redis-server, failed in CI). A cpu of 0 or more binds its every thread to that CPU:
// the broker's, since a real Redis, as a real broker, runs on other machines than the
// gate's cores. It returns the server and a line saying where it runs.
func startE2ERedis(b *testing.B, cpu int) (*e2eRedis, string) {
	b.Helper()
	srv := redistest.Start(b)
	r := &e2eRedis{srv: srv, admin: srv.Client(b)}
	pid, err := strconv.Atoi(r.info(b, "server")["process_id"])
	if err != nil {
		b.Fatalf("redis-server's process_id: %v", err)
	}
	r.pid = pid
	if cpu < 0 {
		return r, fmt.Sprintf("redis-server (pid %d) not bound to a CPU", pid)
	}
	if err := pinOther(pid, cpu); err != nil {
		b.Fatalf("binding redis-server (pid %d) to CPU %d: %v", pid, cpu, err)
	}
	return r, fmt.Sprintf("redis-server (pid %d) bound to CPU %d", pid, cpu)
}

// info is one INFO section's fields.
func (r *e2eRedis) info(b *testing.B, section string) map[string]string {
	b.Helper()
	s, err := r.admin.Info(context.Background(), section).Result()
	if err != nil {
		b.Fatalf("INFO %s: %v", section, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// cpu is the server's CPU time so far, in seconds: user + system, every thread, from
// INFO cpu (the server's getrusage, to the microsecond; /proc/PID/stat counts in 10 ms
// ticks, coarse beside the few tens of milliseconds a run costs it), as internal/tick's
// benchmarks read it.
func (r *e2eRedis) cpu(b *testing.B) float64 {
	b.Helper()
	info := r.info(b, "cpu")
	var total float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(info[k], 64)
		if err != nil {
			b.Fatalf("INFO cpu %s %q: %v", k, info[k], err)
		}
		total += v
	}
	return total
}

// flush empties the server before a gate run: the runs' teams are the same, and one run's
// counts, in the same window, would be the next's.
func (r *e2eRedis) flush(b *testing.B) {
	b.Helper()
	if err := r.admin.FlushAll(context.Background()).Err(); err != nil {
		b.Fatalf("FLUSHALL: %v", err)
	}
}

// startTick starts lim's tick on r as the gate starts it (internal/gate: tick.Dial's
// clients, tick.NewMulti with the gate's defaults; cmd/gate: its own context, stopped
// after the consumer so that the final flush carries the last records' counts) and
// returns what stops it and waits for its final flush.
func (r *e2eRedis) startTick(b *testing.B, lim *limit.Limiter, reg prometheus.Registerer) (stop func()) {
	b.Helper()
	return r.startTickOf(b, []tick.Limit{{Lim: lim}}, reg)
}

// startTickOf is startTick for a tick over several limits (a rules file's).
func (r *e2eRedis) startTickOf(b *testing.B, lims []tick.Limit, reg prometheus.Registerer) (stop func()) {
	b.Helper()
	clients, err := tick.Dial([]string{r.srv.URL()}, tick.RedisOptions{})
	if err != nil {
		b.Fatal(err)
	}
	inst := make([]redis.UniversalClient, len(clients))
	for i, c := range clients {
		inst[i] = c
	}
	tk, err := tick.NewMulti(lims, inst, tick.Config{}, reg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
		for _, c := range clients {
			_ = c.Close()
		}
	}
}

// gateFigures are what a gate run's metrics on its registry say: its tick's ticks (the
// final flush among them), the Redis commands it sent and the errors it counted
// (gate_limiter_errors_total: one Redis instance, so about one a failed tick), and the
// outcome rows it wrote (gate_outcome_rows_total) and transactions it committed.
type gateFigures struct {
	ticks, commands, errors float64
	outcomeRows, txns       float64
}

func figuresOf(b *testing.B, reg *prometheus.Registry) (f gateFigures) {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "gate_limiter_tick_duration_seconds":
				f.ticks += float64(m.GetHistogram().GetSampleCount())
			case "gate_limiter_redis_commands_total":
				f.commands += m.GetCounter().GetValue()
			case "gate_limiter_errors_total":
				f.errors += m.GetCounter().GetValue()
			case "gate_outcome_rows_total":
				f.outcomeRows += m.GetCounter().GetValue()
			case "gate_transactions_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "committed" {
						f.txns += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return f
}
