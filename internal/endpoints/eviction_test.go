package endpoints

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/faulttest"
	"github.com/capturegate/gate/internal/redistest"
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

func TestEvictionOf(t *testing.T) {
	t.Parallel()
	info := "# Memory\r\nused_memory:1\r\nmaxmemory:104857600\r\nmaxmemory_human:100.00M\r\nmaxmemory_policy:volatile-ttl\r\n"
	if p, m := evictionOf(info); p != "volatile-ttl" || m != "104857600" {
		t.Errorf("evictionOf = %q, %q", p, m)
	}
}
