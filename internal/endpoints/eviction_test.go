package endpoints

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/tlsreload"
)

// TestReadinessWarnsOfEviction: an instance with maxmemory and an evicting policy is
// named in one warning when it first answers (Redis would drop the gate's counters and
// write sequences silently); one without maxmemory, or under noeviction, is not.
func TestReadinessWarnsOfEviction(t *testing.T) {
	ctx := context.Background()
	settings := [][2]string{{"100mb", "allkeys-lru"}, {"0", "volatile-lru"}, {"100mb", "noeviction"}}
	var clients []redis.UniversalClient
	var urls []string
	for _, s := range settings {
		srv := redistest.Start(t)
		c := srv.Client(t)
		if err := c.ConfigSet(ctx, "maxmemory", s[0]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ConfigSet(ctx, "maxmemory-policy", s[1]).Err(); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		urls = append(urls, srv.Addr())
	}
	var logs faulttest.Buffer
	r := &Readiness{clients: clients, urls: urls, timeout: 10 * time.Second, up: make([]bool, len(clients)),
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	r.Run(ctx)
	var warns []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") {
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "instance=0") || !strings.Contains(warns[0], "maxmemory_policy=allkeys-lru") || !strings.Contains(warns[0], "noeviction") {
		t.Errorf("warnings %q, want one for instance 0 naming allkeys-lru and what to set", warns)
	}
}

// TestEvictionCheckedWithTheDocumentedACL: a gate whose Redis user is docs/operations.md's
// example ACL warns of an evicting maxmemory-policy as one logged in as the default user
// does. The example had no +info, so INFO memory was refused and the check skipped with a
// debug line: an operator who followed the docs got no warning, on a Redis that evicted
// the gate's counters. A user refused INFO is told, at info level, that the policy was
// not checked and what to grant.
func TestEvictionCheckedWithTheDocumentedACL(t *testing.T) {
	ctx := context.Background()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const lead = "For example: `"
	i := strings.Index(string(doc), lead+"ACL SETUSER gate ")
	if i < 0 {
		t.Fatal("docs/operations.md has no " + lead + "ACL SETUSER gate ...`")
	}
	rest := string(doc[i+len(lead):])
	documented := strings.Fields(rest[:strings.IndexByte(rest, '`')])
	withoutInfo := slices.DeleteFunc(slices.Clone(documented), func(f string) bool { return f == "+info" })
	for _, tc := range []struct {
		name string
		acl  []string
		want string // in the one line logged above debug level about the policy
	}{
		{"documented", documented, "level=WARN msg=\"redis may evict the gate's keys"},
		{"without +info", withoutInfo, "level=INFO msg=\"redis: INFO memory refused; its maxmemory-policy is not checked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			args := []any{}
			for _, f := range tc.acl {
				if strings.HasPrefix(f, ">") {
					f = ">gate-pw"
				}
				args = append(args, f)
			}
			for _, cmd := range [][]any{{"CONFIG", "SET", "maxmemory", "100mb"}, {"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}, args} {
				if err := admin.Do(ctx, cmd...).Err(); err != nil {
					t.Fatalf("%v: %v", cmd, err)
				}
			}
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "gate", Password: "gate-pw", MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			var logs faulttest.Buffer
			r := &Readiness{clients: []redis.UniversalClient{c}, urls: []string{srv.Addr()}, timeout: 10 * time.Second, up: make([]bool, 1),
				log: slog.New(slog.NewTextHandler(&logs, nil))}
			r.Run(ctx)
			var said []string
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(line, "maxmemory") {
					said = append(said, line)
				}
			}
			if len(said) != 1 || !strings.Contains(said[0], tc.want) || tc.name != "documented" && !strings.Contains(said[0], "+info") {
				t.Errorf("ACL %q on an allkeys-lru Redis logged %q; want one line with %s", tc.acl, said, tc.want)
			}
		})
	}
}

func TestEvictionOf(t *testing.T) {
	t.Parallel()
	info := "# Memory\r\nused_memory:1\r\nmaxmemory:104857600\r\nmaxmemory_human:100.00M\r\nmaxmemory_policy:volatile-ttl\r\n"
	if p, m := evictionOf(info); p != "volatile-ttl" || m != "104857600" {
		t.Errorf("evictionOf = %q, %q", p, m)
	}
}

// TestReadyzSaysWhyRedisRefusesPing: an instance that answers, but refuses the gate (a
// wrong password), is named in /readyz with Redis's own error, not as one that has given
// no reply: "no PING reply yet" sends an operator to the network while the fix is the
// password in GATE_REDIS_URLS. The log says it once only, at the first attempt.
func TestReadyzSaysWhyRedisRefusesPing(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Password: "right"})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	mux := oneRedisReadiness(t, c, "redis://"+srv.Addr(), io.Discard)
	code, body := readyzUntil(mux, 10*time.Second, func(body string) bool { return strings.Contains(body, "WRONGPASS") })
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis://"+srv.Addr()) || !strings.Contains(body, "WRONGPASS") {
		t.Errorf("/readyz with a wrong password: %d %q; want 503 naming the instance and Redis's WRONGPASS", code, body)
	}
}

