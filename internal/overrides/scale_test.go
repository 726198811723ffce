package overrides

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/tick"
)

// fillHash writes n teams team-1 .. team-n, team-i's limit 1000 + i%5000, and the marker
// into key, with a Lua loop of HSETs of 1000 fields each: a million in about 1.5 s.
func fillHash(t *testing.T, c redis.UniversalClient, key string, n int) {
	t.Helper()
	// In scripts of 50,000 entries each: one script of a million took over 5 s on a
	// loaded machine, past the client's read timeout, whose retry met BUSY.
	const script = `
local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
local batch = {}
for i = from, to do
  batch[#batch + 1] = 'team-' .. i
  batch[#batch + 1] = tostring(1000 + i % 5000)
  if #batch == 2000 or i == to then
    redis.call('HSET', KEYS[1], unpack(batch))
    batch = {}
  end
end
return redis.call('HLEN', KEYS[1])`
	const chunk = 50_000
	for from := 1; from <= n; from += chunk {
		if err := c.Eval(context.Background(), script, []string{key}, from, min(from+chunk-1, n)).Err(); err != nil {
			t.Fatalf("filling %s: %v", key, err)
		}
	}
	if err := c.HSet(context.Background(), key, MarkerField, time.Now().UTC().Format(time.RFC3339)).Err(); err != nil {
		t.Fatalf("filling %s: %v", key, err)
	}
	got, err := c.HLen(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("filling %s: %v", key, err)
	}
	if got != int64(n+1) {
		t.Fatalf("filling %s: HLEN %d, want %d", key, got, n+1)
	}
}

// gateClient returns a client configured as the gate's (tick.Dial with the default
// options): a 250 ms read timeout, context deadlines honoured, no retries.
func gateClient(t *testing.T, srv *redistest.Server) redis.UniversalClient {
	t.Helper()
	cs, err := tick.Dial([]string{srv.URL()}, tick.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs[0].Close() })
	return cs[0]
}

// commandTimes returns how long each command Redis ran since the last SLOWLOG RESET held
// it (with slowlog-log-slower-than 0 and a slowlog-max-len above their number), by
// name, leaving out those the test's own set-up runs.
func commandTimes(t *testing.T, c redis.UniversalClient) map[string][]time.Duration {
	t.Helper()
	logs, err := c.SlowLogGet(context.Background(), -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]time.Duration{}
	for _, l := range logs {
		if len(l.Args) == 0 {
			continue
		}
		switch name := strings.ToLower(l.Args[0]); name {
		case "slowlog", "config", "eval":
		default:
			out[name] = append(out[name], l.Duration)
		}
	}
	return out
}

// A live set of a million teams loads through a client set up as the gate's (a 250 ms read
// timeout), in short commands. How long the whole read takes is a speed, not asserted here:
// the refresh gets minutes, as on a loaded machine (the real-Kafka suite's JVMs beside it)
// 868 HSCANs once took over DefaultTimeout. One HGETALL of it takes Redis
// about half a second to answer: it timed out at the client's read timeout, every
// minute, and held Redis all the same.
func TestRefreshLoadsAMillionEntriesInShortCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads a million entries")
	}
	const n = 1_000_000
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	fillHash(t, admin, key, n)

	lim, err := limit.New(limit.Config{Threshold: 1000}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Key: key, Timeout: 5 * time.Minute}, lim, gateClient(t, srv), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every command is logged with how long it held Redis.
	for _, cmd := range [][]any{{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, {"CONFIG", "SET", "slowlog-max-len", "100000"}, {"SLOWLOG", "RESET"}} {
		if err := admin.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	err = r.Refresh(ctx)
	took := time.Since(start)
	if err != nil {
		t.Errorf("refresh of a %d-entry hash failed after %v: %v", n, took, err)
	} else {
		t.Logf("%d entries read and applied in %v", n, took)
		if got := len(lim.Overrides()); got != n {
			t.Errorf("%d overrides applied, want %d", got, n)
		}
		for _, i := range []int{1, 4999, 5000, n} {
			team := "team-" + strconv.Itoa(i)
			if got, want := lim.Threshold(team), int64(1000+i%5000); got != want {
				t.Errorf("threshold of %s = %d, want %d", team, got, want)
			}
		}
	}
	// Short commands, by what they do, not by how long Redis says they took (that
	// counts time it spent descheduled, tens of ms on a busy 2-CPU machine): no command
	// that reads the whole hash (HGETALL, HVALS, HKEYS), and the hash read in HSCANs of
	// about ScanCount entries each. Their times are logged, for a person to read.
	times := commandTimes(t, admin)
	for name, ds := range times {
		slices.Sort(ds)
		p50, p95, top := ds[len(ds)/2], ds[len(ds)*95/100], ds[len(ds)-1]
		t.Logf("%s: %d commands, median %v, 95th percentile %v, longest %v", name, len(ds), p50, p95, top)
		switch name {
		case "hgetall", "hvals", "hkeys":
			t.Errorf("%d %s commands: the whole hash in one command", len(ds), name)
		}
	}
	if got, least := len(times["hscan"]), n/(2*ScanCount); got < least {
		t.Errorf("%d HSCAN commands for %d entries, want at least %d (about %d entries each)", got, n, least, ScanCount)
	}
}
