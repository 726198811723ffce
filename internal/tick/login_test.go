package tick

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/clock"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestRefusedLoginFailsTheTick: a Redis primary or sentinels that refuse the gate's login
// when a connection opens (a wrong GATE_REDIS_PASSWORD or GATE_REDIS_SENTINEL_PASSWORD) fails the tick's
// writes and reads, which are carried and fail open. go-redis gives the pipeline's
// commands no error of their own then; read as replies, an MGET with none panicked the
// tick (index out of range), and with it the gate.
func TestRefusedLoginFailsTheTick(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Password: "right"})
	set := redistest.StartSentinelWith(t, 0, 1, redistest.SentinelOptions{Password: "right", SentinelPassword: "sentinel-pw"})
	primary, err := Dial([]string{srv.URLAs("", "wrong")}, testRedisOptions())
	if err != nil {
		t.Fatal(err)
	}
	o := testRedisOptions()
	o.SentinelPassword = "wrong"
	sentinel, err := DialSentinel(set.Master, set.SentinelAddrs(), "redis://:right@127.0.0.1:6379/0", o)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]redis.UniversalClient{"primary": primary[0], "sentinels": sentinel} {
		t.Cleanup(func() { _ = c.Close() })
		clk := clock.NewFake(epochStart.Add(59 * time.Second))
		reg := prometheus.NewRegistry()
		l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10}, clk, reg)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := New(l, []redis.UniversalClient{c}, Config{KeyPrefix: "t"}, reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			l.Check("team-a", 1)
		}
		r := tk.Tick(context.Background())
		if r.Errors != 1 || r.Writes != 0 || r.CarriedWrites == 0 || r.FailedReads == 0 || r.Reads != 0 {
			t.Errorf("%s refusing the login: tick %+v, want one error, the writes carried and the reads failed", name, r)
		}
	}
}
