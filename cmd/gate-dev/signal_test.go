//go:build unix

package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var startedPid = regexp.MustCompile(`redis: redis-server .* started on \S+ \(pid (\d+),`)

// buildDev builds the gate-dev binary into a temporary directory.
func buildDev(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gate-dev")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// devProcess is gate-dev started as a process of its own, the leader of its own process
// group, as a shell starts a foreground job.
type devProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan error
	tmp            string // its TMPDIR
}

// startDevProcess starts bin with args in its own process group, with no GATE_ variable
// from the test's environment and a TMPDIR of its own, and kills the group at the end of
// the test.
func startDevProcess(t *testing.T, bin string, args ...string) *devProcess {
	t.Helper()
	p := &devProcess{cmd: exec.Command(bin, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan error, 1), tmp: t.TempDir()}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + p.tmp}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) })
	return p
}

// waitOutput waits until stdout contains want.
func (p *devProcess) waitOutput(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.stdout.String(), want) {
		select {
		case err := <-p.exited:
			t.Fatalf("gate-dev exited (%v) before printing %q\nstdout:\n%s\nstderr:\n%s", err, want, p.stdout, p.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate-dev printed no %q within %v\nstdout:\n%s\nstderr:\n%s", want, timeout, p.stdout, p.stderr)
		}
	}
}

// TestDevCtrlCExitsZero: Ctrl-C in a terminal sends SIGINT to the whole foreground
// process group. gate-dev stops in order (load, gates with their final flush, then the
// redis-server it started, which the signal must not reach first) and exits 0 with no
// error line, its temporary rules file removed. A terminal closed (SIGHUP, which the shell
// sends its jobs) stops it alike: it killed it outright, its final flush unmade and its
// rules file left behind (a review).
func TestDevCtrlCExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	needRedisServer(t)
	t.Parallel()
	bin := buildDev(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			p := startDevProcess(t, bin, "-kafka-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-rate", "2000", "-teams", "200", "-threshold", "100")
			p.waitOutput(t, "\nt=", 60*time.Second) // up: the first line of the view
			m := startedOn.FindStringSubmatch(p.stdout.String())
			pid := startedPid.FindStringSubmatch(p.stdout.String())
			if m == nil || pid == nil {
				t.Fatalf("no redis-server address and pid in the output:\n%s", p.stdout)
			}
			// The signal below must not reach it: it is in a process group of its own.
			redisPid, _ := strconv.Atoi(pid[1])
			if pgid, err := syscall.Getpgid(redisPid); err != nil || pgid == p.cmd.Process.Pid {
				t.Errorf("redis-server (pid %d) is in process group %d (%v), gate-dev's: %s stops it before the gates' final flush", redisPid, pgid, err, sig)
			}
			if ents, err := os.ReadDir(p.tmp); err != nil || len(ents) != 1 {
				t.Errorf("TMPDIR holds %d entries (%v) while the demo runs, want its rules' directory", len(ents), err)
			}
			// As a terminal does: the signal to the process group.
			if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-p.exited:
				if err != nil {
					t.Errorf("exit after %s: %v, want status 0\nstderr:\n%s", sig, err, p.stderr)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no exit within 30s of %s\nstdout:\n%s\nstderr:\n%s", sig, p.stdout, p.stderr)
			}
			for line := range strings.Lines(p.stderr.String()) {
				if strings.HasPrefix(line, "gate-dev") || strings.Contains(line, "level=ERROR") {
					t.Errorf("error line after %s: %s", sig, line)
				}
			}
			if m := devTotals.FindStringSubmatch(p.stdout.String()); m == nil {
				t.Errorf("no totals line after %s:\n%s", sig, p.stdout)
			}
			// The redis-server it started is stopped, and its rules file removed.
			if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
				c.Close()
				t.Errorf("redis-server on %s still answers after gate-dev exited", m[1])
			}
			if ents, _ := os.ReadDir(p.tmp); len(ents) != 0 {
				t.Errorf("TMPDIR holds %s after gate-dev exited, want nothing", ents[0].Name())
			}
		})
	}
}

// A redis-server that exits before gate-dev stops it (here on SIGTERM, with status 0) is
// reported as such, with its status, not as an error of nil.
func TestDevRedisServerExitedEarly(t *testing.T) {
	needRedisServer(t)
	t.Parallel()
	path, _ := exec.LookPath("redis-server")
	r, err := startRedisServer(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(r.pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Reaped by stop's goroutine: then signal 0 finds no process.
		if syscall.Kill(r.pid, 0) != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server (pid %d) still runs 10s after SIGTERM", r.pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	err = r.stop()
	if err == nil || strings.Contains(err.Error(), "%!") || !strings.Contains(err.Error(), "exited with status 0 before gate-dev stopped it") {
		t.Errorf("stop after redis-server exited on its own: %v", err)
	}
}
