package faulttest_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
)

// secureRun starts a gate with vars against c, sends n records through it, checks
// they all arrive, then greps its logs, `gate env` and /metrics for every secret.
func secureRun(t *testing.T, c *kfake.Cluster, clientOpts []kgo.Opt, vars map[string]string, secrets ...string) *faulttest.Gate {
	t.Helper()
	base := map[string]string{
		"GATE_KAFKA_BROKERS":   strings.Join(c.ListenAddrs(), ","),
		"GATE_HTTP_ADDR":       "127.0.0.1:0",
		"GATE_COMMIT_INTERVAL": "100ms",
		"GATE_TICK_INTERVAL":   "100ms",
		"GATE_SYNC_INTERVAL":   "1s",
		"GATE_WINDOW":          "10s",
	}
	for k, v := range vars {
		base[k] = v
	}
	g := faulttest.StartGate(t, gateBin, "secure", base)
	faulttest.WaitFor(t, 30*time.Second, "/readyz 200", func() bool {
		code, _ := g.Get(t, "/readyz")
		return code == http.StatusOK
	})
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, clientOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 50
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = inputRecord(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
	faulttest.WaitFor(t, 30*time.Second, "every record routed and committed", func() bool {
		gi := c.GroupInfo("capture-gate")
		if gi == nil {
			return false
		}
		var sum int64
		for _, gc := range gi.Commits[inTopic] {
			sum += gc.Offset
		}
		return sum == n
	})
	rep := faulttest.Conservation(t, c, clientOpts, inTopic, outTopics...)
	recordFigures(t.Name(), rep)
	if !rep.OK() || rep.Inputs != n {
		t.Errorf("conservation: %s", rep)
	}
	_, metrics := g.Get(t, "/metrics")
	env := exec.Command(gateBin, "env")
	env.Env = faulttest.Env(base)
	envOut, err := env.CombinedOutput()
	if err != nil {
		t.Fatalf("gate env: %v", err)
	}
	g.Term(t, 30*time.Second)
	for _, s := range secrets {
		for what, text := range map[string]string{"logs": g.Logs(), "gate env": string(envOut), "/metrics": metrics} {
			if strings.Contains(text, s) {
				t.Errorf("secret %q appears in %s", s, what)
			}
		}
	}
	return g
}

// TestKafkaTLSAndSASL: the gate reaches a broker that requires TLS (with the CA the test
// made, or mutual TLS), SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), or both.
func TestKafkaTLSAndSASL(t *testing.T) {
	needGate(t)
	t.Parallel()
	ca := faulttest.NewCA(t)
	server := ca.Issue(t, "broker")
	client := ca.Issue(t, "gate")
	rs := redistest.Start(t)
	for _, tc := range []struct {
		name      string
		tls, mtls bool
		mechanism string
	}{
		{name: "tls", tls: true},
		{name: "mutual-tls", tls: true, mtls: true},
		{name: "tls+plain", tls: true, mechanism: "plain"},
		{name: "tls+scram-sha-256", tls: true, mechanism: "scram-sha-256"},
		{name: "tls+scram-sha-512", tls: true, mechanism: "scram-sha-512"},
		{name: "scram-sha-512 without tls", mechanism: "scram-sha-512"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			user, pass := "gate-user", "kafka-pw-"+strconv.FormatInt(time.Now().UnixNano(), 36)
			opts := []kfake.Opt{kfake.SeedTopics(2, inTopic), kfake.SeedTopics(1, outTopics...)}
			var clientOpts []kgo.Opt
			vars := map[string]string{"GATE_REDIS_URLS": rs.URL(), "GATE_REDIS_PREFIX": strings.NewReplacer(" ", "", "+", "-").Replace(tc.name)}
			if tc.tls {
				scfg := &tls.Config{Certificates: []tls.Certificate{server.TLS}, MinVersion: tls.VersionTLS12}
				ccfg := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
				vars["GATE_KAFKA_TLS_CA_FILE"] = ca.CAFile
				if tc.mtls {
					scfg.ClientAuth = tls.RequireAndVerifyClientCert
					scfg.ClientCAs = ca.Pool
					ccfg.Certificates = []tls.Certificate{client.TLS}
					vars["GATE_KAFKA_TLS_CERT_FILE"] = client.CertFile
					vars["GATE_KAFKA_TLS_KEY_FILE"] = client.KeyFile
				}
				opts = append(opts, kfake.TLS(scfg))
				clientOpts = append(clientOpts, kgo.DialTLSConfig(ccfg))
			}
			if tc.mechanism != "" {
				var m sasl.Mechanism
				method := map[string]string{"plain": "PLAIN", "scram-sha-256": "SCRAM-SHA-256", "scram-sha-512": "SCRAM-SHA-512"}[tc.mechanism]
				switch tc.mechanism {
				case "plain":
					m = plain.Auth{User: user, Pass: pass}.AsMechanism()
				case "scram-sha-256":
					m = scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
				default:
					m = scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
				}
				opts = append(opts, kfake.EnableSASL(), kfake.Superuser(method, user, pass))
				clientOpts = append(clientOpts, kgo.SASL(m))
				vars["GATE_KAFKA_SASL_MECHANISM"] = tc.mechanism
				vars["GATE_KAFKA_SASL_USERNAME"] = user
				vars["GATE_KAFKA_SASL_PASSWORD"] = pass
			}
			c := faulttest.NewCluster(t, opts...)
			secureRun(t, c, clientOpts, vars, pass)
		})
	}
}

