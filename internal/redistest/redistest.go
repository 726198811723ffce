// Package redistest starts real redis-server processes for Go tests.
//
// Guarantees:
//
//   - Every call to [Start] launches its own redis-server process, listening
//     only on a free loopback port (127.0.0.1:P with P chosen by the kernel).
//     Tests never share a server, so they may run in parallel, and the shared
//     development server on 127.0.0.1:6379 is never touched.
//   - Nothing is persisted: RDB snapshots are disabled (--save ""), AOF is
//     off (--appendonly no) and the working directory is the test's
//     t.TempDir(). A restarted server always comes up empty.
//   - Start returns only after the process answers PING and has been
//     verified (via INFO process_id) to be the process this package started,
//     not some other server that grabbed the port.
//   - The process is killed (SIGKILL) and reaped in t.Cleanup, before the
//     temporary directory is removed. On Linux the child also receives
//     SIGKILL if the test binary dies, so no redis-server outlives the tests.
//   - If redis-server is not on PATH the test is skipped, except when the
//     environment variable CI is true, in which case the test fails.
//
// The server's log (loglevel warning) is written to a file in the temp
// directory; its tail is included in failure messages and logged at cleanup
// when the test has failed.
//
// The package has no package-level mutable state; a *Server may be used from
// several goroutines.
package redistest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long Start and Restart wait for the server to
	// answer PING (including, for Restart, re-binding the same port).
	readyTimeout = 10 * time.Second
	// exitTimeout bounds how long we wait for a SIGKILLed process to be reaped.
	exitTimeout = 10 * time.Second
	// portAttempts is how many fresh ports Start tries when the chosen port is
	// taken between choosing it and redis-server binding it.
	portAttempts = 5
	// probeTimeout bounds a single readiness probe.
	probeTimeout = 500 * time.Millisecond
	// Poll intervals while waiting for readiness.
	minPoll = 5 * time.Millisecond
	maxPoll = 100 * time.Millisecond
	// logTailBytes is how much of the end of the server log is reported.
	logTailBytes = 4 << 10
)

// exitedError reports that redis-server exited before it became ready,
// which almost always means the port could not be bound. (A type rather than
// a sentinel variable: the package keeps no package-level variables.)
type exitedError struct{ waitErr error }

func (e *exitedError) Error() string {
	return fmt.Sprintf("redis-server exited before answering PING (%v)", e.waitErr)
}

func isExited(err error) bool {
	var e *exitedError
	return errors.As(err, &e)
}

// Server is a redis-server process owned by one test.
type Server struct {
	bin     string // absolute path of redis-server
	dir     string // t.TempDir(): working dir, --dir, and log location
	logPath string
	port    int // fixed after Start returns; reused by Restart
	// conf and extra are a config file put before, and arguments put after, the
	// standard ones (cluster and sentinel servers); kept for Restart.
	conf  string
	extra []string
	opts  Options

	mu      sync.Mutex
	proc    *process // nil while stopped
	refusal Refusal  // set by RefuseWrites, for AcceptWrites
}

// process is one running redis-server.
type process struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd.Wait has returned
	waitErr error         // valid after done is closed
}

// Options protect a server started by StartWith; the zero value is Start's open server.
type Options struct {
	// Password is the default user's password (requirepass); empty for none.
	Password string
	// User and UserPassword add an ACL user with every right; empty for none.
	User, UserPassword string
	// TLS, when set, makes the server listen over TLS only, on its one port.
	TLS *TLS
}

// TLS is the server's certificate, and the CA that signs it. Clients need not present
// a certificate of their own.
type TLS struct {
	CertFile, KeyFile string
	CAFile            string         // PEM certificate of the CA
	RootCAs           *x509.CertPool // trusts the CA; Client and the readiness probe verify with it
}

// Start launches a fresh redis-server on a free loopback port and returns
// once it answers PING. The server is killed at test cleanup.
//
// If redis-server is not on PATH, Start calls t.Skip, or t.Fatal when the
// environment variable CI is true.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, nil, nil, Options{})
}

// StartWith is Start with a password, an ACL user or TLS (opts). The readiness probe
// logs in and speaks TLS as a client would; Client does too, and Restart keeps opts.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	return start(t, nil, nil, opts)
}

// StartArgs is Start with further redis-server arguments, such as a command renamed or
// disabled ("--rename-command", "EVAL", ""), as a hardened or managed Redis has it.
func StartArgs(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, nil, args, Options{})
}