// TestReadyzSaysARedisWantsTLS: a Redis that requires TLS closes a plain connection
// without a reply, which the client reports as a bare EOF. /readyz said "no PING reply
// yet", as for a Redis that is down, and the log line "EOF", neither saying that the fix
// is a rediss:// URL; both now do.
func TestReadyzSaysARedisWantsTLS(t *testing.T) {
	t.Parallel()
	ca := faulttest.NewCA(t)
	kp := ca.Issue(t, "redis")
	srv := redistest.StartWith(t, redistest.Options{TLS: &redistest.TLS{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: ca.CAFile, RootCAs: ca.Pool}})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var logs faulttest.Buffer
	mux := oneRedisReadiness(t, c, "redis://"+srv.Addr(), &logs)
	// Until both say it: the probe records the refusal (/readyz) before it logs the line.
	code, body := readyzUntil(mux, 20*time.Second, func(body string) bool {
		return strings.Contains(body, "rediss://") && strings.Contains(logs.String(), "rediss://")
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis://"+srv.Addr()) || !strings.Contains(body, "rediss://") {
		t.Errorf("/readyz with a plain connection to a TLS Redis: %d %q; want 503 naming the instance and rediss://", code, body)
	}
	if !strings.Contains(logs.String(), "rediss://") {
		t.Errorf("the warning does not say to use rediss://:\n%s", logs.String())
	}
}

// TestReadyzSaysRedisTLSFails: a rediss:// Redis that answers every connection but whose
// TLS handshake fails on a certificate (its own, which GATE_REDIS_TLS_CA_FILE does not
// sign, as after a CA rotation done out of order; or the gate's, which it refuses) was
// named in /readyz as giving "no PING reply yet", as a Redis that is down, sending an
// operator to the network; /readyz now names the TLS failure.
func TestReadyzSaysRedisTLSFails(t *testing.T) {
	t.Parallel()
	ca, other := faulttest.NewCA(t), faulttest.NewCA(t)
	kp := ca.Issue(t, "redis")
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
		want string
	}{
		{"server certificate of another CA", func(t *testing.T) string {
			srv := redistest.StartWith(t, redistest.Options{TLS: &redistest.TLS{CertFile: kp.CertFile, KeyFile: kp.KeyFile, CAFile: ca.CAFile, RootCAs: ca.Pool}})
			return srv.Addr()
		}, "GATE_REDIS_TLS_CA_FILE"},
		{"client certificate required", func(t *testing.T) string {
			return ca.ClientCertRequired(t, kp)
		}, "certificate required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := tc.addr(t)
			trusted := other.CAFile
			if tc.want != "GATE_REDIS_TLS_CA_FILE" {
				trusted = ca.CAFile
			}
			rl, err := tlsreload.New(tlsreload.Files{CAFile: trusted, CAVar: "GATE_REDIS_TLS_CA_FILE"}, tlsreload.Options{Target: "redis"})
			if err != nil {
				t.Fatal(err)
			}
			cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "localhost"}
			rl.Apply(cfg)
			c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			mux := oneRedisReadiness(t, c, "rediss://"+addr, io.Discard)
			code, body := readyzUntil(mux, 10*time.Second, func(body string) bool { return strings.Contains(body, tc.want) })
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis rediss://"+addr+" fails the TLS handshake: ") || !strings.Contains(body, tc.want) {
				t.Errorf("/readyz: %d %q; want 503 naming the instance, the TLS handshake and %q", code, body, tc.want)
			}
		})
	}
}

// oneRedisReadiness runs, until t ends, the Readiness of one Redis instance c, named
// url in its reasons, logging to log, and returns its mux.
func oneRedisReadiness(t *testing.T, c redis.UniversalClient, url string, log io.Writer) http.Handler {
	t.Helper()
	r := &Readiness{kafka: func() []string { return nil }, clients: []redis.UniversalClient{c}, urls: []string{url},
		timeout: 10 * time.Second, up: make([]bool, 1), log: slog.New(slog.NewTextHandler(log, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return NewMux(prometheus.NewRegistry(), r, nil)
}

// readyzUntil asks mux's /readyz every 10 ms until done holds for its body or timeout
// passes, and returns the last answer.
func readyzUntil(mux http.Handler, timeout time.Duration, done func(body string) bool) (code int, body string) {
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); <-poll.C {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if code, body = rec.Code, rec.Body.String(); done(body) {
			break
		}
	}
	return code, body
}

// TestReadyzSaysARedisHasNoTLS: a rediss:// URL to a Redis without TLS gets no reply (the
// Redis takes the handshake's first bytes for a command that has not ended, and waits),
// and /readyz said "no PING reply yet", as for a Redis that is down; the log line said
// "context deadline exceeded". Both now say the Redis answers in plain text, and that its
// URL is redis://.
func TestReadyzSaysARedisHasNoTLS(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	var logs faulttest.Buffer
	r := &Readiness{kafka: func() []string { return nil }, clients: []redis.UniversalClient{c}, urls: []string{"rediss://" + srv.Addr()},
		timeout: time.Second, up: make([]bool, 1), log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	mux := NewMux(prometheus.NewRegistry(), r, nil)
	code, body := readyzUntil(mux, 20*time.Second, func(body string) bool {
		return strings.Contains(body, "redis://, not rediss://") && strings.Contains(logs.String(), "redis://, not rediss://")
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "rediss://"+srv.Addr()) || !strings.Contains(body, "redis://, not rediss://") {
		t.Errorf("/readyz with a TLS connection to a plain Redis: %d %q; want 503 naming the instance and redis://", code, body)
	}
}
