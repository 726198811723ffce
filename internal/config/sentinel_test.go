package config

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/redistest"
)

// sentinelEnv is a sentinel-mode environment for set, with the data nodes' password and
// the extra variables given.
func sentinelEnv(set *redistest.SentinelSet, extra map[string]string) map[string]string {
	env := map[string]string{
		"GATE_REDIS_MODE":            "sentinel",
		"GATE_REDIS_SENTINEL_MASTER": set.Master,
		"GATE_REDIS_SENTINEL_ADDRS":  strings.Join(set.SentinelAddrs(), ","),
		// The host is only a TLS name in sentinel mode: never dialed.
		"GATE_REDIS_URLS":     "redis://127.0.0.1:6379/0",
		"GATE_REDIS_PASSWORD": "data-pw",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// pingSentinel dials env's sentinel-mode client and returns its first PING's error.
func pingSentinel(t *testing.T, env map[string]string) error {
	t.Helper()
	c, err := loadMap(env)
	if err != nil {
		t.Fatalf("loading %v: %v", env, err)
	}
	o, err := c.RedisOptions()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := c.DialRedis(o, Reload{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, x := range cs {
			_ = x.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cs[0].Ping(ctx).Err()
}

// TestSentinelPassword: sentinels that require a password of their own (Bitnami's chart
// sets one by default) are reached with GATE_REDIS_SENTINEL_PASSWORD, apart from the
// primary's GATE_REDIS_PASSWORD. Without it, or with a wrong one, the error names the
// variable, is a Redis error (so /readyz shows it) and never holds a password.
func TestSentinelPassword(t *testing.T) {
	t.Parallel()
	set := redistest.StartSentinelWith(t, 0, 1, redistest.SentinelOptions{Password: "data-pw", SentinelPassword: "sentinel-pw"})

	if err := pingSentinel(t, sentinelEnv(set, map[string]string{"GATE_REDIS_SENTINEL_PASSWORD": "sentinel-pw"})); err != nil {
		t.Fatalf("PING through sentinels that require a password, with GATE_REDIS_SENTINEL_PASSWORD: %v", err)
	}

	for name, extra := range map[string]map[string]string{
		"none":  nil,
		"wrong": {"GATE_REDIS_SENTINEL_PASSWORD": "not-it"},
	} {
		err := pingSentinel(t, sentinelEnv(set, extra))
		if err == nil {
			t.Fatalf("%s sentinel password: PING succeeded", name)
		}
		msg := err.Error()
		if !strings.Contains(msg, "GATE_REDIS_SENTINEL_PASSWORD") {
			t.Errorf("%s sentinel password: the error does not name the variable: %v", name, err)
		}
		if _, ok := errors.AsType[redis.Error](err); !ok {
			t.Errorf("%s sentinel password: %T is not a redis.Error, so /readyz would not show it: %v", name, err, err)
		} else if re, _ := errors.AsType[redis.Error](err); !strings.Contains(re.Error(), "GATE_REDIS_SENTINEL_PASSWORD") {
			t.Errorf("%s sentinel password: the Redis error /readyz shows does not name the variable: %v", name, re)
		}
		for _, pw := range []string{"not-it", "sentinel-pw", "data-pw"} {
			if strings.Contains(msg, pw) {
				t.Errorf("%s sentinel password: the error holds a password: %v", name, err)
			}
		}
	}
}

// TestSentinelCredentialsNeedSentinelMode: the sentinel credentials are refused outside
// sentinel mode, where they would be ignored, and a user name needs a password, as with
// GATE_REDIS_USERNAME.
func TestSentinelCredentialsNeedSentinelMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GATE_REDIS_SENTINEL_PASSWORD": "pw"}, "GATE_REDIS_SENTINEL_PASSWORD"},
		{map[string]string{"GATE_REDIS_SENTINEL_USERNAME": "u"}, "GATE_REDIS_SENTINEL_USERNAME"},
		{map[string]string{"GATE_REDIS_MODE": "sentinel", "GATE_REDIS_SENTINEL_MASTER": "m", "GATE_REDIS_SENTINEL_ADDRS": "s:26379",
			"GATE_REDIS_SENTINEL_USERNAME": "u"}, "GATE_REDIS_SENTINEL_USERNAME"},
	} {
		_, err := loadMap(tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want one naming %s", tc.env, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("%v: the error holds the password: %v", tc.env, err)
		}
	}
}

// TestSentinelMasterUnknown: sentinels that answer but monitor no master by the name in
// GATE_REDIS_SENTINEL_MASTER (a typo, or the chart's name, such as Bitnami's mymaster,
// not the one given) kept the gate not ready with /readyz saying "refuses PING: redis:
// nil" and the log "all sentinels specified in configuration are unreachable: redis:
// nil", which sends the operator to the network. The error names the variable and the
// name given, and is a Redis error, so /readyz shows it.
func TestSentinelMasterUnknown(t *testing.T) {
	t.Parallel()
	set := redistest.StartSentinel(t, 0, 2)
	err := pingSentinel(t, sentinelEnv(set, map[string]string{"GATE_REDIS_SENTINEL_MASTER": "not-the-master", "GATE_REDIS_PASSWORD": ""}))
	if err == nil {
		t.Fatal("PING through sentinels that know no such master succeeded")
	}
	re, ok := errors.AsType[redis.Error](err)
	if !ok {
		t.Fatalf("%T is not a redis.Error, so /readyz would not show it: %v", err, err)
	}
	for _, want := range []string{"GATE_REDIS_SENTINEL_MASTER", `"not-the-master"`} {
		if !strings.Contains(re.Error(), want) {
			t.Errorf("the Redis error /readyz shows does not name %s: %v", want, re)
		}
	}
	// The master the sentinels do know is found as before.
	if err := pingSentinel(t, sentinelEnv(set, map[string]string{"GATE_REDIS_PASSWORD": ""})); err != nil {
		t.Fatalf("PING through the sentinels with the right master name: %v", err)
	}
}
