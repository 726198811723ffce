package config

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/redistest"
	"github.com/capturegate/gate/internal/tick"
)

// maxDuration is the longest time.Duration, as an operator who wants "never" may paste it.
const maxDuration = time.Duration(math.MaxInt64)

// No GATE_REDIS_KEY_TTL Load takes stops the counts reaching Redis. The tick sets each
// counter's TTL to it plus tick.KeyTTLMargin: within 30s of the longest duration the sum
// overflowed to a negative PX, Redis refused the write script on every tick, and every
// gate limited on its own counts alone, its errors naming no variable.
func TestKeyTTLNearTheMaximumIsWritten(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, v := range []string{maxDuration.String(), (maxDuration - 29*time.Second).String(), "8784h"} {
		env := map[string]string{"GATE_REDIS_KEY_TTL": v, "GATE_REDIS_URLS": srv.URL(), "GATE_REDIS_PREFIX": "ttl" + strings.ReplaceAll(v, ".", "")}
		c, err := loadMap(env)
		if err != nil {
			if !strings.Contains(err.Error(), `GATE_REDIS_KEY_TTL="`+v+`"`) {
				t.Errorf("GATE_REDIS_KEY_TTL=%s: refused by %v, which does not name it", v, err)
			}
			continue
		}
		lim, err := limit.New(c.LimitConfig(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = client.Close() })
		tk, err := tick.New(lim, []redis.UniversalClient{client}, c.SyncConfig(), nil, nil)
		if err != nil {
			t.Fatalf("GATE_REDIS_KEY_TTL=%s: tick.New: %v", v, err)
		}
		now := time.Now()
		lim.CheckAt(now, "team1", 1)
		if r := tk.Tick(context.Background()); r.Errors != 0 || r.Writes != 1 {
			t.Errorf("GATE_REDIS_KEY_TTL=%s: Load took it, and the tick writes nothing: %+v", v, r)
			continue
		}
		if ttl := client.PTTL(context.Background(), tick.Key(c.RedisPrefix, "team1", lim.Epoch(now))).Val(); ttl <= 0 {
			t.Errorf("GATE_REDIS_KEY_TTL=%s: the counter's TTL is %s", v, ttl)
		}
	}
}

// No GATE_SYNC_INTERVAL Load takes reads a low team on every tick: low and idle teams
// are read every 4 x the interval, and past a quarter of the longest duration (640511h)
// that product overflowed to a negative cadence, so that a gate told to read seldom read
// every such team on every tick.
func TestSyncIntervalNeverReadsLowTeamsEveryTick(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"15s", "8784h", "700000h", maxDuration.String()} {
		c, err := loadMap(map[string]string{"GATE_SYNC_INTERVAL": v, "GATE_THRESHOLD": "1000"})
		if err != nil {
			if !strings.Contains(err.Error(), `GATE_SYNC_INTERVAL="`+v+`"`) {
				t.Errorf("GATE_SYNC_INTERVAL=%s: refused by %v, which does not name it", v, err)
			}
			continue
		}
		l, err := limit.New(c.LimitConfig(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_700_000_040, 0) // a window's start
		l.CheckAt(now, "team1", 20)        // over the sync floor: read at once
		reads := 0
		for k := range 11 {
			at := now.Add(time.Duration(k) * time.Second)
			var s limit.Sweep
			l.Sweep(at, &s)
			for i := range s.Reads {
				l.ApplyRead(&s.Reads[i], 300, 0, at) // the fleet's count: a low team
			}
			reads += len(s.Reads)
		}
		if reads != 1 {
			t.Errorf("GATE_SYNC_INTERVAL=%s: a low team read %d times in 10 ticks after its first read, want none", v, reads-1)
		}
	}
}

// Every duration and number at its extremes (0, negative, 1ns, the longest duration and
// near it, past int64, NaN and infinities) is refused at start on one line naming its
// variable, or taken: then the parts of the gate build on it, and the shutdown bound
// logged at start is a duration, not an overflow.
func TestExtremeValuesRefusedOrTaken(t *testing.T) {
	t.Parallel()
	durations := []string{"0", "-1ns", "1ns", "8784h", "8785h", "2562047h", (maxDuration - 30*time.Second).String(), maxDuration.String(), "2562048h"}
	wholes := []string{"0", "-1", "1", "2147483648", "9223372036854775807", "9223372036854775808", "-9223372036854775809"}
	reals := []string{"0", "-0", "-1", "1e-320", "1", "1000", "NaN", "Inf", "-Inf", "1e309"}
	for _, f := range configFields() {
		v := reflect.ValueOf(Config{}).FieldByIndex(f.index)
		var values []string
		switch {
		case v.Type() == durationType || f.key == "GATE_DIVERT_HOLD":
			values = durations
		case v.CanInt():
			values = wholes
		case v.CanFloat():
			values = reals
		default:
			continue
		}
		for _, s := range values {
			env := map[string]string{f.key: s}
			c, err := loadMap(env)
			if err != nil {
				if msg := err.Error(); !strings.Contains(msg, f.key) || strings.Contains(msg, "\n") {
					t.Errorf("%s=%s: refused by %q, not on one line naming it", f.key, s, msg)
				}
				continue
			}
			if b := c.ShutdownBound(); b <= 0 {
				t.Errorf("%s=%s: the shutdown bound is %s", f.key, s, b)
			}
			lim, err := limit.New(c.LimitConfig(), nil, nil)
			if err != nil {
				t.Errorf("%s=%s: taken, limit.New: %v", f.key, s, err)
				continue
			}
			client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
			if _, err := tick.New(lim, []redis.UniversalClient{client}, c.SyncConfig(), nil, nil); err != nil {
				t.Errorf("%s=%s: taken, tick.New: %v", f.key, s, err)
			}
			if _, err := overrides.New(c.OverridesConfig(), lim, client, nil, nil); err != nil {
				t.Errorf("%s=%s: taken, overrides.New: %v", f.key, s, err)
			}
			_ = client.Close()
			cc, err := c.ConsumeConfig(Reload{})
			if err != nil {
				t.Errorf("%s=%s: taken, ConsumeConfig: %v", f.key, s, err)
				continue
			}
			cons, err := consume.New(cc, nil, nil, nil, nil)
			if err != nil {
				t.Errorf("%s=%s: taken, consume.New: %v", f.key, s, err)
				continue
			}
			cons.Close()
		}
	}
}
