package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
)

const (
	// redisStartTimeout bounds waiting for a started redis-server to answer PING.
	redisStartTimeout = 5 * time.Second
	// redisStartAttempts is how many free ports are tried, should another process take
	// the chosen one before redis-server binds it.
	redisStartAttempts = 3
)

// devRedis is the Redis gate-dev runs against: the one GATE_REDIS_URLS names, a
// redis-server it started, or an embedded miniredis.
type devRedis struct {
	url  string       // for GATE_REDIS_URLS
	what string       // one line for the header: which Redis, where
	pid  int          // a started redis-server's process id; 0 for the others
	stop func() error // stops what gate-dev started; nil error for GATE_REDIS_URLS
}

// startDevRedis picks the Redis: urls (GATE_REDIS_URLS) if set, else a redis-server
// started on a free loopback port if lookPath finds one, else miniredis in this process.
// shown is urls as the header shows them, passwords redacted.
func startDevRedis(ctx context.Context, urls, shown string, lookPath func(string) (string, error), log *slog.Logger) (devRedis, error) {
	if urls != "" {
		return devRedis{
			url:  urls,
			what: "GATE_REDIS_URLS " + shown,
			stop: func() error { return nil },
		}, nil
	}
	path, err := lookPath("redis-server")
	if err == nil {
		r, err := startRedisServer(ctx, path)
		if err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			// Stopped while it started (Ctrl-C): no fault of redis-server's, and nothing
			// to fall back to (it warned that redis-server would not start, then built
			// both gates on a miniredis only to stop them; a review).
			return devRedis{}, fmt.Errorf("starting redis-server: %w", ctx.Err())
		}
		log.Warn("could not start redis-server; using the embedded miniredis instead", "path", path, "err", err)
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return devRedis{}, fmt.Errorf("starting the embedded miniredis: %w", err)
	}
	// miniredis keeps time still: expiries happen only when told time has passed.
	ffCtx, stopFF := context.WithCancel(context.WithoutCancel(ctx))
	ffDone := make(chan struct{})
	go func() {
		defer close(ffDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ffCtx.Done():
				return
			case <-t.C:
				m.FastForward(time.Second)
			}
		}
	}()
	why := "no redis-server on PATH"
	if err == nil {
		why = "redis-server would not start"
	}
	return devRedis{
		url:  "redis://" + m.Addr() + "/0",
		what: fmt.Sprintf("embedded miniredis (Go, in this process) on %s (%s; stopped at exit)", m.Addr(), why),
		stop: func() error {
			stopFF()
			<-ffDone
			m.Close()
			return nil
		},
	}, nil
}

// startRedisServer starts path on a free loopback port, persisting nothing, and waits
// for its PING.
func startRedisServer(ctx context.Context, path string) (devRedis, error) {
	var errs []error
	for range redisStartAttempts {
		r, err := tryRedisServer(ctx, path)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
	}
	return devRedis{}, errors.Join(errs...)
}

func tryRedisServer(ctx context.Context, path string) (devRedis, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return devRedis{}, fmt.Errorf("finding a free port: %w", err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	if err := ln.Close(); err != nil {
		return devRedis{}, fmt.Errorf("finding a free port: %w", err)
	}
	// Not exec.CommandContext: the server is stopped by stop, after the gates' final
	// flush, not when ctx ends.
	cmd := exec.Command(path, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--loglevel", "warning", "--dir", os.TempDir())
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return devRedis{}, fmt.Errorf("starting %s: %w", path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// stop is called once the gates have made their final flush (dev's deferred calls).
	stop := func() error {
		select {
		case err := <-exited:
			return exitedEarly(err)
		default:
		}
		if err := cmd.Process.Kill(); err != nil {
			if errors.Is(err, os.ErrProcessDone) {
				return exitedEarly(<-exited)
			}
			return fmt.Errorf("stopping redis-server (pid %d): %w", cmd.Process.Pid, err)
		}
		<-exited
		return nil
	}
	deadline := time.Now().Add(redisStartTimeout)
	for {
		if err := ping(ctx, addr); err == nil {
			break
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			_ = stop()
			return devRedis{}, fmt.Errorf("redis-server on %s did not answer PING: %w", addr, err)
		}
		select {
		case err := <-exited:
			return devRedis{}, fmt.Errorf("redis-server on port %s (taken?) did not start: %w", port, exitedEarly(err))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return devRedis{
		url:  "redis://" + addr + "/0",
		what: fmt.Sprintf("%s started on %s (pid %d, nothing persisted; stopped at exit)", redisVersion(ctx, path), addr, cmd.Process.Pid),
		pid:  cmd.Process.Pid,
		stop: stop,
	}, nil
}

// exitedEarly is the error of a redis-server that exited before gate-dev stopped it; err
// is its cmd.Wait's, nil when it exited with status 0 (as it does on SIGINT or SIGTERM).
func exitedEarly(err error) error {
	if err == nil {
		return errors.New("redis-server exited with status 0 before gate-dev stopped it (stopped by someone else?)")
	}
	return fmt.Errorf("redis-server exited before gate-dev stopped it: %w", err)
}

// ping sends one inline PING and expects +PONG.
func ping(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: 200 * time.Millisecond}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// redisVersion names the server with its version (v=... of `redis-server --version`)
// when it can be read.
func redisVersion(ctx context.Context, path string) string {
	vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, path, "--version").Output()
	if err != nil {
		return "redis-server"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			if _, err := strconv.Atoi(strings.ReplaceAll(v, ".", "")); err == nil {
				return "redis-server " + v
			}
		}
	}
	return "redis-server"
}
