package main

import (
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capturegate/gate/internal/config"
)

// The header's third gate listens where neither of the demo's gates does. It was always
// 127.0.0.1:8080, gate serve's default: with -http-addr 127.0.0.1:8079 gate 2 is on 8080
// (or gate 1 with -http-addr 127.0.0.1:8080), and the command docs/demo.md says to paste
// failed at start ("listen tcp 127.0.0.1:8080: bind: address already in use").
func TestDevThirdGateListensApartFromTheDemosGates(t *testing.T) {
	var cfg config.Config
	cfg.TeamAPI, cfg.SyncInterval, cfg.RedisPrefix = true, 5*time.Second, "gate-dev"
	third := regexp.MustCompile(`a third gate in the group: .* GATE_HTTP_ADDR=(\S+) bin/gate serve\n`)
	for _, tc := range []struct {
		gates []string
		want  string
	}{
		{[]string{"127.0.0.1:8081", "127.0.0.1:8082"}, "127.0.0.1:8080"}, // the default: unchanged
		{[]string{"127.0.0.1:8079", "127.0.0.1:8080"}, "127.0.0.1:8081"},
		{[]string{"127.0.0.1:8080", "127.0.0.1:8081"}, "127.0.0.1:8082"},
		{[]string{"0.0.0.0:8080", "0.0.0.0:8081"}, "127.0.0.1:8082"},
		{[]string{"127.0.0.1:41000", "127.0.0.1:35000"}, "127.0.0.1:8080"}, // port 0 picked these
	} {
		var b strings.Builder
		devHeaderHTTP(&b, cfg, devPlaces{broker: "127.0.0.1:19092", redisURLs: "redis://127.0.0.1:6379/0", http: tc.gates, rulesFile: "/tmp/r.yaml"})
		m := third.FindStringSubmatch(b.String())
		if m == nil {
			t.Fatalf("gates on %v: no third gate line in:\n%s", tc.gates, b.String())
		}
		_, port, _ := net.SplitHostPort(m[1])
		taken := slices.ContainsFunc(tc.gates, func(a string) bool { _, p, _ := net.SplitHostPort(a); return p == port })
		if m[1] != tc.want || taken {
			t.Errorf("gates on %v: the third gate's GATE_HTTP_ADDR=%s, want %s (a port no demo gate has)", tc.gates, m[1], tc.want)
		}
	}
}