// start is Start with a config file written by conf (given the server's directory, it
// returns the file's path; nil for none), extra command-line arguments and opts.
func start(t testing.TB, conf func(dir string) string, extra []string, opts Options) *Server {
	t.Helper()

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if InCI() {
			t.Fatalf("redistest: redis-server not found on PATH (%v); CI=%s, so this is a failure, not a skip: install redis-server in the CI image", err, os.Getenv("CI"))
			return nil
		}
		t.Skipf("redistest: redis-server not found on PATH (%v); skipping (set CI=true to make this a failure)", err)
		return nil
	}

	dir := t.TempDir() // registered first, so removed after our cleanup below
	s := &Server{
		bin:     bin,
		dir:     dir,
		logPath: filepath.Join(dir, "redis-server.log"),
		extra:   extra,
		opts:    opts,
	}
	if conf != nil {
		s.conf = conf(dir)
	}
	t.Cleanup(func() { s.cleanup(t) })

	s.mu.Lock()
	defer s.mu.Unlock()

	deadline := time.Now().Add(readyTimeout)
	var failures []string
	for attempt := 1; attempt <= portAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: picking a free loopback port: %v", err)
			return nil
		}
		p, err := s.launch(port)
		if err != nil {
			t.Fatalf("redistest: %v", err)
			return nil
		}
		err = waitReady(p, port, deadline, s.opts)
		if err == nil {
			s.port = port
			s.proc = p
			return s
		}
		if kerr := p.kill(); kerr != nil {
			t.Errorf("redistest: %v", kerr)
		}
		failures = append(failures, fmt.Sprintf("attempt %d (port %d): %v", attempt, port, err))
		if !isExited(err) {
			break // a timeout will not be fixed by another port
		}
	}
	t.Fatalf("redistest: could not start redis-server:\n  %s\n%s",
		strings.Join(failures, "\n  "), s.logTail())
	return nil
}

// Addr returns the server's address, "127.0.0.1:P".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns a redis URL for database 0, "redis://127.0.0.1:P/0": rediss:// when the
// server speaks TLS, with the default user's password when it has one.
func (s *Server) URL() string {
	return s.URLAs("", s.opts.Password)
}

// URLAs is URL logged in as user (empty: the default user) with password.
func (s *Server) URLAs(user, password string) string {
	u := url.URL{Scheme: "redis", Host: s.Addr(), Path: "/0"}
	if s.opts.TLS != nil {
		u.Scheme = "rediss"
	}
	if user != "" || password != "" {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

// Client returns a go-redis client connected to the server. It is closed at
// test cleanup (before the server is killed). Context deadlines are honoured
// (ContextTimeoutEnabled), so a command with a short context fails fast when
// the server is stopped or paused.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		DB:                    0,
		Password:              s.opts.Password,
		TLSConfig:             s.opts.clientTLS(),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawClient is a client of the server (its password and TLS, as Client's) that does not
// retry, for this package's own commands; the caller closes it.
func (s *Server) rawClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.opts.Password, TLSConfig: s.opts.clientTLS(), MaxRetries: -1})
}

// Stop kills the server with SIGKILL and waits for the process to exit.
// Nothing is saved. The address is kept so that Restart can bring a new
// server up on the same port. Stop on a stopped server is a no-op.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	p := s.proc
	s.proc = nil
	if err := p.kill(); err != nil {
		t.Fatalf("redistest: Stop: %v", err)
	}
}

// Restart starts a new, empty redis-server on the same port and waits until
// it answers PING. If the server is still running it is stopped first. If
// the port cannot be bound again within about 10 s, Restart calls t.Fatal.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		p := s.proc
		s.proc = nil
		if err := p.kill(); err != nil {
			t.Fatalf("redistest: Restart: stopping old server: %v", err)
			return
		}
	}

	deadline := time.Now().Add(readyTimeout)
	attempts := 0
	for {
		attempts++
		p, err := s.launch(s.port)
		if err != nil {
			t.Fatalf("redistest: Restart: %v", err)
			return
		}
		err = waitReady(p, s.port, deadline, s.opts)
		if err == nil {
			s.proc = p
			return
		}
		if kerr := p.kill(); kerr != nil {
			t.Errorf("redistest: Restart: %v", kerr)
		}
		remaining := time.Until(deadline)
		if !isExited(err) || remaining <= 0 {
			t.Fatalf("redistest: Restart: could not bring redis-server back on %s after %d attempt(s): %v\n%s",
				s.Addr(), attempts, err, s.logTail())
			return
		}
		// The port is probably still held by someone else; poll again shortly.
		time.Sleep(min(maxPoll, remaining))
	}
}

// Pause sends SIGSTOP to the server, simulating a hung Redis: connections
// are still accepted by the kernel but no command is answered until Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, "Pause", syscall.SIGSTOP)
}

// Resume sends SIGCONT to a server suspended by Pause.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, "Resume", syscall.SIGCONT)
}

func (s *Server) signal(t testing.TB, op string, sig os.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		t.Fatalf("redistest: %s: server on %s is not running", op, s.Addr())
		return
	}
	select {
	case <-s.proc.done:
		t.Fatalf("redistest: %s: redis-server exited unexpectedly (%v)\n%s", op, s.proc.waitErr, s.logTail())
		return
	default:
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %s: sending %v: %v", op, sig, err)
	}
}

// cleanup kills the server; it runs before t.TempDir's own cleanup.
func (s *Server) cleanup(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.Failed() {
		t.Logf("redistest: test failed; redis-server on %s\n%s", s.Addr(), s.logTail())
	}
	if s.proc == nil {
		return
	}
	p := s.proc
	s.proc = nil
	if err := p.kill(); err != nil {
		t.Errorf("redistest: cleanup: %v", err)
	}
}