// TestRedisPasswordAndTLS: the gate writes its counts to a Redis that requires a
// password (requirepass, or an ACL user) or TLS, given as redis://[user]:pass@ or
// rediss:// URLs, the server's certificate checked against the test's own CA through
// GATE_REDIS_TLS_CA_FILE.
func TestRedisPasswordAndTLS(t *testing.T) {
	needGate(t)
	t.Parallel()
	ca := faulttest.NewCA(t)
	server := ca.Issue(t, "redis")
	for _, tc := range []struct {
		name string
		tls  bool
		user bool
	}{
		{name: "requirepass"},
		{name: "acl-user", user: true},
		{name: "tls", tls: true},
		{name: "tls+acl-user", tls: true, user: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pass := "redis-pw-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			cfg := faulttest.RedisConfig{Password: pass}
			user, urlPass := "", pass
			if tc.user {
				cfg.User, cfg.UserPassword = "gate", pass+"-user"
				user, urlPass = "gate", pass+"-user"
			}
			if tc.tls {
				cfg.TLS, cfg.CA = &server, ca
			}
			r := faulttest.StartRedis(t, cfg)
			c := faulttest.NewCluster(t, kfake.SeedTopics(2, inTopic), kfake.SeedTopics(1, outTopics...))
			vars := map[string]string{"GATE_REDIS_URLS": r.URL(user, urlPass)}
			if tc.tls {
				vars["GATE_REDIS_TLS_CA_FILE"] = ca.CAFile
			}
			secureRun(t, c, nil, vars, pass, urlPass)
			rc := r.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if keys, err := rc.Keys(ctx, "gate:*").Result(); err != nil || len(keys) == 0 {
				t.Errorf("no counts in Redis: %v %v", keys, err)
			}
		})
	}
}

// TestHTTPExposesOnlyHealthAndMetrics: /metrics, /healthz, /readyz and the read-only team
// view answer; any other path is 404 (no pprof, no expvar, no index); other methods are
// refused. With GATE_TEAM_API=false the team view is gone too.
func TestHTTPExposesOnlyHealthAndMetrics(t *testing.T) {
	needGate(t)
	t.Parallel()
	for _, teamAPI := range []bool{true, false} {
		t.Run(fmt.Sprintf("team_api=%v", teamAPI), func(t *testing.T) {
			t.Parallel()
			httpExposure(t, teamAPI)
		})
	}
}

func httpExposure(t *testing.T, teamAPI bool) {
	c := faulttest.NewCluster(t, kfake.SeedTopics(1, inTopic), kfake.SeedTopics(1, outTopics...))
	rs := redistest.Start(t)
	g := faulttest.StartGate(t, gateBin, "http", map[string]string{
		"GATE_KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","), "GATE_REDIS_URLS": rs.URL(), "GATE_HTTP_ADDR": "127.0.0.1:0",
		"GATE_TEAM_API": strconv.FormatBool(teamAPI),
	})
	base := "http://" + g.HTTPAddr(t)
	faulttest.WaitFor(t, 30*time.Second, "/readyz 200", func() bool {
		code, _ := faulttest.HTTPDo(t, http.MethodGet, base+"/readyz")
		return code == http.StatusOK
	})
	get := []string{"/metrics", "/healthz", "/readyz"}
	notFound := []string{"/", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline", "/debug/vars",
		"/metrics/x", "/healthz/", "/admin", "/teams", "/config", "/env", "/%2e%2e/etc/passwd"}
	if teamAPI {
		get = append(get, "/v1/teams", "/v1/teams?top=5")
		// A team this gate has not seen is a 404 with a JSON reason.
		if code, body := faulttest.HTTPDo(t, http.MethodGet, base+"/v1/teams/nobody"); code != http.StatusNotFound || !strings.Contains(body, "not cached") {
			t.Errorf("GET /v1/teams/nobody: %d %.200s", code, body)
		}
	} else {
		notFound = append(notFound, "/v1/teams", "/v1/teams/nobody")
	}
	for _, p := range get {
		if code, _ := faulttest.HTTPDo(t, http.MethodGet, base+p); code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", p, code)
		}
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			if code, _ := faulttest.HTTPDo(t, m, base+p); code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", m, p, code)
			}
		}
	}
	for _, p := range notFound {
		if code, body := faulttest.HTTPDo(t, http.MethodGet, base+p); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404: %.200s", p, code, body)
		}
	}
}
