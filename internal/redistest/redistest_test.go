package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// eventually polls f until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := 5 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, timeout, err)
		}
		timer := time.NewTimer(interval)
		<-timer.C
		interval = min(2*interval, 100*time.Millisecond)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStartSetGet(t *testing.T) {
	t.Parallel()
	s := Start(t)

	host, portStr, err := net.SplitHostPort(s.Addr())
	if err != nil {
		t.Fatalf("Addr %q: %v", s.Addr(), err)
	}
	port, _ := strconv.Atoi(portStr)
	if host != "127.0.0.1" || port <= 0 || port == 6379 {
		t.Fatalf("Addr = %q, want 127.0.0.1:<free port other than 6379>", s.Addr())
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Fatalf("URL = %q, want %q", s.URL(), want)
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", s.URL(), err)
	}
	if opt.Addr != s.Addr() || opt.DB != 0 {
		t.Fatalf("ParseURL(%q) = addr %q db %d", s.URL(), opt.Addr, opt.DB)
	}

	c := s.Client(t)
	ctx := ctxTimeout(t, 5*time.Second)
	if err := c.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	got, err := c.Get(ctx, "greeting").Result()
	if err != nil || got != "hello" {
		t.Fatalf("GET = %q, %v; want %q", got, err, "hello")
	}

	// A client built from URL() reaches the same server.
	c2 := redis.NewClient(opt)
	t.Cleanup(func() { _ = c2.Close() })
	if got, err := c2.Get(ctx, "greeting").Result(); err != nil || got != "hello" {
		t.Fatalf("GET via URL client = %q, %v; want %q", got, err, "hello")
	}

	// Nothing is persisted.
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil || cfg["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want empty", cfg, err)
	}
	cfg, err = c.ConfigGet(ctx, "appendonly").Result()
	if err != nil || cfg["appendonly"] != "no" {
		t.Fatalf("CONFIG GET appendonly = %v, %v; want no", cfg, err)
	}
}

func TestParallelServersAreIsolated(t *testing.T) {
	t.Parallel()
	const n = 6
	// addrs holds the servers running now. A server's port is free again once its
	// subtest has ended (its cleanup kills it), and the kernel may hand it to a
	// later subtest: -parallel (GOMAXPROCS) runs only some of the n at a time, so
	// only servers alive together must differ (CI once saw server0 take the port
	// server3 had used and given back).
	var (
		mu      sync.Mutex
		addrs   = map[string]string{}
		started int
	)
	t.Run("group", func(t *testing.T) {
		for i := range n {
			name := fmt.Sprintf("server%d", i)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				s := Start(t)
				mu.Lock()
				if other, dup := addrs[s.Addr()]; dup {
					mu.Unlock()
					t.Fatalf("%s got address %s of %s, which still runs", name, s.Addr(), other)
				}
				addrs[s.Addr()] = name
				started++
				mu.Unlock()
				t.Cleanup(func() { // before Start's cleanup kills the server
					mu.Lock()
					delete(addrs, s.Addr())
					mu.Unlock()
				})

				c := s.Client(t)
				ctx := ctxTimeout(t, 5*time.Second)
				if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
					t.Fatalf("DBSIZE on fresh server = %d, %v; want 0", n, err)
				}
				if err := c.Set(ctx, "owner", name, 0).Err(); err != nil {
					t.Fatalf("SET: %v", err)
				}
				if got, err := c.Get(ctx, "owner").Result(); err != nil || got != name {
					t.Fatalf("GET owner = %q, %v; want %q", got, err, name)
				}
			})
		}
	})
	if started != n && !t.Failed() {
		t.Fatalf("%d servers started, want %d", started, n)
	}
}

func TestStopThenCommandsFail(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := ctxTimeout(t, 5*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Stop(t)
	s.Stop(t) // idempotent

	cmdCtx := ctxTimeout(t, 2*time.Second)
	if err := c.Get(cmdCtx, "k").Err(); err == nil || errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Stop: err = %v, want a connection error", err)
	}
	conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err == nil {
		conn.Close()
		t.Fatalf("dial %s after Stop succeeded; want connection refused", s.Addr())
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr := s.Addr()
	old := s.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := old.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Stop(t)
	s.Restart(t)

	if s.Addr() != addr {
		t.Fatalf("Addr after Restart = %q, want %q", s.Addr(), addr)
	}
	// Restart returns only once the server answers, so a fresh client works
	// straight away, and the data is gone.
	c := s.Client(t)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil (empty server)", err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Restart = %d, %v; want 0", n, err)
	}
	if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v2" {
		t.Fatalf("GET after Restart = %q, %v; want v2", got, err)
	}

	// The old client's pooled connections died with the old process; it
	// recovers by reconnecting to the same address.
	eventually(t, 10*time.Second, "old client after Restart", func() error {
		got, err := old.Get(ctx, "k").Result()
		if err != nil {
			return err
		}
		if got != "v2" {
			return fmt.Errorf("GET k = %q, want v2", got)
		}
		return nil
	})
}

