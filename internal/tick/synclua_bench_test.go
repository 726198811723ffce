package tick

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/redistest"
)

// slidingLogLua is the sliding-log limiter of the seed (../shared/seeds/001_…): drop the
// entries older than the window, count the rest, add this one if under the limit, expire
// the set after a window. The member carries a sequence number so that two checks in the
// same millisecond are two entries. Returns the remaining allowance before this check
// (> 0: admitted).
const slidingLogLua = `
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local n = redis.call('ZCARD', key)
if n < limit then
  redis.call('ZADD', key, now, ARGV[4])
end
redis.call('PEXPIRE', key, window)
return limit - n
`

// BenchmarkSyncLua is the synchronous alternative to the gate's check: one EVALSHA of the
// sliding-log script per record, Zipf over 100k teams (the same spread as
// limit.BenchmarkCheck), serial on one connection to a real redis-server on loopback —
// what a per-record synchronous call costs. Reports checks/s; compare it with the
// check's serial ns/op from the same run.
func BenchmarkSyncLua(b *testing.B) {
	const (
		teams  = 100_000
		nkeys  = 1 << 20
		window = time.Minute
		limit  = 1000
	)
	srv := redistest.Start(b)
	clients, err := Dial([]string{srv.URL()}, RedisOptions{PoolSize: 1, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	rc := clients[0]
	defer rc.Close()
	ctx := context.Background()
	script := redis.NewScript(slidingLogLua)
	if err := script.Load(ctx, rc).Err(); err != nil {
		b.Fatal(err)
	}

	names := teamNames(teams)
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, teams-1)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = "sl:" + names[z.Uint64()]
	}
	win := strconv.FormatInt(window.Milliseconds(), 10)
	lim := strconv.Itoa(limit)

	var admitted int
	i := 0
	start := time.Now()
	for b.Loop() {
		now := time.Now().UnixMilli()
		left, err := script.EvalSha(ctx, rc, []string{keys[i&(nkeys-1)]}, now, win, lim, i).Int64()
		if err != nil {
			b.Fatal(err)
		}
		if left > 0 {
			admitted++
		}
		i++
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(i)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(admitted)/float64(i), "admitted_share")
}
