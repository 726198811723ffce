package tick

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/redistest"
)

// TestRefusedLoginSaysSo: a gate without the password of a Redis that has one has each
// pipeline refused, and the tick's line says what to look at. Redis refuses a command of
// more than ten arguments from a client not logged in as a protocol error
// ("unauthenticated multibulk length", the tick's scripts with their keys) and a shorter
// one with NOAUTH: the first line said only "redis pipeline failed" with either error.
func TestRefusedLoginSaysSo(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Password: "right"})
	for _, teams := range []int{1, 50} {
		l, tk, logs := loggedTicker(t, srv.URLAs("", ""))
		for i := range teams {
			l.Check(fmt.Sprintf("team-%d", i), 1)
		}
		tk.Tick(context.Background())
		if lines := logs.lines("redis refuses the gate's commands", "GATE_REDIS_PASSWORD"); len(lines) != 1 {
			t.Errorf("%d teams: want one line saying Redis refuses the gate and naming the password; log:\n%s", teams, logs.buf.String())
		}
	}
}

// TestWritesRefusedForRightsSaySo: a user that may read but not run the write script (an
// ACL written before it, without +eval) has its reads answered and its writes refused:
// the line said "views go stale", though they were fresh; what it means is that the
// counts reach no other gate, each gate limiting alone.
func TestWritesRefusedForRightsSaySo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "old", "on", ">pw", "~t:*", "-@all", "+get", "+set", "+mget", "+ping", "+hello").Err(); err != nil {
		t.Fatal(err)
	}
	l, tk, logs := loggedTicker(t, srv.URLAs("old", "pw"))
	l.Check("team-a", 1)
	r := tk.Tick(context.Background())
	if lines := logs.lines("redis refuses the gate's commands", "reach no other gate"); len(lines) != 1 || r.FailedReads != 0 {
		t.Errorf("tick %+v; want one line saying the counts reach no other gate; log:\n%s", r, logs.buf.String())
	}
}

// loggedTicker is a Ticker of a limiter of its own (a minute's window, a threshold of
// 100) on the Redis at url, under prefix t, logging to the buffer it returns.
func loggedTicker(t *testing.T, url string) (*limit.Limiter, *Ticker, *logBuffer) {
	t.Helper()
	client, err := Dial([]string{url}, testRedisOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client[0].Close() })
	l, err := limit.New(limit.Config{Window: time.Minute, Threshold: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	tk, err := New(l, []redis.UniversalClient{client[0]}, Config{KeyPrefix: "t"}, nil, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return l, tk, logs
}

// TestEvalDisabledSaysSo: a Redis without EVAL (renamed or disabled, rename-command EVAL
// "": hardened and managed Redis do it) refuses every tick's writes for good, as an ACL
// without +eval does: the gate's counts reach no other gate. Readiness's probe passed it
// ("unknown command" is not a refusal of the login), and the tick's line said only that
// the pipeline failed. The probe refuses it now, saying the command is missing on the
// server, and so does the tick's line.
func TestEvalDisabledSaysSo(t *testing.T) {
	t.Parallel()
	srv := redistest.StartArgs(t, "--rename-command", "EVAL", "")
	c := srv.Client(t)
	err := ProbeRights(context.Background(), c, "t")
	if err == nil || !strings.Contains(err.Error(), "unknown command") || !strings.Contains(err.Error(), "renamed or disabled") {
		t.Errorf("probe of a Redis without EVAL = %v; want it refused, saying EVAL is renamed or disabled", err)
	}
	l, tk, logs := loggedTicker(t, srv.URL())
	l.Check("team-a", 1)
	tk.Tick(context.Background())
	if lines := logs.lines("renamed or disabled", "reach no other gate"); len(lines) != 1 {
		t.Errorf("want one line saying EVAL is missing and the counts reach no other gate; log:\n%s", logs.buf.String())
	}
}