// launch starts redis-server on port without waiting for it. s.mu is held.
func (s *Server) launch(port int) (*process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log file: %w", err)
	}
	defer logf.Close() // the child keeps its own copy

	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	if t := s.opts.TLS; t != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile,
			"--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", "no")
	} else {
		args = append(args, "--port", strconv.Itoa(port))
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	if s.opts.User != "" {
		args = append(args, "--user", s.opts.User, "on", ">"+s.opts.UserPassword, "~*", "&*", "+@all")
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", s.logPath,
	)
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	// Anything redis-server prints before it opens --logfile (e.g. config
	// errors) lands in the same file.
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// kill sends SIGKILL (which also ends a SIGSTOPped process) and waits for
// the process to be reaped, so its listening socket is closed on return.
func (p *process) kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing redis-server (pid %d): %w", p.cmd.Process.Pid, err)
	}
	timer := time.NewTimer(exitTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("redis-server (pid %d) did not exit within %v of SIGKILL", p.cmd.Process.Pid, exitTimeout)
	}
}

// waitReady polls until the process started as p answers on port, p exits
// (*exitedError), or deadline passes.
func waitReady(p *process, port int, deadline time.Time, opts Options) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	want := p.cmd.Process.Pid
	interval := minPoll
	var last error
	for {
		select {
		case <-p.done:
			return &exitedError{waitErr: p.waitErr}
		default:
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			return fmt.Errorf("redis-server (pid %d) not answering PING on %s within %v: last error: %v", want, addr, readyTimeout, last)
		}
		pid, err := probe(addr, min(probeTimeout, remaining), opts)
		switch {
		case err == nil && pid == want:
			return nil
		case err == nil:
			// Someone else's server holds the port; ours will fail to bind
			// and exit, which the select above notices.
			last = fmt.Errorf("%s is answered by another redis-server (pid %d), not ours (pid %d)", addr, pid, want)
		default:
			last = err
		}
		timer := time.NewTimer(min(interval, max(time.Until(deadline), 0)))
		select {
		case <-p.done:
		case <-timer.C:
		}
		timer.Stop()
		interval = min(2*interval, maxPoll)
	}
}

// clientTLS is the client side of o.TLS, nil without TLS.
func (o Options) clientTLS() *tls.Config {
	if o.TLS == nil {
		return nil
	}
	return &tls.Config{RootCAs: o.TLS.RootCAs, MinVersion: tls.VersionTLS12}
}

// probe sends PING and INFO server over a fresh connection (over TLS and after AUTH
// when opts ask for them), checks for +PONG and returns the server's process_id.
func probe(addr string, timeout time.Duration, opts Options) (int, error) {
	var conn net.Conn
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	if cfg := opts.clientTLS(); cfg != nil {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
		conn = tls.Client(conn, cfg)
	}
	req := "PING\r\nINFO server\r\n"
	if opts.Password != "" {
		req = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(opts.Password), opts.Password) + req
	}
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	if opts.Password != "" {
		line, err := readLine(r)
		if err != nil {
			return 0, fmt.Errorf("reading AUTH reply: %w", err)
		}
		if line != "+OK" {
			return 0, fmt.Errorf("AUTH: unexpected reply %q", line)
		}
	}

	line, err := readLine(r)
	if err != nil {
		return 0, fmt.Errorf("reading PING reply: %w", err)
	}
	if line != "+PONG" {
		return 0, fmt.Errorf("PING: unexpected reply %q", line)
	}

	line, err = readLine(r)
	if err != nil {
		return 0, fmt.Errorf("reading INFO reply: %w", err)
	}
	if !strings.HasPrefix(line, "$") {
		return 0, fmt.Errorf("INFO: unexpected reply %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("INFO: bad bulk length %q", line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, fmt.Errorf("reading INFO body: %w", err)
	}
	for _, l := range strings.Split(string(body[:n]), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				return 0, fmt.Errorf("INFO: bad process_id %q", v)
			}
			return pid, nil
		}
	}
	return 0, errors.New("INFO server: no process_id field")
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// freePort asks the kernel for a free loopback port. The listener is closed
// before returning, so the port can be taken by someone else before
// redis-server binds it; Start retries in that case.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return port, nil
}

// logTail returns the last few KiB of the server log, formatted for a
// failure message.
func (s *Server) logTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no redis-server log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(redis-server log: %v)", err)
	}
	off := max(st.Size()-logTailBytes, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(reading redis-server log: %v)", err)
	}
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	buf = bytes.TrimRight(buf, "\n")
	if len(buf) == 0 {
		return fmt.Sprintf("(redis-server log %s is empty)", s.logPath)
	}
	return fmt.Sprintf("--- tail of %s ---\n%s\n--- end of log ---", s.logPath, buf)
}

// InCI reports whether the environment's CI is true as strconv.ParseBool reads it (1, t,
// true, TRUE, ...): a tool a test needs that is missing is then a failure, not a skip.
// The suite's other helpers (internal/kafkatest, internal/integration) read CI the same
// way.
func InCI() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}