func TestRestartWhileRunningStartsEmpty(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Restart(t) // no Stop: Restart stops the running server itself
	fresh := s.Client(t)
	if n, err := fresh.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Restart = %d, %v; want 0", n, err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	ctx := ctxTimeout(t, 5*time.Second)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Pause(t)
	const short = 200 * time.Millisecond
	start := time.Now()
	pctx, cancel := context.WithTimeout(t.Context(), short)
	err := c.Get(pctx, "k").Err()
	cancel()
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("GET while paused succeeded; want a timeout")
	}
	var nerr net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &nerr) && nerr.Timeout()) {
		t.Fatalf("GET while paused: err = %v, want a timeout", err)
	}
	if elapsed > 3*time.Second {
		t.Fatalf("GET while paused took %v; the %v context deadline was not honoured", elapsed, short)
	}
	// A raw connection is accepted by the kernel, but nothing answers.
	if _, err := probe(s.Addr(), short, Options{}); err == nil {
		t.Fatalf("probe while paused succeeded; want a timeout")
	}

	s.Resume(t)
	eventually(t, 10*time.Second, "GET after Resume", func() error {
		rctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		got, err := c.Get(rctx, "k").Result()
		if err != nil {
			return err
		}
		if got != "v" {
			return fmt.Errorf("GET k = %q, want v (data survives a pause)", got)
		}
		return nil
	})
}

func TestStopWhilePaused(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Pause(t)
	s.Stop(t) // SIGKILL ends a stopped process too; must not hang
	s.Restart(t)
	if err := s.Client(t).Ping(ctxTimeout(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("PING after Pause/Stop/Restart: %v", err)
	}
}

// fakeTB records Fatalf/Skipf instead of failing the real test. Both end the
// calling goroutine, like the real methods do.
type fakeTB struct {
	testing.TB // the real *testing.T, for everything not overridden
	mu         sync.Mutex
	fatal      []string
	skip       []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = append(f.fatal, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skip = append(f.skip, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

// runFake runs fn(fake) on its own goroutine (Fatalf/Skipf call Goexit) and
// waits for it.
func runFake(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// Not parallel: it changes PATH and CI for the whole process.
func TestMissingRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // a directory without redis-server

	for _, ci := range []string{"true", "1"} { // CI is read as a boolean, as everywhere in the suite
		t.Run("CI="+ci+" fails", func(t *testing.T) {
			t.Setenv("CI", ci)
			f := runFake(t, func(tb testing.TB) {
				if s := Start(tb); s != nil {
					t.Errorf("Start returned a server without redis-server on PATH")
				}
			})
			if len(f.fatal) != 1 || len(f.skip) != 0 {
				t.Fatalf("fatal = %q, skip = %q; want exactly one Fatalf", f.fatal, f.skip)
			}
			if !strings.Contains(f.fatal[0], "redis-server not found") || !strings.Contains(f.fatal[0], "CI") {
				t.Fatalf("Fatalf message %q does not explain the missing redis-server under CI", f.fatal[0])
			}
		})
	}

	for _, ci := range []string{"", "false"} {
		t.Run("CI="+ci+" skips", func(t *testing.T) {
			t.Setenv("CI", ci)
			f := runFake(t, func(tb testing.TB) {
				if s := Start(tb); s != nil {
					t.Errorf("Start returned a server without redis-server on PATH")
				}
			})
			if len(f.skip) != 1 || len(f.fatal) != 0 {
				t.Fatalf("fatal = %q, skip = %q; want exactly one Skipf", f.fatal, f.skip)
			}
		})
	}
}

// While another listener holds the port, Restart keeps retrying; once the
// port is released it succeeds.
func TestRestartWaitsForPort(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Stop(t)

	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("occupying %s: %v", s.Addr(), err)
	}
	defer l.Close()

	done := make(chan *fakeTB, 1)
	go func() {
		done <- runFake(t, func(tb testing.TB) { s.Restart(tb) })
	}()

	// Wait until redis-server has actually failed to bind at least once.
	eventually(t, 10*time.Second, "redis-server reporting the port in use", func() error {
		b, err := os.ReadFile(s.logPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "in use") {
			return errors.New("no bind failure logged yet")
		}
		return nil
	})
	l.Close()

	f := <-done
	if len(f.fatal) != 0 {
		t.Fatalf("Restart failed: %q", f.fatal)
	}
	if err := s.Client(t).Ping(ctxTimeout(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// If the port stays taken, Restart gives up with t.Fatal after its deadline.
func TestRestartFailsWhenPortStaysTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the ~10 s Restart deadline")
	}
	t.Parallel()
	s := Start(t)
	s.Stop(t)
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("occupying %s: %v", s.Addr(), err)
	}
	defer l.Close()

	start := time.Now()
	f := runFake(t, func(tb testing.TB) { s.Restart(tb) })
	if len(f.fatal) != 1 {
		t.Fatalf("fatal = %q; want exactly one Fatalf", f.fatal)
	}
	if !strings.Contains(f.fatal[0], "could not bring redis-server back") || !strings.Contains(f.fatal[0], "in use") {
		t.Fatalf("Fatalf message %q should explain the failure and include the log tail", f.fatal[0])
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("Restart took %v to give up", d)
	}
}

// TestStartWithPassword: a server started with a password refuses a client without it,
// answers Client, and keeps the password across Restart.
func TestStartWithPassword(t *testing.T) {
	t.Parallel()
	s := StartWith(t, Options{Password: "s3cret", User: "gate", UserPassword: "gate-pw"})
	ctx := t.Context()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
	bare := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer bare.Close()
	if err := bare.Ping(ctx).Err(); err == nil {
		t.Fatal("PING without the password answered")
	}
	opts, err := redis.ParseURL(s.URLAs("gate", "gate-pw"))
	if err != nil {
		t.Fatal(err)
	}
	user := redis.NewClient(opts)
	defer user.Close()
	if err := user.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING as the ACL user: %v", err)
	}
	s.Restart(t)
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password after Restart: %v", err)
	}
}
