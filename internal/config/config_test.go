package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capturegate/gate/internal/consume"
	"github.com/capturegate/gate/internal/limit"
	"github.com/capturegate/gate/internal/overrides"
	"github.com/capturegate/gate/internal/route"
	"github.com/capturegate/gate/internal/rules"
	"github.com/capturegate/gate/internal/spike"
	"github.com/capturegate/gate/internal/tick"
)

// getenvFrom is the injected environment of a test: a map, so tests run in parallel
// without touching the process environment.
func getenvFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// withEnv is base with more laid over it.
func withEnv(base map[string]string, more map[string]string) map[string]string {
	out := maps.Clone(base)
	maps.Copy(out, more)
	return out
}

// loadMap loads a Config from env as if env were the whole environment.
func loadMap(env map[string]string) (Config, error) {
	return Load(getenvFrom(env), slices.Collect(maps.Keys(env)))
}

// structKeys lists the variables of Config straight from its tags, independently of the
// code under test, so that a new field cannot be forgotten by a test.
func structKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if f.Anonymous {
			continue // a part of Config (Kafka, ...), whose fields follow
		}
		name, ok := f.Tag.Lookup("envconfig")
		if !ok || name == "" {
			t.Fatalf("Config.%s has no envconfig tag", f.Name)
		}
		keys = append(keys, "GATE_"+name)
	}
	return keys
}

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	got, err := loadMap(nil)
	if err != nil {
		t.Fatalf("loading defaults: %v", err)
	}
	kf, err := route.ParseKeyFrom("json:team_id")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Kafka: Kafka{
			KafkaBrokers:          brokerList{"127.0.0.1:9092"},
			InputTopic:            "events",
			AcceptedTopic:         "events_accepted",
			OverflowTopic:         "events_overflow",
			DeadLetterTopic:       "events_dead_letter",
			GroupID:               "capture-gate",
			KafkaGroupProtocol:    "classic",
			KafkaStartOffset:      "earliest",
			KeyFrom:               keyFrom{kf},
			MaxKeyBytes:           256,
			Cost:                  cost{route.CostEvents},
			MaxPollRecords:        consume.DefaultMaxPollRecords,
			CommitInterval:        consume.DefaultCommitInterval,
			ProduceRetries:        consume.DefaultProduceRetries,
			MaxBufferedRecords:    consume.DefaultMaxBufferedRecords,
			MaxBufferedBytes:      consume.DefaultMaxBufferedBytes,
			KafkaMaxMessageBytes:  consume.DefaultMaxMessageBytes,
			RevokeTimeout:         consume.DefaultRevokeTimeout,
			ShutdownTimeout:       consume.DefaultShutdownTimeout,
			KafkaClientID:         "capture-gate",
			KafkaSessionTimeout:   45 * time.Second,
			KafkaRebalanceTimeout: time.Minute,
			KafkaFetchMaxBytes:    50 << 20,
			KafkaFetchMaxWait:     500 * time.Millisecond,
			KafkaSASLMechanism:    "none",
			Delivery:              "at-least-once",
			OnUndeliverable:       "stop",
			StallNotReady:         2 * time.Minute,
			StallRestart:          10 * time.Minute,
			OnDataLoss:            "continue",
			TransactionTimeout:    90 * time.Second,
			TransactionInterval:   consume.DefaultTransactionInterval,
			TransactionMaxRecords: consume.DefaultTransactionMaxRecords,
			OutcomesInterval:      consume.DefaultOutcomesInterval,
			OutcomesMaxRows:       consume.DefaultOutcomesMaxRows,
			OutcomesFlushInterval: consume.DefaultOutcomesFlushInterval,
		},
		Limiter: Limiter{
			LimitMode:           limit.Divert,
			DivertRelease:       0.8,
			Window:              60 * time.Second,
			Threshold:           1_000_000,
			ThresholdMode:       "static",
			AdaptiveFactor:      spike.DefaultFactor,
			AdaptiveFloor:       spike.DefaultFloor,
			AdaptiveHalfLife:    spike.DefaultLevelHalfLife,
			AdaptiveMaxSpike:    spike.DefaultMaxSpike,
			AdaptiveMinHistory:  spike.DefaultMinHistory,
			Limits:              nil,
			SyncInterval:        15 * time.Second,
			OverridesRefresh:    time.Minute,
			OverridesMaxEntries: 1_000_000,
			HotEveryTick:        true,
			PendingReadShare:    0.05,
			SyncFloor:           0.01,
			CacheCapacity:       300_000,
			CacheTTL:            600 * time.Second,
			CacheIdleTimeout:    300 * time.Second,
			Clock:               clockSetting{limit.WallClock},
			MaxEventAge:         limit.DefaultMaxEventAge,
		},
		Redis: Redis{
			TickInterval:        time.Second,
			RedisMode:           "standalone",
			RedisSentinelMaster: "",
			RedisSentinelAddrs:  nil,
			RedisURLs:           redisURLs{"redis://127.0.0.1:6379/0"},
			RedisPrefix:         "gate",
			RedisReadTimeout:    250 * time.Millisecond,
			RedisWriteTimeout:   250 * time.Millisecond,
			RedisDialTimeout:    time.Second,
			KeysPerCommand:      200,
			KeysPerTick:         500_000,
			MaxPendingWrites:    1_000_000,
			MaxReadsPerTick:     100_000,
		},
		Process: Process{
			HTTPAddr:  ":8080",
			TeamAPI:   false,       // off: it lists team names and rates to whoever reaches the port
			LogLevel:  logLevel(0), // slog.LevelInfo
			LogFormat: "json",
			// Room for what the Go runtime does not count (serve's memory limit).
			MemoryLimitRatio: 0.9,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	// The library defaults agree with ours, so the README's defaults are the real ones.
	if want.Window != limit.DefaultWindow || want.Threshold != limit.DefaultThreshold ||
		want.SyncInterval != limit.DefaultSyncInterval || want.CacheCapacity != limit.DefaultCapacity ||
		want.TickInterval != tick.DefaultTickInterval || want.KeysPerTick != tick.DefaultKeysPerTick ||
		want.RedisReadTimeout != tick.DefaultReadTimeout || want.RedisDialTimeout != tick.DefaultDialTimeout ||
		want.OverridesRefresh != overrides.DefaultInterval || want.OverridesMaxEntries != overrides.DefaultMaxEntries {
		t.Errorf("a default here differs from the library's")
	}
}

// envconfigChild makes this test binary, re-executed by TestEnvconfigAgrees with an
// environment of the test's making, run envconfig.Process on that environment.
var envconfigChild = flag.Bool("envconfig-child", false, "run by TestEnvconfigAgrees: compare envconfig.Process with Load on this process's environment")

// envconfigAgreed starts the line a child prints once it has compared.
const envconfigAgreed = "envconfig.Process and Load agree:"

// The struct must stay a valid envconfig specification with the same meaning: envconfig
// derives the same names, and envconfig.Process fills in the same defaults and reads the
// same values as Load.
//
// envconfig.Process reads only the process environment (the GATE_ names and, failing
// each, the name without GATE_: a WINDOW in a developer's shell would be read), so it
// cannot be handed one: the test binary is run again, as a child, with exactly the
// variables of each case and nothing else, and compares there. This process's own
// environment is never read, so nothing in it can skip or disturb the comparison.
func TestEnvconfigAgrees(t *testing.T) {
	if *envconfigChild {
		compareEnvconfigHere(t)
		return
	}
	t.Parallel()
	var buf bytes.Buffer
	tmpl := template.Must(template.New("keys").Parse("{{range .}}{{.Key}}\n{{end}}"))
	if err := envconfig.Usaget(envPrefix, &Config{}, &buf, tmpl); err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, f := range configFields() {
		ours = append(ours, f.key)
	}
	if got := strings.Fields(buf.String()); !slices.Equal(got, ours) {
		t.Errorf("envconfig names %v, Load names %v", got, ours)
	}

	for _, tt := range []struct {
		name string
		env  map[string]string
	}{
		{"defaults", nil}, // an empty environment: every default
		{"values", map[string]string{
			"GATE_WINDOW": "30s", "GATE_THRESHOLD": "5000", "GATE_LIMIT_MODE": "cap",
			"GATE_KAFKA_BROKERS": "a:9092,b:9092", "GATE_OVERRIDES": "team-a=50,team-b=7",
			"GATE_REDIS_URLS": "redis://r:6379/1", "GATE_KEY_FROM": "json:project",
			"GATE_LOG_LEVEL": "debug", "GATE_TEAM_API": "true", "GATE_MAX_KEY_BYTES": "64",
			"GATE_PENDING_READ_SHARE": "0.1", "GATE_DELIVERY": "exactly-once",
			"GATE_TRANSACTIONAL_ID": "gate-0",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := loadMap(tt.env); err != nil {
				t.Fatalf("the case does not load: %v", err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestEnvconfigAgrees$", "-test.count=1", "-envconfig-child")
			cmd.Env = []string{} // not nil, which would be this process's environment
			for _, k := range slices.Sorted(maps.Keys(tt.env)) {
				cmd.Env = append(cmd.Env, k+"="+tt.env[k])
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the child: %v\n%s", err, out)
			}
			want := fmt.Sprintf("%s %d variables set, %d read", envconfigAgreed, len(tt.env), len(ours))
			if !strings.Contains(string(out), want) {
				t.Errorf("the child did not say %q; it said:\n%s", want, out)
			}
		})
	}
}

// compareEnvconfigHere is TestEnvconfigAgrees's child: it loads Config from this
// process's environment, which its parent built, by envconfig.Process and by Load, as
// the gate does (Names, os.Getenv), and says how many variables it saw.
func compareEnvconfigHere(t *testing.T) {
	var viaEnvconfig Config
	if err := envconfig.Process(envPrefix, &viaEnvconfig); err != nil {
		t.Fatalf("envconfig.Process: %v", err)
	}
	viaLoad, err := Load(os.Getenv, Names(os.Environ(), os.Getenv))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	e, l := reflect.ValueOf(viaEnvconfig), reflect.ValueOf(viaLoad)
	for _, f := range configFields() {
		if a, b := e.FieldByIndex(f.index).Interface(), l.FieldByIndex(f.index).Interface(); !reflect.DeepEqual(a, b) {
			t.Errorf("%s with %q set: envconfig.Process %+v, Load %+v", f.key, os.Environ(), a, b)
		}
	}
	if !reflect.DeepEqual(viaEnvconfig, viaLoad) {
		t.Fatalf("envconfig.Process and Load differ on %q:\nenvconfig  %+v\nLoad       %+v", os.Environ(), viaEnvconfig, viaLoad)
	}
	fmt.Printf("%s %d variables set, %d read\n", envconfigAgreed, len(os.Environ()), len(configFields()))
}

func TestEveryFieldDocumented(t *testing.T) {
	t.Parallel()
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if f.Anonymous {
			continue // a part of Config (Kafka, ...), whose fields follow
		}
		def, ok := f.Tag.Lookup("default")
		if !ok {
			t.Errorf("Config.%s: no default tag", f.Name)
		}
		desc := f.Tag.Get("desc")
		switch {
		case desc == "":
			t.Errorf("Config.%s: no desc tag", f.Name)
		case def == "" && !strings.Contains(desc, "(default none)"):
			t.Errorf("Config.%s: desc should say (default none): %q", f.Name, desc)
		case def != "" && !strings.Contains(desc, "(default "+def):
			t.Errorf("Config.%s: desc should state the default %q: %q", f.Name, def, desc)
		case strings.ContainsAny(desc, "\n|"):
			t.Errorf("Config.%s: desc must fit one Markdown table cell: %q", f.Name, desc)
		}
	}
}

func TestLoadConfigValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c Config)
	}{
		{"mode cap", map[string]string{"GATE_LIMIT_MODE": "cap"}, func(t *testing.T, c Config) {
			if c.LimitMode != limit.Cap {
				t.Errorf("mode %v", c.LimitMode)
			}
		}},
		{"mode upper case", map[string]string{"GATE_LIMIT_MODE": "CAP"}, func(t *testing.T, c Config) {
			if c.LimitMode != limit.Cap {
				t.Errorf("mode %v", c.LimitMode)
			}
		}},
		{"overrides", map[string]string{"GATE_OVERRIDES": "team-a=5000, team-b = 200000,c=1"}, func(t *testing.T, c Config) {
			want := overrideList{"team-a": 5000, "team-b": 200000, "c": 1}
			if !maps.Equal(c.Overrides, want) {
				t.Errorf("overrides %v, want %v", c.Overrides, want)
			}
			if got := c.LimitConfig().Overrides; !maps.Equal(got, map[string]int64(want)) {
				t.Errorf("limit overrides %v", got)
			}
		}},
		// A key holding '=' (a base64 id's padding) is one the gate builds and gate overrides
		// set takes: its limit is after the last '=', a limit holding none.
		{"override of a key holding =", map[string]string{"GATE_OVERRIDES": "dGVhbQ===5000,a=b=7"}, func(t *testing.T, c Config) {
			if want := (overrideList{"dGVhbQ==": 5000, "a=b": 7}); !maps.Equal(c.Overrides, want) {
				t.Errorf("overrides %v, want %v", c.Overrides, want)
			}
		}},
		{"override at the maximum", map[string]string{"GATE_OVERRIDES": "big=" + strconv.FormatInt(limit.MaxThreshold, 10)}, func(t *testing.T, c Config) {
			if c.Overrides["big"] != limit.MaxThreshold {
				t.Errorf("overrides %v", c.Overrides)
			}
		}},
		{"several redis urls", map[string]string{"GATE_REDIS_URLS": "redis://a:6379/0, rediss://:pw@b:6380/2,redis://a:6379/1"}, func(t *testing.T, c Config) {
			if len(c.RedisURLs) != 3 || c.RedisURLs[1] != "rediss://:pw@b:6380/2" {
				t.Errorf("urls %q", []string(c.RedisURLs))
			}
			if s := c.RedisURLs.String(); strings.Contains(s, "pw") {
				t.Errorf("String() leaks the password: %s", s)
			}
		}},
		{"pending read share disabled", map[string]string{"GATE_PENDING_READ_SHARE": "-1"}, func(t *testing.T, c Config) {
			if c.PendingReadShare != -1 {
				t.Errorf("share %g", c.PendingReadShare)
			}
		}},
		{"divert hold unset: one window", map[string]string{}, func(t *testing.T, c Config) {
			if lc := c.LimitConfig(); lc.DivertHold != 0 || lc.DivertRelease != 0.8 {
				t.Errorf("hold %s release %g, want 0 (the window) and 0.8", lc.DivertHold, lc.DivertRelease)
			}
		}},
		{"divert hold 0: none", map[string]string{"GATE_DIVERT_HOLD": "0", "GATE_DIVERT_RELEASE": "1"}, func(t *testing.T, c Config) {
			if lc := c.LimitConfig(); lc.DivertHold >= 0 || lc.DivertRelease != 1 {
				t.Errorf("hold %s release %g, want negative (none) and 1", lc.DivertHold, lc.DivertRelease)
			}
		}},
		{"divert hold set", map[string]string{"GATE_DIVERT_HOLD": "90s", "GATE_DIVERT_RELEASE": "0.5"}, func(t *testing.T, c Config) {
			if lc := c.LimitConfig(); lc.DivertHold != 90*time.Second || lc.DivertRelease != 0.5 {
				t.Errorf("hold %s release %g, want 90s and 0.5", lc.DivertHold, lc.DivertRelease)
			}
		}},
		{"threshold mode static: no learner", map[string]string{}, func(t *testing.T, c Config) {
			if lc := c.LimitConfig(); lc.Adaptive != nil {
				t.Errorf("static mode: adaptive %+v", *lc.Adaptive)
			}
		}},
		{"threshold mode adaptive", map[string]string{"GATE_THRESHOLD_MODE": "Adaptive", "GATE_ADAPTIVE_FACTOR": "5", "GATE_ADAPTIVE_FLOOR": "50",
			"GATE_ADAPTIVE_CEILING": "500000", "GATE_ADAPTIVE_HALF_LIFE": "6h", "GATE_ADAPTIVE_MIN_HISTORY": "48h", "GATE_ADAPTIVE_MAX_SPIKE": "5h",
			"GATE_LIMITS": "1m:1000,1h:20000"}, func(t *testing.T, c Config) {
			a := c.LimitConfig().Adaptive
			want := spike.Config{Window: time.Minute, Factor: 5, Floor: 50, Ceiling: 500_000, LevelHalfLife: 6 * time.Hour, MinHistory: 48 * time.Hour, MaxSpike: 5 * time.Hour}
			if a == nil || *a != want {
				t.Fatalf("adaptive %+v, want %+v", a, want)
			}
			if _, err := limit.New(c.LimitConfig(), nil, nil); err != nil {
				t.Errorf("the limiter refuses it: %v", err)
			}
			for i, lc := range c.ExtraLimitConfigs() {
				if lc.Adaptive != nil {
					t.Errorf("GATE_LIMITS entry %d is adaptive: the primary limit only is", i+1)
				}
			}
		}},
		{"hot every tick off", map[string]string{"GATE_HOT_EVERY_TICK": "false"}, func(t *testing.T, c Config) {
			if c.HotEveryTick || *c.LimitConfig().HotEveryTick {
				t.Error("hot every tick still on")
			}
		}},
		{"empty value means default", map[string]string{"GATE_WINDOW": "", "GATE_REDIS_PREFIX": ""}, func(t *testing.T, c Config) {
			if c.Window != time.Minute || c.RedisPrefix != "gate" {
				t.Errorf("window %s prefix %q", c.Window, c.RedisPrefix)
			}
		}},
		{"spaces trimmed", map[string]string{"GATE_WINDOW": " 30s ", "GATE_TICK_INTERVAL": "500ms"}, func(t *testing.T, c Config) {
			if c.Window != 30*time.Second {
				t.Errorf("window %s", c.Window)
			}
		}},
		{"log level and format", map[string]string{"GATE_LOG_LEVEL": "Debug", "GATE_LOG_FORMAT": "TEXT"}, func(t *testing.T, c Config) {
			if c.LogLevel.String() != "debug" || c.LogFormat != "text" {
				t.Errorf("level %s format %s", c.LogLevel, c.LogFormat)
			}
		}},
		{"start offset latest", map[string]string{"GATE_KAFKA_START_OFFSET": "Latest"}, func(t *testing.T, c Config) {
			if cc, err := c.ConsumeConfig(Reload{}); err != nil || c.KafkaStartOffset != "latest" || cc.StartOffset != consume.StartLatest {
				t.Errorf("start offset %q, consumer's %v (%v), want latest", c.KafkaStartOffset, cc.StartOffset, err)
			}
		}},
		{"group protocol consumer", map[string]string{"GATE_KAFKA_GROUP_PROTOCOL": "Consumer"}, func(t *testing.T, c Config) {
			cc, err := c.ConsumeConfig(Reload{})
			if err != nil || cc.GroupProtocol != consume.GroupConsumer {
				t.Errorf("group protocol %v (%v), want consumer", cc.GroupProtocol, err)
			}
		}},
		{"group protocol default classic", nil, func(t *testing.T, c Config) {
			cc, err := c.ConsumeConfig(Reload{})
			if err != nil || cc.GroupProtocol != consume.GroupClassic {
				t.Errorf("group protocol %v (%v), want classic", cc.GroupProtocol, err)
			}
		}},
		{"start offset earliest", map[string]string{"GATE_KAFKA_START_OFFSET": "earliest"}, func(t *testing.T, c Config) {
			if cc, err := c.ConsumeConfig(Reload{}); err != nil || c.KafkaStartOffset != "earliest" || cc.StartOffset != consume.StartEarliest {
				t.Errorf("start offset %q, consumer's %v (%v), want earliest", c.KafkaStartOffset, cc.StartOffset, err)
			}
		}},
		{"sync interval equal to tick", map[string]string{"GATE_SYNC_INTERVAL": "2s", "GATE_TICK_INTERVAL": "2s"}, nil},
		// Past a rebalance and a transaction's interval, exactly once; at least once the
		// interval is not progress's pace.
		{"stall bound past rebalance and transaction interval", map[string]string{"GATE_DELIVERY": "exactly-once", "GATE_KAFKA_REBALANCE_TIMEOUT": "1s",
			"GATE_REVOKE_TIMEOUT": "500ms", "GATE_TRANSACTION_INTERVAL": "5s", "GATE_STALL_NOT_READY": "6001ms"}, nil},
		{"stall bound within transaction interval at least once", map[string]string{"GATE_KAFKA_REBALANCE_TIMEOUT": "1s",
			"GATE_REVOKE_TIMEOUT": "500ms", "GATE_TRANSACTION_INTERVAL": "5s", "GATE_STALL_NOT_READY": "2s"}, nil},
		{"any port", map[string]string{"GATE_HTTP_ADDR": "127.0.0.1:0"}, nil},
		// A lower-case name that is no variable of the gate's in another case is another
		// program's (gate_window is refused: TestUnknownVariable).
		{"non-GATE variables ignored", map[string]string{"GATEWAY": "x", "HOME": "/root", "gate_dir": "nonsense"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := loadMap(tt.env)
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}

func TestLoadConfigMalformed(t *testing.T) {
	t.Parallel()
	tooBig := strconv.FormatInt(limit.MaxThreshold+1, 10)
	tests := []struct {
		key, value string
		want       string // in the message, besides the key
		env        map[string]string
	}{
		{key: "GATE_KAFKA_BROKERS", value: "kafka", want: `entry "kafka" is not host:port`},
		{key: "GATE_KAFKA_BROKERS", value: "a:9092,,b:9092", want: "entry 2 is empty"},
		{key: "GATE_KAFKA_BROKERS", value: "a:99999", want: "not host:port"},
		{key: "GATE_KAFKA_BROKERS", value: "a:+9092", want: "not host:port"},
		{key: "GATE_KAFKA_BROKERS", value: "a:00", want: "not host:port"},
		// A host with a space in it (kafka-1 :9092) passed, and the gate started to wait,
		// not ready, on a name no resolver answers.
		{key: "GATE_KAFKA_BROKERS", value: "kafka-1 :9092", want: `entry "kafka-1 :9092": host "kafka-1 " holds a space or control character`},
		{key: "GATE_KAFKA_BROKERS", value: "a:1,kafka 2:9092", want: `host "kafka 2" holds a space`},
		{key: "GATE_REDIS_SENTINEL_ADDRS", value: "s 1:26379", want: `host "s 1" holds a space`,
			env: map[string]string{"GATE_REDIS_MODE": "sentinel", "GATE_REDIS_SENTINEL_MASTER": "mymaster"}},
		{key: "GATE_INPUT_TOPIC", value: "events in", want: "a Kafka topic name"},
		{key: "GATE_ACCEPTED_TOPIC", value: "events", want: "the input and the outputs must all differ"},
		{key: "GATE_OUTCOMES_TOPIC", value: "events_overflow", want: "the input and the outputs must all differ"},
		{key: "GATE_OUTCOMES_TOPIC", value: "a/b", want: "a Kafka topic name"},
		{key: "GATE_OUTCOMES_INTERVAL", value: "7s", want: "divides an hour"},
		{key: "GATE_OUTCOMES_MAX_ROWS", value: "0", want: "GATE_OUTCOMES_MAX_ROWS"},
		{key: "GATE_OUTCOMES_FLUSH_INTERVAL", value: "50ms", want: "GATE_OUTCOMES_FLUSH_INTERVAL=\"50ms\": want a duration from 100ms to 10m such as 10s"},
		{key: "GATE_OUTCOMES_FLUSH_INTERVAL", value: "11m", want: "from 100ms to 10m"},
		{key: "GATE_OVERFLOW_TOPIC", value: "events_accepted", want: "must all differ"},
		{key: "GATE_DEAD_LETTER_TOPIC", value: strings.Repeat("x", 250), want: "a Kafka topic name"},
		{key: "GATE_KAFKA_START_OFFSET", value: "newest", want: `GATE_KAFKA_START_OFFSET="newest": unknown start offset "newest"; want earliest or latest`},
		{key: "GATE_KAFKA_START_OFFSET", value: "none", want: "want earliest or latest"},
		{key: "GATE_KAFKA_GROUP_PROTOCOL", value: "eager", want: `GATE_KAFKA_GROUP_PROTOCOL="eager": unknown group protocol "eager"; want classic or consumer`},
		{key: "GATE_TRANSACTION_TIMEOUT", value: "30s", env: map[string]string{"GATE_DELIVERY": "exactly-once"},
			want: "a duration longer than GATE_KAFKA_REBALANCE_TIMEOUT (1m) and GATE_KAFKA_SESSION_TIMEOUT (45s)"},
		{key: "GATE_STALL_NOT_READY", value: "30s", want: "longer than GATE_KAFKA_REBALANCE_TIMEOUT (1m)"},
		{key: "GATE_STALL_RESTART", value: "1m", want: "longer than GATE_STALL_NOT_READY (2m)"},
		// With GATE_STALL_NOT_READY off, GATE_STALL_RESTART is the only stall bound: one
		// within a rebalance would restart a healthy gate waiting behind it.
		{key: "GATE_STALL_RESTART", value: "30s", want: "longer than GATE_KAFKA_REBALANCE_TIMEOUT (1m)", env: map[string]string{"GATE_STALL_NOT_READY": "0"}},
		{key: "GATE_STALL_RESTART", value: "5s", want: "longer than GATE_KAFKA_REBALANCE_TIMEOUT (1s) plus GATE_TRANSACTION_INTERVAL (5s)",
			env: map[string]string{"GATE_STALL_NOT_READY": "0", "GATE_DELIVERY": "exactly-once", "GATE_KAFKA_REBALANCE_TIMEOUT": "1s", "GATE_REVOKE_TIMEOUT": "500ms", "GATE_TRANSACTION_INTERVAL": "5s"}},
		// Exactly once only a committed transaction is progress, and a healthy gate's commits
		// come GATE_TRANSACTION_INTERVAL apart, its end waiting out a rebalance: a stall bound
		// within that would take every healthy gate with steady input for stalled.
		{key: "GATE_STALL_NOT_READY", value: "5s", want: "longer than GATE_KAFKA_REBALANCE_TIMEOUT (1s) plus GATE_TRANSACTION_INTERVAL (5s)",
			env: map[string]string{"GATE_DELIVERY": "exactly-once", "GATE_KAFKA_REBALANCE_TIMEOUT": "1s", "GATE_REVOKE_TIMEOUT": "500ms", "GATE_TRANSACTION_INTERVAL": "5s"}},
		{key: "GATE_STALL_NOT_READY", value: "6s", want: "longer than GATE_KAFKA_REBALANCE_TIMEOUT (1s) plus GATE_TRANSACTION_INTERVAL (5s)",
			env: map[string]string{"GATE_DELIVERY": "exactly-once", "GATE_KAFKA_REBALANCE_TIMEOUT": "1s", "GATE_REVOKE_TIMEOUT": "500ms", "GATE_TRANSACTION_INTERVAL": "5s"}},
		{key: "GATE_ON_UNDELIVERABLE", value: "drop", want: `GATE_ON_UNDELIVERABLE="drop": unknown policy "drop"; want stop or skip`},
		{key: "GATE_ON_DATA_LOSS", value: "skip", want: `GATE_ON_DATA_LOSS="skip": unknown policy "skip"; want continue or stop`},
		{key: "GATE_KEY_FROM", value: "json:", want: "want json:FIELD, json:FIELD+FIELD, header:NAME or key"},
		{key: "GATE_KEY_FROM", value: "body:team", want: "want json:FIELD"},
		{key: "GATE_KEY_FROM", value: "header:", want: "want json:FIELD"},
		{key: "GATE_MAX_KEY_BYTES", value: "0", want: "at least 1"},
		{key: "GATE_VALIDATE_JSON", value: "strict", want: "true or false"},
		{key: "GATE_COST", value: "records", want: `GATE_COST="records": unknown cost "records"; want events or bytes`},
		{key: "GATE_LIMITS", value: "1h", want: `entry "1h" has no ':'`},
		{key: "GATE_LIMITS", value: "1h:100,,24h:1000", want: "entry 2 is empty"},
		{key: "GATE_LIMITS", value: "hourly:100", want: "not a whole number of seconds"},
		{key: "GATE_LIMITS", value: "1500ms:100", want: "not a whole number of seconds"},
		{key: "GATE_LIMITS", value: "1h:0", want: "threshold \"0\" is not a whole number from 1"},
		{key: "GATE_LIMITS", value: "1h:" + tooBig, want: "is not a whole number from 1"},
		{key: "GATE_LIMITS", value: "1h:100,60m:200", want: "window 1h appears twice"},
		{key: "GATE_LIMITS", value: "1m:100,60s:200", want: "window 1m appears twice"},
		{key: "GATE_LIMITS", value: "1m:100,1h:1000", want: "not both", env: map[string]string{"GATE_THRESHOLD": "5"}},
		{key: "GATE_LIMITS", value: "1m:100,1h:1000", want: "not both", env: map[string]string{"GATE_WINDOW": "30s"}},
		{key: "GATE_LIMITS", value: "1h:100,1s:5", want: "windows longer than GATE_TICK_INTERVAL (1s)"},
		{key: "GATE_FORCE_OVERFLOW", value: "a,,b", want: "entry 2 is empty"},
		{key: "GATE_FORCE_OVERFLOW", value: "a,a", want: "twice"},
		{key: "GATE_FORCE_OVERFLOW", value: "team1\nteam2\n", want: "entries are separated by commas"},
		// An invisible character at a team's edge (a zero-width space copied from a page)
		// named a key no record has, taken without a word; spaces, a non-breaking one
		// too, are trimmed as ever.
		{key: "GATE_FORCE_OVERFLOW", value: "a,42\u200b", want: `team "42\u200b" starts or ends with an invisible character (U+200B)`},
		// Validation of values no rule reads did nothing (a review).
		{key: "GATE_VALIDATE_JSON", value: "true", want: "unless GATE_KEY_FROM reads JSON", env: map[string]string{"GATE_KEY_FROM": "key"}},
		{key: "GATE_VALIDATE_JSON", value: "true", want: "with header:team no value is read", env: map[string]string{"GATE_KEY_FROM": "header:team"}},
		{key: "GATE_DRY_RUN", value: "yes please", want: "true or false"},
		{key: "GATE_OVERFLOW_KEEP_KEY", value: "2", want: "true or false"},
		{key: "GATE_MAX_POLL_RECORDS", value: "0", want: "at least 1"},
		{key: "GATE_COMMIT_INTERVAL", value: "0s", want: "at least 10ms"},
		{key: "GATE_COMMIT_INTERVAL", value: "9ms", want: "at least 10ms"},
		{key: "GATE_COMMIT_INTERVAL", value: "1ns", want: "at least 10ms"},
		{key: "GATE_PRODUCE_RETRIES", value: "-1", want: "at least 0"},
		{key: "GATE_MAX_BUFFERED_RECORDS", value: "-1", want: "at least 1"},
		{key: "GATE_MAX_BUFFERED_BYTES", value: "1000", want: "at least 1048576"},
		{key: "GATE_MAX_BUFFERED_BYTES", value: "1048576", env: map[string]string{"GATE_KAFKA_MAX_MESSAGE_BYTES": "10485760"},
			want: "at least GATE_KAFKA_MAX_MESSAGE_BYTES (10485760) less a record batch's 61-byte header"},
		{key: "GATE_KAFKA_CLIENT_ID", value: strings.Repeat("x", 248), want: "a client id of at most 247 bytes"},
		{key: "GATE_KAFKA_MAX_MESSAGE_BYTES", value: "100", want: "from 1024"},
		{key: "GATE_KAFKA_MAX_MESSAGE_BYTES", value: "3000000000", want: "whole number"},
		{key: "GATE_REVOKE_TIMEOUT", value: "0s", want: "above zero"},
		{key: "GATE_SHUTDOWN_TIMEOUT", value: "later", want: "want a duration such as 20s"},
		{key: "GATE_KAFKA_TLS", value: "on", want: "true or false"},
		{key: "GATE_KAFKA_SESSION_TIMEOUT", value: "100ms", want: "from 1s"},
		{key: "GATE_KAFKA_REBALANCE_TIMEOUT", value: "5s", want: "longer than GATE_REVOKE_TIMEOUT"},
		{key: "GATE_KAFKA_FETCH_MAX_WAIT", value: "0s", want: "from 10ms"},
		{key: "GATE_KAFKA_FETCH_MAX_WAIT", value: "5ms", want: "from 10ms"},
		{key: "GATE_KAFKA_FETCH_MAX_WAIT", value: "900h", want: "to 596h"},
		{key: "GATE_KAFKA_SESSION_TIMEOUT", value: "800h", want: "to 596h", env: map[string]string{"GATE_KAFKA_REBALANCE_TIMEOUT": "500h", "GATE_STALL_NOT_READY": "0"}},
		{key: "GATE_KAFKA_REBALANCE_TIMEOUT", value: "900h", want: "from 100ms to 596h", env: map[string]string{"GATE_STALL_NOT_READY": "0"}},
		// Longer than the revoke timeout, but under the client's 100ms: refused at load, not by the client at start.
		{key: "GATE_KAFKA_REBALANCE_TIMEOUT", value: "50ms", want: "from 100ms to 596h", env: map[string]string{"GATE_REVOKE_TIMEOUT": "10ms"}},
		{key: "GATE_KAFKA_MAX_MESSAGE_BYTES", value: "200000000", want: "to 104857600"},
		{key: "GATE_KAFKA_FETCH_MAX_BYTES", value: "1000", want: "from 1024 to 52428800"},
		{key: "GATE_KAFKA_FETCH_MAX_BYTES", value: "104857600", want: "from 1024 to 52428800"},
		{key: "GATE_KAFKA_TLS_CERT_FILE", value: "/tmp/cert.pem", want: "together with GATE_KAFKA_TLS_KEY_FILE"},
		{key: "GATE_KAFKA_SASL_MECHANISM", value: "gssapi", want: "want none, plain, scram-sha-256 or scram-sha-512"},
		{key: "GATE_KAFKA_SASL_MECHANISM", value: "plain", want: "GATE_KAFKA_SASL_USERNAME and GATE_KAFKA_SASL_PASSWORD"},
		{key: "GATE_KAFKA_SASL_USERNAME", value: "gate", want: "unset unless GATE_KAFKA_SASL_MECHANISM is plain", env: map[string]string{"GATE_KAFKA_SASL_PASSWORD": "hunter2"}},
		{key: "GATE_KAFKA_SASL_PASSWORD", value: "hunter2", want: "unset unless GATE_KAFKA_SASL_MECHANISM is plain", env: map[string]string{"GATE_KAFKA_SASL_MECHANISM": "none"}},
		{key: "GATE_WINDOW", value: "abc", want: `GATE_WINDOW="abc": want a duration such as 60s`},
		{key: "GATE_WINDOW", value: "60", want: "want a duration"},
		{key: "GATE_WINDOW", value: "0s", want: "at least 2ms"},
		{key: "GATE_WINDOW", value: "-1m", want: "at least 2ms"},
		{key: "GATE_WINDOW", value: "1ms", want: "at least 2ms"},
		{key: "GATE_THRESHOLD", value: "0", want: "from 1 to"},
		{key: "GATE_THRESHOLD", value: "-5", want: "from 1 to"},
		{key: "GATE_THRESHOLD", value: "1e6", want: "whole number"},
		{key: "GATE_THRESHOLD", value: tooBig, want: "from 1 to"},
		{key: "GATE_THRESHOLD", value: "99999999999999999999", want: "whole number"},
		{key: "GATE_LIMIT_MODE", value: "drop", want: "want divert or cap"},
		{key: "GATE_CLOCK", value: "processing", want: "want wall or event"},
		{key: "GATE_EVENT_TIME_FROM", value: "header:ts", want: "want timestamp or json:FIELD"},
		{key: "GATE_EVENT_TIME_FROM", value: "json:ts", want: "timestamp unless GATE_CLOCK=event"},
		{key: "GATE_MAX_EVENT_AGE", value: "0s", want: "above zero"},
		// Set on the wall clock it did nothing, silently.
		{key: "GATE_MAX_EVENT_AGE", value: "1h", want: "unset (or its default, 15m) unless GATE_CLOCK=event"},
		{key: "GATE_MAX_EVENT_AGE", value: "10000h", want: "at most 1048576 of the shortest window (10ms)", env: map[string]string{"GATE_CLOCK": "event", "GATE_WINDOW": "10ms", "GATE_TICK_INTERVAL": "5ms", "GATE_SYNC_INTERVAL": "5ms"}},
		{key: "GATE_DELIVERY", value: "exactly-twice", want: "want at-least-once or exactly-once"},
		{key: "GATE_TRANSACTIONAL_ID", value: "gate-0", want: "unset unless GATE_DELIVERY=exactly-once"},
		{key: "GATE_TRANSACTIONAL_ID", value: "gate 0", want: "1 to 200 of a-z", env: map[string]string{"GATE_DELIVERY": "exactly-once"}},
		{key: "GATE_TRANSACTION_TIMEOUT", value: "100ms", want: "from 1s to 15m"},
		{key: "GATE_TRANSACTION_INTERVAL", value: "-1s", want: "a transaction per poll"},
		{key: "GATE_TRANSACTION_INTERVAL", value: "11s", want: "up to 10s"},
		{key: "GATE_TRANSACTION_INTERVAL", value: "5s", env: map[string]string{"GATE_TRANSACTION_TIMEOUT": "8s"}, want: "below half GATE_TRANSACTION_TIMEOUT"},
		{key: "GATE_TRANSACTION_MAX_RECORDS", value: "0", want: "at least 1"},
		{key: "GATE_TRANSACTION_TIMEOUT", value: "1h", want: "from 1s to 15m"},
		{key: "GATE_OVERRIDES", value: "team-a", want: "no '='"},
		{key: "GATE_OVERRIDES", value: "=5", want: "no team"},
		{key: "GATE_OVERRIDES", value: "a=many", want: "not a whole number"},
		{key: "GATE_OVERRIDES", value: "a=0", want: "from 1 to"},
		{key: "GATE_OVERRIDES", value: "a=-3", want: "from 1 to"},
		// Entries a line each (a Helm block scalar), or separated by ';' or a space, were
		// read as one team named so: the teams listed kept the default threshold (a review).
		{key: "GATE_OVERRIDES", value: "team1=5000\nteam2=200000\n", want: "entries are separated by commas"},
		{key: "GATE_OVERRIDES", value: "team1=5000;team2=200000", want: "entries are separated by commas"},
		{key: "GATE_OVERRIDES", value: "\u2060team1=5000", want: `team "\u2060team1" starts or ends with an invisible character (U+2060)`},
		{key: "GATE_OVERRIDES", value: "team1=5000 team2=200000", want: "entries are separated by commas"},
		{key: "GATE_OVERRIDES", value: "a=" + tooBig, want: "from 1 to"},
		{key: "GATE_OVERRIDES", value: "a=1,a=2", want: "twice"},
		{key: "GATE_OVERRIDES", value: "a=1,", want: "empty"},
		{key: "GATE_SYNC_INTERVAL", value: "0s", want: "above zero"},
		{key: "GATE_SYNC_INTERVAL", value: "8785h", want: "at most 8784h (366 days)", env: map[string]string{"GATE_TICK_INTERVAL": "1s"}},
		{key: "GATE_OVERRIDES_REFRESH", value: "-1m", want: "above zero"},
		{key: "GATE_OVERRIDES_MAX_ENTRIES", value: "0", want: "at least 1"},
		{key: "GATE_OVERRIDES_MAX_ENTRIES", value: "1e6", want: "whole number"},
		{key: "GATE_SYNC_INTERVAL", value: "500ms", want: "no shorter than GATE_TICK_INTERVAL (1s)"},
		{key: "GATE_HOT_EVERY_TICK", value: "maybe", want: "want true or false"},
		{key: "GATE_PENDING_READ_SHARE", value: "five percent", want: "want a number"},
		{key: "GATE_PENDING_READ_SHARE", value: "NaN", want: "want a number"},
		{key: "GATE_PENDING_READ_SHARE", value: "1.5", want: "at most 1"},
		{key: "GATE_PENDING_READ_SHARE", value: "0", want: "negative number to disable"},
		{key: "GATE_MEMORY_LIMIT_RATIO", value: "1.1", want: "from 0 (no limit) to 1"},
		{key: "GATE_MEMORY_LIMIT_RATIO", value: "-0.1", want: "from 0 (no limit) to 1"},
		{key: "GATE_MEMORY_LIMIT_RATIO", value: "90%", want: "want a number"},
		{key: "GATE_SYNC_FLOOR", value: "0.2", want: "below 0.1"},
		{key: "GATE_SYNC_FLOOR", value: "0", want: "above 0"},
		{key: "GATE_SYNC_FLOOR", value: "-0.01", want: "above 0"},
		{key: "GATE_DIVERT_HOLD", value: "-1s", want: "0 or more"},
		{key: "GATE_DIVERT_HOLD", value: "soon", want: "want a duration such as 60s, or 0 for no hold"},
		// A duration past what Go holds said "not a duration", as every other duration
		// variable says "out of range".
		{key: "GATE_DIVERT_HOLD", value: "9999999h", want: `GATE_DIVERT_HOLD="9999999h": out of range (a duration is at most 2562047h); want`},
		{key: "GATE_DIVERT_HOLD", value: "30s", want: "0 or unset with GATE_CLOCK=event", env: map[string]string{"GATE_CLOCK": "event"}},
		{key: "GATE_THRESHOLD_MODE", value: "learned", want: "want static or adaptive"},
		{key: "GATE_THRESHOLD_MODE", value: "adaptive", want: "static unless GATE_WINDOW (7m) divides an hour", env: map[string]string{"GATE_WINDOW": "7m"}},
		{key: "GATE_THRESHOLD_MODE", value: "adaptive", want: "static unless GATE_WINDOW (2h) divides an hour", env: map[string]string{"GATE_WINDOW": "2h", "GATE_COLD_WRITE_INTERVAL": "1m"}},
		{key: "GATE_THRESHOLD_MODE", value: "adaptive", want: "static with GATE_CLOCK=event", env: map[string]string{"GATE_CLOCK": "event"}},
		{key: "GATE_ADAPTIVE_FACTOR", value: "1.5", want: "above 1.5"},
		{key: "GATE_ADAPTIVE_FACTOR", value: "NaN", want: "want a number"},
		{key: "GATE_ADAPTIVE_FACTOR", value: "1e9", want: "at most 1000"},
		{key: "GATE_ADAPTIVE_FACTOR", value: "four", want: "want a number"},
		{key: "GATE_ADAPTIVE_FLOOR", value: "0", want: "from 1 to"},
		{key: "GATE_ADAPTIVE_FLOOR", value: "10.5", want: "whole number"},
		{key: "GATE_ADAPTIVE_CEILING", value: "50", want: "from GATE_ADAPTIVE_FLOOR (100)"},
		{key: "GATE_ADAPTIVE_CEILING", value: "-1", want: "0 for none"},
		{key: "GATE_ADAPTIVE_HALF_LIFE", value: "10s", want: "at least GATE_WINDOW (1m)"},
		{key: "GATE_ADAPTIVE_HALF_LIFE", value: "soon", want: "duration"},
		{key: "GATE_ADAPTIVE_MAX_SPIKE", value: "30m", want: "from 1h2m (an hour and two GATE_WINDOWs) to 168h"},
		{key: "GATE_ADAPTIVE_MAX_SPIKE", value: "200h", want: "from 1h2m"},
		{key: "GATE_ADAPTIVE_MAX_SPIKE", value: "30m", want: "from 1h to 168h such as 3h, at least an hour and two of each adaptive rule's first windows", env: map[string]string{"GATE_RULES_FILE": "rules.yaml"}},
		{key: "GATE_ADAPTIVE_MIN_HISTORY", value: "0s", want: "at least GATE_WINDOW (1m)"},
		{key: "GATE_DIVERT_RELEASE", value: "0", want: "above 0 and at most 1"},
		{key: "GATE_DIVERT_RELEASE", value: "1.5", want: "above 0 and at most 1"},
		{key: "GATE_COLD_WRITE_INTERVAL", value: "2m", want: "at most the window (1m)"},
		{key: "GATE_COLD_WRITE_INTERVAL", value: "-1s", want: "or 0 or unset for once a window"}, // 0 is taken: not "above 0"
		{key: "GATE_COLD_WRITE_INTERVAL", value: "soon", want: "duration"},
		{key: "GATE_CACHE_CAPACITY", value: "0", want: "at least 1"},
		{key: "GATE_CACHE_CAPACITY", value: "lots", want: "whole number"},
		{key: "GATE_CACHE_TTL", value: "0s", want: "above zero"},
		{key: "GATE_CACHE_IDLE_TIMEOUT", value: "-5m", want: "at least 1s"},
		{key: "GATE_TICK_INTERVAL", value: "0s", want: "at least 1ms"},
		// A tick a nanosecond long was accepted: none of its Redis round trips could fit.
		{key: "GATE_TICK_INTERVAL", value: "1ns", want: "at least 1ms"},
		{key: "GATE_TICK_INTERVAL", value: "999us", want: "at least 1ms"},
		{key: "GATE_TICK_INTERVAL", value: "2m", want: "shorter than GATE_WINDOW (1m)", env: map[string]string{"GATE_SYNC_INTERVAL": "5m"}},
		{key: "GATE_TICK_INTERVAL", value: "60s", want: "shorter than GATE_WINDOW (1m)", env: map[string]string{"GATE_SYNC_INTERVAL": "5m"}},
		{key: "GATE_REDIS_URLS", value: "http://127.0.0.1:6379", want: "scheme must be redis or rediss"},
		{key: "GATE_REDIS_URLS", value: "127.0.0.1:6379", want: "redis://"},
		{key: "GATE_REDIS_URLS", value: "redis://", want: "no host"},
		{key: "GATE_REDIS_URLS", value: "redis://a:1,,redis://b:1", want: "entry 2 is empty"},
		{key: "GATE_REDIS_URLS", value: "redis://a:1/0,redis://:pw@a:1/0", want: "same instance"},
		{key: "GATE_REDIS_URLS", value: "redis://a:1/notadb", want: "tick: bad redis URL"}, // the package renamed from sync
		{key: "GATE_REDIS_KEY_TTL", value: "-1s", want: "0 (meaning 2 x GATE_WINDOW)"},
		{key: "GATE_REDIS_KEY_TTL", value: "8785h", want: "at most 8784h (366 days)"},
		{key: "GATE_REDIS_TLS_CA_FILE", value: "/etc/gate/ca.pem", want: "unset unless GATE_REDIS_URLS has rediss:// URLs"},
		{key: "GATE_REDIS_TLS_CERT_FILE", value: "/etc/gate/tls.crt", want: "unset unless GATE_REDIS_URLS has rediss:// URLs",
			env: map[string]string{"GATE_REDIS_TLS_KEY_FILE": "/etc/gate/tls.key", "GATE_REDIS_URLS": "redis://a:6379/0,redis://b:6379/0"}},
		{key: "GATE_REDIS_TLS_CA_FILE", value: "/etc/gate/ca.pem", want: "unset unless GATE_REDIS_URLS has rediss:// URLs",
			env: map[string]string{"GATE_REDIS_MODE": "sentinel", "GATE_REDIS_SENTINEL_MASTER": "m", "GATE_REDIS_SENTINEL_ADDRS": "s:26379"}},
		{key: "GATE_REDIS_MODE", value: "ring", want: "standalone, cluster or sentinel"},
		{key: "GATE_REDIS_URLS", value: "redis://a:6379,rediss://b:6379", want: "all redis:// or all rediss:// with GATE_REDIS_MODE=cluster",
			env: map[string]string{"GATE_REDIS_MODE": "cluster", "GATE_REDIS_TLS_CA_FILE": "/etc/gate/ca.pem"}},
		{key: "GATE_REDIS_URLS", value: "rediss://a:6379,redis://b:6379", want: "all redis:// or all rediss:// with GATE_REDIS_MODE=cluster",
			env: map[string]string{"GATE_REDIS_MODE": "cluster"}},
		{key: "GATE_REDIS_SENTINEL_MASTER", value: "my master", want: "without spaces"},
		{key: "GATE_REDIS_SENTINEL_MASTER", value: "mymaster", want: "unset unless GATE_REDIS_MODE=sentinel"},
		{key: "GATE_REDIS_SENTINEL_ADDRS", value: "sentinel-1", want: "not host:port"},
		{key: "GATE_REDIS_SENTINEL_ADDRS", value: "s:26379", want: "unset unless GATE_REDIS_MODE=sentinel"},
		{key: "GATE_REDIS_MODE", value: "sentinel", want: "the master name the sentinels monitor", env: map[string]string{"GATE_REDIS_SENTINEL_ADDRS": "s:26379"}},
		{key: "GATE_REDIS_MODE", value: "sentinel", want: "sentinel host:port entries", env: map[string]string{"GATE_REDIS_SENTINEL_MASTER": "m"}},
		{key: "GATE_REDIS_URLS", value: "redis://a:1/0,redis://b:1/0", want: "one URL with GATE_REDIS_MODE=sentinel",
			env: map[string]string{"GATE_REDIS_MODE": "sentinel", "GATE_REDIS_SENTINEL_MASTER": "m", "GATE_REDIS_SENTINEL_ADDRS": "s:26379"}},
		{key: "GATE_REDIS_URLS", value: "redis://a:1/2", want: "database 0", env: map[string]string{"GATE_REDIS_MODE": "cluster"}},
		{key: "GATE_REDIS_PREFIX", value: "a{b}", want: "without braces", env: map[string]string{"GATE_REDIS_MODE": "cluster"}},
		{key: "GATE_REDIS_KEY_TTL", value: "forever", want: "want a duration such as 120s"},
		{key: "GATE_REDIS_READ_TIMEOUT", value: "0s", want: "above zero"},
		{key: "GATE_REDIS_WRITE_TIMEOUT", value: "-1ms", want: "above zero"},
		{key: "GATE_REDIS_DIAL_TIMEOUT", value: "soon", want: "want a duration such as 1s"},
		{key: "GATE_KEYS_PER_COMMAND", value: "1", want: "at least 2"},
		{key: "GATE_KEYS_PER_TICK", value: "1", want: "at least 2"},
		{key: "GATE_MAX_PENDING_WRITES", value: "0", want: "at least 1"},
		{key: "GATE_MAX_READS_PER_TICK", value: "-1", want: "at least 1"},
		{key: "GATE_HTTP_ADDR", value: "8080", want: "host:port"},
		{key: "GATE_HTTP_ADDR", value: ":http-alt", want: "host:port"},
		// strconv's signed forms are no port: ":+80" listened on 80 (review).
		{key: "GATE_HTTP_ADDR", value: ":+80", want: "host:port"},
		{key: "GATE_HTTP_ADDR", value: ":-0", want: "host:port"},
		{key: "GATE_LOG_LEVEL", value: "verbose", want: "want debug, info, warn or error"},
		{key: "GATE_LOG_LEVEL", value: "info+2", want: "want debug, info, warn or error"},
		{key: "GATE_LOG_FORMAT", value: "xml", want: "want json or text"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			env := maps.Clone(tt.env)
			if env == nil {
				env = map[string]string{}
			}
			env[tt.key] = tt.value
			_, err := loadMap(env)
			if err == nil {
				t.Fatal("loaded without error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.key) || !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\nwant it to name %s and contain %q", msg, tt.key, tt.want)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
		})
	}
}

func TestLoadConfigNeverRepeatsAPassword(t *testing.T) {
	t.Parallel()
	for _, v := range []string{
		"http://:hunter2@127.0.0.1:6379",
		"redis://:hunter2@a:1/0,redis://:hunter2@a:1/0",
		"redis://:hunter2@a:1/notadb",
		"redis://:hunter2@[::1/0",
	} {
		_, err := loadMap(map[string]string{"GATE_REDIS_URLS": v})
		if err == nil {
			t.Errorf("%s: loaded without error", v)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error repeats the password: %v", err)
		}
	}
}

// GATE_REDIS_URLS is split at its commas, so a password holding an unescaped ',' split
// its URL in two: the error showed the first piece as is (GATE_REDIS_URLS=
// "redis://user:p4ss,(redacted: ...)"), the password's head in clear, and said the
// piece could not be parsed. The error now shows the URL with its password redacted and
// says to escape the ','.
func TestRedisURLPasswordWithACommaIsNeverShown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ urls, head string }{ // head: the password before its ','
		{"redis://user:p4ss,w0rd@a:6379/0", "p4ss"},
		{"redis://user:1234,w0rd@a:6379/0", "1234"}, // its head parses, as host user, port 1234
		{"redis://:sec,r,et@a:6379/0", "sec"},
		{"redis://:pw@b:6379/0,rediss://:p4ss,w0rd@a:6379/0", "p4ss"},
	} {
		_, err := loadMap(map[string]string{"GATE_REDIS_URLS": tc.urls})
		if err == nil {
			t.Errorf("%s: loaded without error", tc.urls)
			continue
		}
		if strings.Contains(err.Error(), tc.head) {
			t.Errorf("%s: the error repeats the password's head %q: %v", tc.urls, tc.head, err)
		}
		if !strings.Contains(err.Error(), "%2C") {
			t.Errorf("%s: the error does not say to escape the ',' as %%2C: %v", tc.urls, err)
		}
	}
}

// GATE_REDIS_SENTINEL_ADDRS and GATE_KAFKA_BROKERS take host:port, but a sentinel's or
// broker's URL with its credentials was refused with the whole value in clear, twice
// (GATE_REDIS_SENTINEL_ADDRS="redis://:hunter2@s:26379": entry "redis://:hunter2@s:26379"
// is not host:port), and the credentials alone before the host (hunter2@s:26379) were
// taken as part of a host name: the gate started, showed them in its start line and in
// /readyz, and never reached the sentinels. Both are refused, naming the '@' and
// repeating none of the value before it.
func TestHostListWithCredentialsIsRefusedUnshown(t *testing.T) {
	t.Parallel()
	sentinel := map[string]string{"GATE_REDIS_MODE": "sentinel", "GATE_REDIS_SENTINEL_MASTER": "m"}
	for _, tc := range []struct{ key, value string }{
		{"GATE_REDIS_SENTINEL_ADDRS", "redis://:hunter2@s:26379"},
		{"GATE_REDIS_SENTINEL_ADDRS", "hunter2@s:26379"},
		{"GATE_REDIS_SENTINEL_ADDRS", "s1:26379,u:hunter2@s2:26379"},
		{"GATE_REDIS_SENTINEL_ADDRS", "redis://:hun,ter2@s:26379"},
		{"GATE_KAFKA_BROKERS", "SASL_SSL://gate:hunter2@k:9092"},
		{"GATE_KAFKA_BROKERS", "hunter2@k:9092"},
	} {
		env := map[string]string{tc.key: tc.value}
		if tc.key == "GATE_REDIS_SENTINEL_ADDRS" {
			maps.Copy(env, sentinel)
		}
		_, err := loadMap(env)
		if err == nil {
			t.Errorf("%s=%s: loaded without error", tc.key, tc.value)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "hunter2") || strings.Contains(msg, "hun,") {
			t.Errorf("%s=%s: the error repeats the credentials: %v", tc.key, tc.value, err)
		}
		if !strings.Contains(msg, tc.key) || !strings.Contains(msg, "'@'") {
			t.Errorf("%s=%s: the error does not name %s and the '@': %v", tc.key, tc.value, tc.key, err)
		}
	}
}

// A URL password holding '/', '?' or '#' unescaped ends the URL's authority early: the
// rest of the password lands in the host's port, the path, the query or the fragment,
// where no redaction finds it; without the scheme's "://" there is no user info at all.
// Such a URL is refused, and its error repeats no part of the password.
func TestRedisURLWithAnUnescapedPasswordIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, tail string }{ // tail: the password after its '/', '?' or '#'
		{"redis://default:1234/abcd@redis:6379/0", "abcd"}, // read as host default, port 1234
		{"redis://:123#xyz@redis:6379", "xyz"},             // read as localhost:123, no password
		{"redis://:4242?xyz@redis:6379/0", "xyz"},
		{"rediss://gate:1/2@redis:6379", "2@"}, // read as database 2
		{"gate:secret@redis:6379", "secret"},   // the scheme forgotten: read as scheme gate
	} {
		_, err := loadMap(map[string]string{"GATE_REDIS_URLS": tc.url})
		if err == nil {
			t.Errorf("%s: loaded without error", tc.url)
			continue
		}
		if strings.Contains(err.Error(), tc.tail) {
			t.Errorf("%s: the error repeats the password: %v", tc.url, err)
		}
		if want := map[bool]string{true: "escape", false: "want redis://"}[strings.Contains(tc.url, "://")]; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: the error does not say to escape the password: %v", tc.url, err)
		}
	}
}

// A URL's user name without a password is not used by the client: it logs in as Redis's
// default user, without a password. So redis://gate@host, meant for an ACL user, runs
// as another user than the operator chose, and redis://secret@host, a password
// written without its ':', printed the password in the start-up line, /readyz and the
// readiness warnings. Such a URL is refused, naming GATE_REDIS_URLS and repeating no
// part of the name, unless GATE_REDIS_PASSWORD supplies the password.
func TestRedisURLWithAUserAndNoPasswordIsRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{
		"redis://hunter2@a:6379/0",
		"rediss://hunter2@a:6379/0",
		"redis://hunter2:@a:6379/0",
		"redis://:pw@a:6379/0,redis://hunter2@b:6379/0",
	} {
		_, err := loadMap(map[string]string{"GATE_REDIS_URLS": v})
		if err == nil {
			t.Errorf("%s: loaded without error", v)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "GATE_REDIS_URLS") || !strings.Contains(msg, "GATE_REDIS_PASSWORD") {
			t.Errorf("%s: the error does not name GATE_REDIS_URLS and GATE_REDIS_PASSWORD: %v", v, err)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error repeats the user name, which may be a password: %v", v, err)
		}
	}
	// The password from GATE_REDIS_PASSWORD: the URL's user is the user.
	c, err := loadMap(map[string]string{"GATE_REDIS_URLS": "redis://gate@a:6379/0", "GATE_REDIS_PASSWORD": "pw"})
	if err != nil {
		t.Fatalf("a URL's user with GATE_REDIS_PASSWORD: %v", err)
	}
	if got := c.dialURLs(); len(got) != 1 || got[0] != "redis://gate:pw@a:6379/0" {
		t.Errorf("dialed as %q, want redis://gate:pw@a:6379/0", got)
	}
	// A URL that fails to parse says so without its user name.
	if _, err := loadMap(map[string]string{"GATE_REDIS_URLS": "redis://hunter2@a:1/notadb"}); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("redis://hunter2@a:1/notadb: %v", err)
	}
}

// A Redis URL's port out of 1..65535, or a negative database, was taken: the gate
// started, dialed "h:99999" at every tick and never became ready, where the same port in
// GATE_KAFKA_BROKERS stops it at start. Such a URL is refused, naming GATE_REDIS_URLS.
func TestRedisURLPortOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"redis://a:99999/0", `port "99999"`},
		{"redis://a:0/0", `port "0"`},
		{"rediss://a:65536", `port "65536"`},
		{"redis://[::1]:70000/0", `port "70000"`},
		{"redis://a:6379/0,redis://b:123456/0", `port "123456"`},
		{"redis://a:6379/-1", "database -1"},
		{"redis://a:6379/0?db=-2", "database -2"},
	} {
		_, err := loadMap(map[string]string{"GATE_REDIS_URLS": tc.url})
		if err == nil {
			t.Errorf("%s: loaded without error", tc.url)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "GATE_REDIS_URLS") || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: the error does not name GATE_REDIS_URLS and %s: %v", tc.url, tc.want, err)
		}
	}
	for _, v := range []string{"redis://a:1/0", "redis://a:65535/15", "redis://a/0", "rediss://[::1]:6380"} {
		if _, err := loadMap(map[string]string{"GATE_REDIS_URLS": v}); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// The gate sets its Redis clients' timeouts (GATE_REDIS_*_TIMEOUT), pool size and retries
// itself, over a URL's: redis://h:6379/0?read_timeout=2s loaded, and the gate went on
// giving up on replies after 250ms, the operator's fix for a slow Redis silently
// ignored. Such a URL is refused, naming the variable that sets it.
func TestRedisURLOptionsTheGateSetsAreRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"redis://a:6379/0?read_timeout=2s", "GATE_REDIS_READ_TIMEOUT"},
		{"redis://a:6379/0?write_timeout=2s", "GATE_REDIS_WRITE_TIMEOUT"},
		{"rediss://a:6379/0?skip_verify=true&dial_timeout=5s", "GATE_REDIS_DIAL_TIMEOUT"},
		{"redis://a:6379/0?pool_size=20", "pool_size"},
		{"redis://a:6379/0?max_retries=3", "max_retries"},
		{"redis://a:6379/0,redis://b:6379/0?read_timeout=1s", "GATE_REDIS_READ_TIMEOUT"},
	} {
		_, err := loadMap(map[string]string{"GATE_REDIS_URLS": tc.url})
		if err == nil {
			t.Errorf("%s: loaded without error", tc.url)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "GATE_REDIS_URLS") || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: the error does not name GATE_REDIS_URLS and %s: %v", tc.url, tc.want, err)
		}
	}
	// What the clients do take from a URL still loads.
	if _, err := loadMap(map[string]string{"GATE_REDIS_URLS": "rediss://a:6379/0?skip_verify=true&client_name=gate"}); err != nil {
		t.Errorf("skip_verify and client_name: %v", err)
	}
}

func TestLoadConfigReportsEveryProblemOnOneLine(t *testing.T) {
	t.Parallel()
	_, err := loadMap(map[string]string{
		"GATE_WINDOW": "abc", "GATE_THRESHOLD": "many", "GATE_LIMIT_MODE": "drop", "GATE_WINDWO": "1m",
		"GATE_CACHE_CAPACITY": "0", // a range error beside parse errors
	})
	if err == nil {
		t.Fatal("loaded without error")
	}
	msg := err.Error()
	for _, want := range []string{"GATE_WINDOW=", "GATE_THRESHOLD=", "GATE_LIMIT_MODE=", "GATE_CACHE_CAPACITY=",
		"GATE_WINDWO: unknown variable (did you mean GATE_WINDOW?)"} {
		if n := strings.Count(msg, want); n != 1 {
			t.Errorf("error %q contains %q %d times, want once", msg, want, n)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans lines: %q", msg)
	}
	if !errors.Is(err, limit.ErrBadMode) {
		t.Errorf("errors.Is(err, limit.ErrBadMode) = false for %v", err)
	}
	var ve *varError
	if !errors.As(err, &ve) {
		t.Errorf("errors.As(err, *varError) = false")
	}
}

func TestUnknownVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, want string
	}{
		{"GATE_SOMETHING_ELSE", "GATE_SOMETHING_ELSE: unknown variable (`gate env` lists the known ones)"},
		{"GATE_TRESHOLD", "GATE_TRESHOLD: unknown variable (did you mean GATE_THRESHOLD?)"},
		{"GATE_", "GATE_: unknown variable"},
		// One of the gate's written in another case (a values file's lower-case names):
		// neither read nor said (a review).
		{"gate_threshold", "gate_threshold: unknown variable (did you mean GATE_THRESHOLD?)"},
		{"Gate_Window", "Gate_Window: unknown variable (did you mean GATE_WINDOW?)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadMap(map[string]string{tt.name: "1"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// A name that only looks like a known one (a trailing space, a zero-width space, a
// Cyrillic letter for a Latin one) is shown quoted and escaped: printed as is, "GATE_WINDOW :
// unknown variable (did you mean GATE_WINDOW?)" reads as a contradiction.
func TestUnknownVariableLookalikeShownEscaped(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, want string }{
		{"GATE_WINDOW ", `"GATE_WINDOW ": unknown variable (did you mean GATE_WINDOW?)`},
		{"GATE_WINDOW\u200b", `"GATE_WINDOW\u200b": unknown variable (did you mean GATE_WINDOW?)`},
		{"GATE_WIND\u041eW", `"GATE_WIND\u041eW": unknown variable`},
		{"GATE_window", "GATE_window: unknown variable (did you mean GATE_WINDOW?)"}, // plain letters: as written
	} {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			_, err := loadMap(map[string]string{tt.name: "30s"})
			var ps Problems
			if !errors.As(err, &ps) || len(ps) != 1 || !strings.HasPrefix(ps[0].Error(), tt.want) {
				t.Errorf("error %v, want one problem starting %q", err, tt.want)
			}
		})
	}
}

// A number or duration too large to read says so: "want a whole number such as 1000000"
// alone, for a whole number, leaves the operator looking for a typo that is not there.
func TestLoadOutOfRangeSaysSo(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ key, value, want string }{
		{"GATE_THRESHOLD", "99999999999999999999", `GATE_THRESHOLD="99999999999999999999": out of range; want a whole number`},
		{"GATE_CACHE_CAPACITY", "-99999999999999999999", `GATE_CACHE_CAPACITY="-99999999999999999999": out of range; want a whole number`},
		{"GATE_WINDOW", "999999999h", `GATE_WINDOW="999999999h": out of range (a duration is at most 2562047h); want a duration`},
		{"GATE_TICK_INTERVAL", "1.5e9h", ""},                      // not a duration at all: no "out of range"
		{"GATE_LIMITS", "99999999999h:1", "is longer than 8784h"}, // a window as a rule's
	} {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			t.Parallel()
			_, err := loadMap(map[string]string{tt.key: tt.value})
			var ps Problems
			if !errors.As(err, &ps) || len(ps) != 1 {
				t.Fatalf("error %v, want one problem", err)
			}
			if tt.want == "" {
				if strings.Contains(err.Error(), "out of range") {
					t.Errorf("error %v says out of range, want not", err)
				}
			} else if !strings.Contains(ps[0].Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestEnvNames(t *testing.T) {
	t.Parallel()
	environ := []string{"GATE_WINDOW=30s", "GATE_TYPO=1", "GATE_EMPTY=", "HOME=/root", "GATEWAY=x"}
	env := map[string]string{"GATE_WINDOW": "30s"} // the injected getenv decides what is set
	got := Names(environ, getenvFrom(env))
	if !slices.Equal(got, []string{"GATE_WINDOW"}) {
		t.Errorf("Names = %v", got)
	}
}

func TestKeyTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		window, set, want string
		clamped           bool
		env               map[string]string
	}{
		{"60s", "0", "2m", false, nil},
		{"60s", "30s", "2m", true, nil},
		{"60s", "2m", "2m", false, nil},
		{"60s", "10m", "10m", false, nil},
		{"10s", "0", "20s", false, nil},
		// As the tick raises it (KeyLifetime): 3 x the window with adaptive thresholds, 2 x
		// plus GATE_MAX_EVENT_AGE on the event clock. The floor was 2 x alone, and such a
		// raise went unsaid (a review).
		{"60s", "150s", "3m", true, map[string]string{"GATE_THRESHOLD_MODE": "adaptive"}},
		{"60s", "5m", "1h2m", true, map[string]string{"GATE_CLOCK": "event", "GATE_MAX_EVENT_AGE": "1h", "GATE_DIVERT_HOLD": "0"}},
	}
	for _, tt := range tests {
		env := map[string]string{"GATE_WINDOW": tt.window, "GATE_REDIS_KEY_TTL": tt.set}
		maps.Copy(env, tt.env)
		c, err := loadMap(env)
		if err != nil {
			t.Fatal(err)
		}
		got, clamped := c.KeyTTL()
		want, _ := time.ParseDuration(tt.want)
		if got != want || clamped != tt.clamped {
			t.Errorf("window %s ttl %s %v: got %s clamped=%v, want %s clamped=%v", tt.window, tt.set, tt.env, got, clamped, want, tt.clamped)
		}
		// The tick's own floor is the same.
		if l, err := limit.New(c.LimitConfig(), nil, nil); err != nil {
			t.Fatal(err)
		} else if lt := max(c.RedisKeyTTL, l.KeyLifetime()); lt != got {
			t.Errorf("window %s ttl %s %v: KeyTTL %s, the tick sets %s", tt.window, tt.set, tt.env, got, lt)
		}
		// The tick gets the setting as is, and raises it to each limit's own floor.
		set, err := time.ParseDuration(tt.set)
		if err != nil {
			t.Fatal(err)
		}
		if c.SyncConfig().KeyTTL != set {
			t.Errorf("SyncConfig().KeyTTL = %s, want %s as set", c.SyncConfig().KeyTTL, set)
		}
	}
}

// Config maps onto the libraries' configurations field for field, and they accept it.
func TestConfigMapsThroughLibraries(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{
		"GATE_LIMIT_MODE": "cap", "GATE_WINDOW": "30s", "GATE_THRESHOLD": "5000", "GATE_OVERRIDES": "a=7",
		"GATE_SYNC_INTERVAL": "10s", "GATE_HOT_EVERY_TICK": "false", "GATE_PENDING_READ_SHARE": "-1",
		"GATE_SYNC_FLOOR": "0.02", "GATE_CACHE_CAPACITY": "1000", "GATE_CACHE_TTL": "5m",
		"GATE_CACHE_IDLE_TIMEOUT": "2m", "GATE_TICK_INTERVAL": "500ms", "GATE_REDIS_PREFIX": "test",
		"GATE_REDIS_KEY_TTL": "90s", "GATE_KEYS_PER_COMMAND": "50", "GATE_KEYS_PER_TICK": "1000",
		"GATE_MAX_PENDING_WRITES": "2000", "GATE_MAX_READS_PER_TICK": "300",
		"GATE_REDIS_READ_TIMEOUT": "1s", "GATE_REDIS_WRITE_TIMEOUT": "2s", "GATE_REDIS_DIAL_TIMEOUT": "3s",
		"GATE_OVERRIDES_REFRESH": "30s", "GATE_OVERRIDES_MAX_ENTRIES": "5000",
	})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limit.New(c.LimitConfig(), nil, nil)
	if err != nil {
		t.Fatalf("limit.New: %v", err)
	}
	lc := lim.Config()
	if lc.Mode != limit.Cap || lc.Window != 30*time.Second || lc.Threshold != 5000 || lc.Overrides["a"] != 7 ||
		lc.SyncInterval != 10*time.Second || *lc.HotEveryTick || lc.PendingReadShare != -1 || lc.SyncFloor != 0.02 ||
		lc.Capacity != 1000 || lc.TTL != 5*time.Minute || lc.IdleTimeout != 2*time.Minute {
		t.Errorf("limit config %+v", lc)
	}
	// A client that never connects: tick.New only checks its configuration.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	tk, err := tick.New(lim, []redis.UniversalClient{client}, c.SyncConfig(), nil, nil)
	if err != nil {
		t.Fatalf("tick.New: %v", err)
	}
	tc := tk.Config()
	if tc.TickInterval != 500*time.Millisecond || tc.KeyPrefix != "test" || tc.KeyTTL != 90*time.Second ||
		tc.KeysPerCommand != 50 || tc.KeysPerTick != 1000 || tc.MaxPendingWrites != 2000 || tc.MaxReadsPerTick != 300 {
		t.Errorf("sync config %+v", tc)
	}
	if o, err := c.RedisOptions(); err != nil || o.ReadTimeout != time.Second || o.WriteTimeout != 2*time.Second || o.DialTimeout != 3*time.Second {
		t.Errorf("redis options %+v", o)
	}
	oc := c.OverridesConfig()
	if oc.Key != "test:overrides" || !maps.Equal(oc.Base, map[string]int64{"a": 7}) || oc.Interval != 30*time.Second ||
		oc.MaxEntries != 5000 || oc.Timeout != overrides.DefaultTimeout {
		t.Errorf("overrides config %+v", oc)
	}
	if _, err := overrides.New(oc, lim, client, nil, nil); err != nil {
		t.Errorf("overrides.New: %v", err)
	}
	// The timeout bounds a whole read: no shorter than one command may take.
	c.RedisReadTimeout = time.Minute
	if got := c.OverridesConfig().Timeout; got != time.Minute+5*time.Second {
		t.Errorf("overrides timeout with a 1m read timeout: %v", got)
	}
}

// The Kafka and routing settings map onto the router and the consumer.
func TestConfigMapsToRouterAndConsumer(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{
		"GATE_KAFKA_BROKERS": "k1:9092, k2:9093", "GATE_INPUT_TOPIC": "raw", "GATE_ACCEPTED_TOPIC": "ok",
		"GATE_OVERFLOW_TOPIC": "over", "GATE_DEAD_LETTER_TOPIC": "dlq", "GATE_GROUP_ID": "g1", "GATE_KAFKA_START_OFFSET": "latest",
		"GATE_KEY_FROM": "json:token+distinct_id", "GATE_MAX_KEY_BYTES": "64", "GATE_VALIDATE_JSON": "true", "GATE_COST": "bytes", "GATE_FORCE_OVERFLOW": "t1:u1, t2:u2",
		"GATE_DRY_RUN": "true", "GATE_OVERFLOW_KEEP_KEY": "true", "GATE_MAX_POLL_RECORDS": "500",
		"GATE_COMMIT_INTERVAL": "2s", "GATE_PRODUCE_RETRIES": "3", "GATE_MAX_BUFFERED_RECORDS": "1000",
		"GATE_MAX_BUFFERED_BYTES": "2097152", "GATE_KAFKA_MAX_MESSAGE_BYTES": "2048", "GATE_REVOKE_TIMEOUT": "3s",
		"GATE_SHUTDOWN_TIMEOUT": "4s", "GATE_KAFKA_FETCH_MAX_BYTES": "8388608", "GATE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
		"GATE_KAFKA_SASL_USERNAME": "u", "GATE_KAFKA_SASL_PASSWORD": "hunter2",
		"GATE_DELIVERY": "exactly-once", "GATE_TRANSACTIONAL_ID": "gate-7", "GATE_TRANSACTION_TIMEOUT": "75s",
		"GATE_ON_UNDELIVERABLE": "Skip", "GATE_ON_DATA_LOSS": "STOP",
		"GATE_CLOCK": "event", "GATE_EVENT_TIME_FROM": "json:meta.ts", "GATE_MAX_EVENT_AGE": "2h",
		"GATE_OUTCOMES_FLUSH_INTERVAL": "3s",
	})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RouteConfig()
	if rc.KeyFrom.String() != "json:token+distinct_id" || rc.AcceptedTopic != "ok" || rc.OverflowTopic != "over" ||
		rc.DeadLetterTopic != "dlq" || !slices.Equal(rc.ForceOverflow, []string{"t1:u1", "t2:u2"}) || !rc.DryRun ||
		!rc.OverflowKeepKey || rc.MaxKeyBytes != 64 || !rc.ValidateJSON || rc.Cost != route.CostBytes ||
		rc.EventTimeFrom.String() != "json:meta.ts" {
		t.Errorf("route config %+v", rc)
	}
	lim, err := limit.New(c.LimitConfig(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if lc := lim.Config(); lc.Clock != limit.EventClock || lc.MaxEventAge != 2*time.Hour {
		t.Errorf("limit config: clock %s, max event age %s", lc.Clock, lc.MaxEventAge)
	}
	if _, err := route.New(rc, lim, nil); err != nil {
		t.Errorf("route.New: %v", err)
	}
	cc, err := c.ConsumeConfig(Reload{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cc.Brokers, []string{"k1:9092", "k2:9093"}) || cc.InputTopic != "raw" || cc.GroupID != "g1" ||
		cc.MaxPollRecords != 500 || cc.CommitInterval != 2*time.Second || cc.ProduceRetries != 3 ||
		cc.MaxBufferedRecords != 1000 || cc.MaxBufferedBytes != 2<<20 || cc.MaxMessageBytes != 2048 ||
		cc.RevokeTimeout != 3*time.Second || cc.ShutdownTimeout != 4*time.Second || len(cc.ClientOpts) != 7 ||
		cc.Delivery != consume.ExactlyOnce || cc.TransactionalID != "gate-7" || cc.TransactionTimeout != 75*time.Second ||
		cc.StartOffset != consume.StartLatest || cc.OnUndeliverable != consume.UndeliverableSkip || cc.OnDataLoss != consume.DataLossStop ||
		!slices.Equal(cc.OutputTopics, []string{"ok", "over", "dlq"}) || cc.KeylessTopics != nil ||
		cc.OutcomesFlushInterval != 3*time.Second {
		t.Errorf("consume config %+v", cc)
	}
	// Overflow records without their key: a compacted overflow topic refuses them.
	dropKey := c
	dropKey.Kafka.OverflowKeepKey = false
	if cc, err := dropKey.ConsumeConfig(Reload{}); err != nil || !slices.Equal(cc.KeylessTopics, []string{"over"}) {
		t.Errorf("GATE_OVERFLOW_KEEP_KEY=false: keyless topics %v (%v), want the overflow topic", cc.KeylessTopics, err)
	}
	if cl, err := kgo.NewClient(cc.ClientOpts...); err != nil {
		t.Error(err)
	} else {
		if got := cl.OptValue(kgo.FetchMaxBytes); got != int32(8<<20) {
			t.Errorf("the client's fetch max bytes %v, want GATE_KAFKA_FETCH_MAX_BYTES's 8388608", got)
		}
		cl.Close()
	}
	if c.kafkaSASL() == nil || c.kafkaSASL().Name() != "SCRAM-SHA-512" {
		t.Errorf("SASL mechanism %v", c.kafkaSASL())
	}
	if _, err := consume.New(cc, nil, nil, nil, nil); err != nil {
		t.Errorf("consume.New: %v", err)
	}
	// The password appears nowhere a config is printed.
	if s := fmt.Sprintf("%v %+v", c, c); strings.Contains(s, "hunter2") {
		t.Errorf("the SASL password shows when the config is printed")
	}
}

// Missing TLS files fail start-up naming the variable.
func TestKafkaTLSFiles(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{"GATE_KAFKA_TLS_CA_FILE": "/nonexistent/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ConsumeConfig(Reload{}); err == nil || !strings.Contains(err.Error(), `GATE_KAFKA_TLS_CA_FILE="/nonexistent/ca.pem"`) {
		t.Errorf("ConsumeConfig: %v", err)
	}
	notPEM := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ = loadMap(map[string]string{"GATE_KAFKA_TLS_CA_FILE": notPEM})
	if _, err := c.ConsumeConfig(Reload{}); err == nil || !strings.Contains(err.Error(), "want PEM certificates") {
		t.Errorf("ConsumeConfig: %v", err)
	}
	c, _ = loadMap(map[string]string{"GATE_REDIS_TLS_CA_FILE": notPEM, "GATE_REDIS_URLS": "rediss://127.0.0.1:6379/0"})
	if _, err := c.RedisOptions(); err == nil || !strings.Contains(err.Error(), "GATE_REDIS_TLS_CA_FILE") || !errors.As(err, new(Problems)) {
		t.Errorf("RedisOptions: %v", err)
	}
	c, _ = loadMap(map[string]string{"GATE_KAFKA_TLS": "true"})
	if tc, err := c.kafkaTLS(Reload{}); err != nil || tc == nil {
		t.Errorf("GATE_KAFKA_TLS=true gives no TLS config: %v", err)
	}
}

// Every value Load accepts, the libraries accept too: the defaults and the edges of
// each range.
func TestAcceptedConfigIsAcceptedByLibraries(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		nil,
		{"GATE_WINDOW": "2ms", "GATE_TICK_INTERVAL": "1ms", "GATE_SYNC_INTERVAL": "1ms"},
		{"GATE_THRESHOLD": "1", "GATE_SYNC_FLOOR": "0.0999", "GATE_PENDING_READ_SHARE": "1"},
		{"GATE_THRESHOLD": strconv.FormatInt(limit.MaxThreshold, 10), "GATE_CACHE_CAPACITY": "1"},
		{"GATE_KEYS_PER_COMMAND": "2", "GATE_KEYS_PER_TICK": "2", "GATE_MAX_PENDING_WRITES": "1", "GATE_MAX_READS_PER_TICK": "1", "GATE_OVERRIDES_MAX_ENTRIES": "1"},
		// The longest GATE_MAX_EVENT_AGE, on the event clock it bounds.
		{"GATE_CLOCK": "event", "GATE_WINDOW": "1m", "GATE_MAX_EVENT_AGE": "8784h"},
	} {
		c, err := loadMap(env)
		if err != nil {
			t.Errorf("%v: %v", env, err)
			continue
		}
		lim, err := limit.New(c.LimitConfig(), nil, nil)
		if err != nil {
			t.Errorf("%v: limit.New: %v", env, err)
			continue
		}
		client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		if _, err := tick.New(lim, []redis.UniversalClient{client}, c.SyncConfig(), nil, nil); err != nil {
			t.Errorf("%v: tick.New: %v", env, err)
		}
		if _, err := overrides.New(c.OverridesConfig(), lim, client, nil, nil); err != nil {
			t.Errorf("%v: overrides.New: %v", env, err)
		}
		_ = client.Close()
	}
}

// Every Kafka value Load accepts, the Kafka client accepts too: the edges of each range.
// The client refuses a heartbeat interval (3s) longer than the session, a fetch wait
// under 10ms, a timeout that does not fit its wire's 32-bit milliseconds and a batch
// larger than a produce request, with a line that names no variable.
func TestAcceptedKafkaConfigIsAcceptedByClient(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		nil,
		{"GATE_KAFKA_SESSION_TIMEOUT": "1s"},
		{"GATE_KAFKA_SESSION_TIMEOUT": "2999ms", "GATE_DELIVERY": "exactly-once", "GATE_TRANSACTIONAL_ID": "gate-0"},
		{"GATE_KAFKA_SESSION_TIMEOUT": "596h", "GATE_KAFKA_REBALANCE_TIMEOUT": "596h", "GATE_STALL_NOT_READY": "0", "GATE_STALL_RESTART": "0"},
		{"GATE_KAFKA_FETCH_MAX_WAIT": "10ms"},
		{"GATE_KAFKA_FETCH_MAX_WAIT": "596h"},
		{"GATE_KAFKA_MAX_MESSAGE_BYTES": "1024"},
		{"GATE_KAFKA_MAX_MESSAGE_BYTES": "104857600"},
		{"GATE_KAFKA_FETCH_MAX_BYTES": "1024"},
		{"GATE_KAFKA_FETCH_MAX_BYTES": "52428800"},
		{"GATE_KAFKA_REBALANCE_TIMEOUT": "100ms", "GATE_REVOKE_TIMEOUT": "10ms"},
		{"GATE_KAFKA_CLIENT_ID": strings.Repeat("x", 247)},
		{"GATE_MAX_BUFFERED_BYTES": "1048576"},
		{"GATE_MAX_BUFFERED_BYTES": "104857539", "GATE_KAFKA_MAX_MESSAGE_BYTES": "104857600"},
	} {
		c, err := loadMap(env)
		if err != nil {
			t.Errorf("%v: %v", env, err)
			continue
		}
		cc, err := c.ConsumeConfig(Reload{})
		if err != nil {
			t.Errorf("%v: ConsumeConfig: %v", env, err)
			continue
		}
		cons, err := consume.New(cc, nil, nil, nil, nil)
		if err != nil {
			t.Errorf("%v: consume.New: %v", env, err)
			continue
		}
		cons.Close()
	}
}

func TestEnvTableListsEveryVariable(t *testing.T) {
	t.Parallel()
	var stdout bytes.Buffer
	if err := WriteEnvTable(&stdout); err != nil {
		t.Fatalf("gate env: %v", err)
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "| Variable | Default | Description |\n| --- | --- | --- |\n") {
		t.Errorf("no table header:\n%s", out)
	}
	keys := structKeys(t)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(keys)+2 {
		t.Errorf("%d lines for %d variables", len(lines), len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(out, "| `"+k+"` |") {
			t.Errorf("gate env does not list %s", k)
		}
	}
	for _, l := range lines[2:] {
		// Each row has exactly three cells: no unescaped '|' inside one.
		if n := strings.Count(strings.ReplaceAll(l, `\|`, ""), "|"); n != 4 {
			t.Errorf("row with %d separators: %s", n, l)
		}
	}
	if !strings.Contains(out, "| `GATE_WINDOW` | `60s` | ") || !strings.Contains(out, "| `GATE_OVERRIDES` | *(empty)* | ") {
		t.Errorf("defaults missing from the table:\n%s", out)
	}
}

// TestRedisModeClients: each GATE_REDIS_MODE gets the go-redis client it names, the tick
// its mode, and readiness one label per client.
func TestRedisModeClients(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env    map[string]string
		n      int
		label  string
		isType func(redis.UniversalClient) bool
	}{
		{map[string]string{"GATE_REDIS_URLS": "redis://a:1/0,redis://b:1/0"}, 2, "redis://a:1/0",
			func(c redis.UniversalClient) bool { _, ok := c.(*redis.Client); return ok }},
		{map[string]string{"GATE_REDIS_MODE": "cluster", "GATE_REDIS_URLS": "redis://a:1/0,redis://b:1/0"}, 1, "cluster redis://a:1/0,redis://b:1/0",
			func(c redis.UniversalClient) bool { _, ok := c.(*redis.ClusterClient); return ok }},
		{map[string]string{"GATE_REDIS_MODE": "sentinel", "GATE_REDIS_SENTINEL_MASTER": "m", "GATE_REDIS_SENTINEL_ADDRS": "s1:26379,s2:26379"}, 1, "sentinel master m via s1:26379,s2:26379",
			func(c redis.UniversalClient) bool { _, ok := c.(*redis.Client); return ok }},
	} {
		c, err := loadMap(tc.env)
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		cs, err := c.DialRedis(tick.RedisOptions{}, Reload{})
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if len(cs) != tc.n || !tc.isType(cs[0]) {
			t.Errorf("%v: clients %T × %d, want %d", tc.env, cs[0], len(cs), tc.n)
		}
		if l := c.RedisLabels(); len(l) != tc.n || l[0] != tc.label {
			t.Errorf("%v: labels %q", tc.env, l)
		}
		if got, want := c.SyncConfig().Mode, tick.Mode(c.RedisMode); got != want {
			t.Errorf("SyncConfig().Mode = %q, want %q", got, want)
		}
		for _, x := range cs {
			_ = x.Close()
		}
	}
}

// GATE_LIMITS's first pair is the primary limit; the rest are further limits.
func TestLimitsFirstIsPrimary(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{"GATE_LIMITS": "1m:1000, 1h:20000", "GATE_OVERRIDES": "a=10"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Window != time.Minute || c.Threshold != 1000 || len(c.Limits) != 1 || c.Limits[0].Window != time.Hour || c.Limits[0].Threshold != 20000 {
		t.Errorf("window %s threshold %d limits %+v", c.Window, c.Threshold, c.Limits)
	}
	if got := c.ExtraLimitConfigs()[0].Overrides["a"]; got != 200 {
		t.Errorf("the hour limit's override of a %d, want 200 (10 × 20)", got)
	}
	if got := c.LimitKeyPrefix(0); got != "gate:w3600" {
		t.Errorf("the hour limit's key prefix %q", got)
	}
	// One pair is the one limit, as GATE_WINDOW and GATE_THRESHOLD would give it.
	c, err = loadMap(map[string]string{"GATE_LIMITS": "30s:500"})
	if err != nil || c.Window != 30*time.Second || c.Threshold != 500 || len(c.Limits) != 0 {
		t.Errorf("one pair: %v %s %d %+v", err, c.Window, c.Threshold, c.Limits)
	}
}

// With GATE_LIMITS, GATE_WINDOW must be unset: an error measured against the primary
// window names GATE_LIMITS's first window, which the operator set, not GATE_WINDOW (its
// default 60s), which setting would only be refused.
func TestLimitsErrorsNameTheirWindow(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"GATE_LIMITS": "1h:10", "GATE_TICK_INTERVAL": "2h", "GATE_SYNC_INTERVAL": "2h"},
		{"GATE_LIMITS": "7m:10,1h:100", "GATE_THRESHOLD_MODE": "adaptive"},
		{"GATE_LIMITS": "1h:10", "GATE_THRESHOLD_MODE": "adaptive", "GATE_ADAPTIVE_HALF_LIFE": "30m", "GATE_ADAPTIVE_MIN_HISTORY": "30m", "GATE_ADAPTIVE_MAX_SPIKE": "2h"},
	} {
		_, err := loadMap(env)
		if err == nil {
			t.Fatalf("%v loaded without error", env)
		}
		if msg := err.Error(); strings.Contains(msg, "GATE_WINDOW") || !strings.Contains(msg, "GATE_LIMITS's first window") {
			t.Errorf("%v: error %q\nwant it to name GATE_LIMITS's first window, not GATE_WINDOW", env, msg)
		}
	}
}

// A further limit on the primary window (a Config built otherwise than by Load, whose
// GATE_LIMITS refuses a window twice) is refused naming the window as an operator writes it.
func TestLimitsOnThePrimaryWindow(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{"GATE_WINDOW": "1h", "GATE_LIMITS": ""})
	if err != nil {
		t.Fatal(err)
	}
	c.Limits = limitList{{Window: time.Hour, Threshold: 10}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "want windows other than GATE_WINDOW (1h): each limit needs its own") {
		t.Errorf("a further limit of GATE_WINDOW's hour: %v", err)
	}
}

// The gate without rules names GATE_COST's unit in its keys as a bytes rule does: events
// keep {prefix} and {prefix}:w{seconds}, as ever; bytes are under {prefix}/bytes, so a
// gate restarted with another cost reads none of the other unit's counts.
func TestKeyPrefixNamesTheCost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cost, primary, hour string }{
		{"", "prod", "prod:w3600"},
		{"events", "prod", "prod:w3600"},
		{"bytes", "prod/bytes", "prod/bytes:w3600"},
	} {
		cfg, err := loadMap(map[string]string{"GATE_REDIS_PREFIX": "prod", "GATE_COST": c.cost, "GATE_LIMITS": "1m:1000,1h:20000"})
		if err != nil {
			t.Fatal(err)
		}
		if p, h := cfg.PrimaryKeyPrefix(), cfg.LimitKeyPrefix(0); p != c.primary || h != c.hour {
			t.Errorf("GATE_COST=%q: key prefixes %q and %q, want %q and %q", c.cost, p, h, c.primary, c.hour)
		}
		if k := cfg.OverridesConfig().Key; k != "prod:overrides" {
			t.Errorf("GATE_COST=%q: live overrides %q, want prod:overrides whatever the cost", c.cost, k)
		}
	}
}

// kubernetesServiceLinks are exactly the variables the kubelet sets in every pod of a
// namespace holding a release named gate, unless the pod spec sets enableServiceLinks:
// false: for a Service gate (port http, 8080) and a Service gate-metrics (port
// metrics, 9090), the Service's name upper-cased with '-' as '_', then the simple
// form (_SERVICE_HOST, _SERVICE_PORT, _SERVICE_PORT_<PORT NAME>) and the Docker-link
// form (_PORT, _PORT_<port>_<PROTO>, and its _PROTO, _PORT and _ADDR).
var kubernetesServiceLinks = map[string]string{
	"GATE_SERVICE_HOST":        "10.0.0.1",
	"GATE_SERVICE_PORT":        "8080",
	"GATE_SERVICE_PORT_HTTP":   "8080",
	"GATE_PORT":                "tcp://10.0.0.1:8080",
	"GATE_PORT_8080_TCP":       "tcp://10.0.0.1:8080",
	"GATE_PORT_8080_TCP_PROTO": "tcp",
	"GATE_PORT_8080_TCP_PORT":  "8080",
	"GATE_PORT_8080_TCP_ADDR":  "10.0.0.1",

	"GATE_METRICS_SERVICE_HOST":         "10.0.0.2",
	"GATE_METRICS_SERVICE_PORT":         "9090",
	"GATE_METRICS_SERVICE_PORT_METRICS": "9090",
	"GATE_METRICS_PORT":                 "tcp://10.0.0.2:9090",
	"GATE_METRICS_PORT_9090_TCP":        "tcp://10.0.0.2:9090",
	"GATE_METRICS_PORT_9090_TCP_PROTO":  "tcp",
	"GATE_METRICS_PORT_9090_TCP_PORT":   "9090",
	"GATE_METRICS_PORT_9090_TCP_ADDR":   "10.0.0.2",
}

// TestLoadConfigIgnoresServiceLinks: the variables Kubernetes injects for Services named
// gate and gate-metrics do not stop the gate, and change nothing in its configuration.
func TestLoadConfigIgnoresServiceLinks(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		"GATE_KAFKA_BROKERS": "kafka-0.kafka:9092", "GATE_GROUP_ID": "capture-gate",
		"GATE_HTTP_ADDR": ":8080", "GATE_REDIS_URLS": "redis://redis-0.redis:6379/0", "GATE_WINDOW": "30s",
	}
	want, err := loadMap(base)
	if err != nil {
		t.Fatal(err)
	}
	got, err := loadMap(withEnv(base, kubernetesServiceLinks))
	if err != nil {
		t.Fatalf("with the service links of Services gate and gate-metrics: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("service links changed the configuration:\n got %+v\nwant %+v", got, want)
	}
	// IPv6 cluster IPs, other protocols, a Service gate-1 with two named ports.
	more := map[string]string{
		"GATE_SERVICE_HOST": "fd00::1", "GATE_SERVICE_PORT": "8080", "GATE_PORT": "tcp://[fd00::1]:8080",
		"GATE_PORT_8080_TCP": "tcp://[fd00::1]:8080", "GATE_PORT_8080_TCP_ADDR": "fd00::1",
		"GATE_1_SERVICE_PORT_HTTP_ALT": "8081", "GATE_1_PORT_53_UDP": "udp://10.0.0.3:53",
		"GATE_1_PORT_53_UDP_PROTO": "udp", "GATE_1_PORT_9_SCTP_PORT": "9",
	}
	if _, err := loadMap(withEnv(base, more)); err != nil {
		t.Errorf("with more service links: %v", err)
	}
}

// TestServiceLinkLookalikesRejected: a name of a service link's shape whose value is not
// one Kubernetes would set, or a plain typo, is still an unknown variable.
func TestServiceLinkLookalikesRejected(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"GATE_KAFKA_BROKER":            "kafka:9092", // a typo
		"GATE_HTTP_PORT":               "9090",       // an operator's guess, not tcp://ip:port
		"GATE_METRICS_PORT":            "9090",
		"GATE_REDIS_PORT":              "redis://redis:6379",
		"GATE_SERVICE_HOST":            "gate.ingest.svc",
		"GATE_SERVICE_PORT":            "http",
		"GATE_SERVICE_PORT_HTTP":       "0",
		"GATE_PORT_8080_TCP":           "tcp://10.0.0.1:9090", // port differs from the name's
		"GATE_PORT_8080_TCP_PROTO":     "udp",
		"GATE_PORT_8080_TCP_PORT":      "9090",
		"GATE_PORT_8080_TCP_ADDR":      "localhost",
		"GATE_PORT_8080_HTTP_PORT":     "8080", // not a protocol
		"GATE_PORT_99999_TCP_PORT":     "99999",
		"GATE_PORT_08080_TCP_PORT":     "08080",
		"GATE_WINDOW_SERVICE_PORT_X_":  "8080",
		"GATE_KAFKA_SERVICE_HOST_NAME": "10.0.0.1",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := loadMap(map[string]string{name: value})
			if want := name + ": unknown variable"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s=%s: error %v, want one containing %q", name, value, err, want)
			}
		})
	}
}

// TestNoVariableLooksLikeAServiceLink: no name of Config has a service link's form, so a
// Service can never set a setting by its name (the chart also turns service links off),
// and a setting's own name can never be taken for a link whatever its value.
func TestNoVariableLooksLikeAServiceLink(t *testing.T) {
	t.Parallel()
	for _, k := range structKeys(t) {
		for _, re := range []*regexp.Regexp{linkServiceHost, linkServicePort, linkFirstPort, linkPortURL, linkPortPart} {
			if re.MatchString(k) {
				t.Errorf("%s has the form of a Kubernetes service link (%s): rename it", k, re)
			}
		}
	}
	// And the forms are the ones Kubernetes uses: every link of the test Services matches.
	for name, value := range kubernetesServiceLinks {
		if !isServiceLink(name, value) {
			t.Errorf("%s=%s is not taken for a service link", name, value)
		}
	}
	if got, want := ServiceLinks(getenvFrom(kubernetesServiceLinks), append(slices.Collect(maps.Keys(kubernetesServiceLinks)), "GATE_WINDOW", "GATE_TYPO")),
		slices.Sorted(maps.Keys(kubernetesServiceLinks)); !slices.Equal(got, want) {
		t.Errorf("serviceLinks = %v, want %v", got, want)
	}
}

// Whole numbers are decimal, as the table documents them: envconfig.Process alone would
// read "010" as 8 and take "0x10".
func TestLoadConfigWholeNumbersAreDecimal(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{"GATE_THRESHOLD": "010", "GATE_MAX_KEY_BYTES": "+64"})
	if err != nil || c.Threshold != 10 || c.MaxKeyBytes != 64 {
		t.Errorf("threshold %d, max key bytes %d (%v), want 10 and 64", c.Threshold, c.MaxKeyBytes, err)
	}
	for _, v := range []string{"0x10", "1_000", "0b11", "1e3"} {
		if _, err := loadMap(map[string]string{"GATE_THRESHOLD": v}); err == nil || !strings.Contains(err.Error(), "GATE_THRESHOLD") {
			t.Errorf("GATE_THRESHOLD=%s: error %v", v, err)
		}
	}
}

// Validate holds every rule, so a Config built or changed in code is checked as Load
// checks it, each message naming the variable.
func TestValidate(t *testing.T) {
	t.Parallel()
	c, err := loadMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	c.RedisMode, c.RedisPrefix = "cluster", "a{b}"
	c.TickInterval = 2 * c.Window
	err = c.Validate()
	var p Problems
	if !errors.As(err, &p) || !strings.Contains(err.Error(), `GATE_REDIS_PREFIX="a{b}": want a prefix without braces`) {
		t.Errorf("Validate: %v", err)
	}
	c.RedisPrefix = "gate"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "GATE_TICK_INTERVAL=") {
		t.Errorf("Validate: %v", err)
	}
}

// Every GATE_LIMITS entry Load takes builds: a further limit shorter than
// GATE_COLD_WRITE_INTERVAL is built with an interval of at most its window, as a rule's
// further limit is (RuleLimitConfigs); it failed in gate.New, naming no variable.
func TestExtraLimitColdWriteInterval(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{"GATE_LIMITS": "1m:1000,10s:100", "GATE_COLD_WRITE_INTERVAL": "30s"})
	if err != nil {
		t.Fatalf("Load: %v; want it taken, as a rule's limits are", err)
	}
	for _, lc := range c.ExtraLimitConfigs() {
		if err := lc.Validate(); err != nil {
			t.Errorf("Load took it, the %s limit cannot be built: %v", lc.Window, err)
		}
	}
}

// A static gate's window is not refused for the adaptive learner's sake, as a rule's
// static limit of the same window is not.
func TestStaticWindowNotRefusedForAdaptive(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"GATE_WINDOW": "2h"},
		{"GATE_LIMITS": "2h:1000"},
	} {
		if _, err := loadMap(env); err != nil {
			t.Errorf("%v: %v", env, err)
		}
	}
	c, _ := loadMap(nil)
	if _, err := ruleLimits(c, "2h:1000"); err != nil {
		t.Errorf("rule: %v", err)
	}
}

// No window or event age Load takes overflows a key's lifetime (2 x the window, plus
// GATE_MAX_EVENT_AGE under the event clock): a negative one would let the tick expire a
// long limit's counts after GATE_REDIS_KEY_TTL's floor, and the limit would never hold.
func TestKeyLifetimeDoesNotOverflow(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"GATE_LIMITS": "1m:1000,2000000h:1"},
		{"GATE_CLOCK": "event", "GATE_WINDOW": "30h", "GATE_MAX_EVENT_AGE": "2562000h",
			"GATE_ADAPTIVE_MAX_SPIKE": "61h", "GATE_ADAPTIVE_MIN_HISTORY": "30h"},
	} {
		c, err := loadMap(env)
		if err != nil {
			// Refused at start, naming the variable.
			if !strings.Contains(err.Error(), "GATE_LIMITS") && !strings.Contains(err.Error(), "GATE_MAX_EVENT_AGE") {
				t.Errorf("%v: refused by %v, which names neither GATE_LIMITS nor GATE_MAX_EVENT_AGE", env, err)
			}
			continue
		}
		for _, lc := range append([]limit.Config{c.LimitConfig()}, c.ExtraLimitConfigs()...) {
			l, err := limit.New(lc, nil, nil)
			if err != nil {
				t.Errorf("%v: Load took it, the %s limit cannot be built: %v", env, lc.Window, err)
				continue
			}
			if kl := l.KeyLifetime(); kl <= 0 {
				t.Errorf("%v: Load took it, the %s limit's keys live %s", env, lc.Window, kl)
			}
		}
	}
}

// GATE_CACHE_IDLE_TIMEOUT under a second is refused at start: entries keep when they were
// last seen in whole seconds, and every entry expired at every sweep, every team met as
// for the first time on each tick.
func TestCacheIdleTimeoutUnderASecondRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"500ms", "999ms"} {
		if _, err := loadMap(map[string]string{"GATE_CACHE_IDLE_TIMEOUT": v}); err == nil || !strings.Contains(err.Error(), "GATE_CACHE_IDLE_TIMEOUT") {
			t.Errorf("GATE_CACHE_IDLE_TIMEOUT=%s: %v, want refused naming it", v, err)
		}
	}
	if _, err := loadMap(map[string]string{"GATE_CACHE_IDLE_TIMEOUT": "1s"}); err != nil {
		t.Errorf("GATE_CACHE_IDLE_TIMEOUT=1s: %v", err)
	}
	if _, err := limit.New(limit.Config{Window: time.Minute, Threshold: 10, IdleTimeout: 500 * time.Millisecond}, nil, nil); err == nil {
		t.Error("limit.New took an idle timeout of 500ms")
	}
}

// A window that is itself refused is reported alone: the checks of other variables
// against it (GATE_COLD_WRITE_INTERVAL, the adaptive durations, adaptive's hour) are not
// made, as they would name variables the operator never set, or, dividing an hour by a
// window of 0, stop the gate with a panic instead of the line naming GATE_WINDOW.
func TestBadWindowReportedAlone(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"GATE_WINDOW": "0s", "GATE_THRESHOLD_MODE": "adaptive"},
		{"GATE_WINDOW": "-1s"},
		{"GATE_WINDOW": "-1s", "GATE_THRESHOLD_MODE": "adaptive"},
		{"GATE_WINDOW": "8785h", "GATE_THRESHOLD_MODE": "adaptive"},
	} {
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			_, err = loadMap(env)
		}()
		var ps Problems
		if !errors.As(err, &ps) || len(ps) != 1 || !strings.Contains(ps[0].Error(), "GATE_WINDOW") {
			t.Errorf("%v: %v, want the one problem of GATE_WINDOW", env, err)
		}
	}
}

// TestDesignStatesHowOverridesScale: docs/design.md's "Several limits per team" gave a
// further limit's override as `override × limit threshold / GATE_THRESHOLD`, a variable
// GATE_LIMITS requires unset (its default, 1000000, as gate env shows it): with
// GATE_LIMITS=1m:5000,1h:100000 and team1=10000 that reads 1000 an hour, where the gates
// give team1 200000 (the primary's threshold, GATE_LIMITS' first, is what an override
// is a factor of). The formula, taken with the value it names, must give what the gates
// build.
// A further limit's override is override × its threshold / the primary's, rounded: a
// product at a half rounds up, as the float factor 2.3 (a hair under it) did not.
func TestFurtherLimitOverrideRoundsExactly(t *testing.T) {
	t.Parallel()
	c, err := loadMap(map[string]string{"GATE_LIMITS": "1m:1000,1h:2300", "GATE_OVERRIDES": "a=25,b=15,c=1000"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"a": 58, "b": 35, "c": 2300} // 57.5, 34.5, 2300
	if got := c.ExtraLimitConfigs()[0].Overrides; !maps.Equal(got, want) {
		t.Errorf("the hour limit's overrides %v, want %v", got, want)
	}
}

func TestDesignStatesHowOverridesScale(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GATE_LIMITS": "1m:5000,1h:100000", "GATE_OVERRIDES": "team1=10000"}
	c, err := loadMap(env)
	if err != nil {
		t.Fatal(err)
	}
	got := c.ExtraLimitConfigs()[0].Overrides["team1"]
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(doc)), " ")
	m := regexp.MustCompile("`override × limit threshold / ([^`]+)`").FindStringSubmatch(text)
	if m == nil {
		t.Fatal("docs/design.md gives no formula `override × limit threshold / ...`; has its wording changed?")
	}
	// What the divisor names, in this environment.
	defaults, err := loadMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	divisors := map[string]int64{
		"GATE_THRESHOLD":          defaults.Threshold, // unset with GATE_LIMITS: its default
		"the primary's threshold": c.Threshold,
	}
	div, ok := divisors[m[1]]
	if !ok {
		t.Fatalf("docs/design.md divides by %q, which this test does not know; add it", m[1])
	}
	if stated := 10000 * c.Limits[0].Threshold / div; stated != got {
		t.Errorf("docs/design.md: %q with %v: team1=10000 gets %d an hour by the formula, %d by the gates", m[0], env, stated, got)
	}
}

// TestDocumentedACLGrantsEveryKeyPrefix: docs/operations.md's example Redis ACL ("For
// example: `ACL SETUSER gate ...`") grants, under the default prefix, the keys of every
// prefix the gate derives (PrimaryKeyPrefix, LimitKeyPrefix and RuleKeyPrefix, in both
// costs): it once granted ~gate:* alone, and a GATE_COST=bytes gate's every tick was
// refused (its counters under gate/bytes). A key pattern a prefix grows is then found
// here, not by an operator whose limiter fails open.
func TestDocumentedACLGrantsEveryKeyPrefix(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	const lead = "For example: `ACL SETUSER gate "
	i := strings.Index(string(doc), lead)
	if i < 0 {
		t.Fatalf("docs/operations.md has no %s...`", lead)
	}
	acl := string(doc[i+len(lead):])
	var grants []string // key patterns: each a prefix followed by '*'
	for _, f := range strings.Fields(acl[:strings.IndexByte(acl, '`')]) {
		if p, ok := strings.CutPrefix(f, "~"); ok {
			if !strings.HasSuffix(p, "*") || strings.ContainsAny(strings.TrimSuffix(p, "*"), "*?[") {
				t.Fatalf("key pattern %s: this test reads only PREFIX*", f)
			}
			grants = append(grants, strings.TrimSuffix(p, "*"))
		}
	}
	granted := func(key string) bool {
		return slices.ContainsFunc(grants, func(p string) bool { return strings.HasPrefix(key, p) })
	}
	for _, cost := range []string{"events", "bytes"} {
		cfg, err := loadMap(map[string]string{"GATE_COST": cost, "GATE_LIMITS": "1m:1000,1h:20000"})
		if err != nil {
			t.Fatal(err)
		}
		rule := rules.Rule{Name: "team", Limits: []rules.Limit{{Window: time.Minute}, {Window: time.Hour}}}
		if cost == "bytes" {
			rule.Cost = route.CostBytes
		}
		for _, p := range []string{cfg.PrimaryKeyPrefix(), cfg.LimitKeyPrefix(0), cfg.RuleKeyPrefix(rule, 0), cfg.RuleKeyPrefix(rule, 1)} {
			if key := p + ":team-1:29000000"; !granted(key) {
				t.Errorf("GATE_COST=%s: key %s is granted by none of the documented ACL's key patterns %q", cost, key, grants)
			}
		}
	}
}

// TestLoadConfigNamesTheVariableSet: a rule between two variables that fails on one left
// at its default names the other as the operator set it, that the line leads to the
// setting they made (raising GATE_REVOKE_TIMEOUT alone was reported on
// GATE_KAFKA_REBALANCE_TIMEOUT, which the operator had never set).
func TestLoadConfigNamesTheVariableSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GATE_REVOKE_TIMEOUT": "2m"},
			`GATE_KAFKA_REBALANCE_TIMEOUT="60s": unset, its default, against GATE_REVOKE_TIMEOUT="2m" as set; want a duration longer than GATE_REVOKE_TIMEOUT (2m)`},
		{map[string]string{"GATE_TICK_INTERVAL": "20s"}, `GATE_SYNC_INTERVAL="15s": unset, its default, against GATE_TICK_INTERVAL="20s" as set; want`},
		{map[string]string{"GATE_STALL_NOT_READY": "15m"}, `GATE_STALL_RESTART="10m": unset, its default, against GATE_STALL_NOT_READY="15m" as set; want`},
		// Both set: the message is as it was, naming the one the rule is on.
		{map[string]string{"GATE_REVOKE_TIMEOUT": "2m", "GATE_KAFKA_REBALANCE_TIMEOUT": "90s"},
			`GATE_KAFKA_REBALANCE_TIMEOUT="90s": want a duration longer than GATE_REVOKE_TIMEOUT (2m)`},
	}
	for _, tt := range tests {
		_, err := loadMap(tt.env)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("env %v: got %v, want it to say %s", tt.env, err, tt.want)
		}
	}
}

// TestLoadConfigLeavesOutRulesOverAWrongValue: a value that is wrong is reported alone,
// not again as the other side of every rule between it and another variable: a
// GATE_REDIS_MODE misspelt also told the operator to unset GATE_REDIS_SENTINEL_MASTER
// and GATE_REDIS_SENTINEL_ADDRS (wanted "unless GATE_REDIS_MODE=sentinel"), the opposite
// of the fix, and GATE_TICK_INTERVAL past the window reported GATE_SYNC_INTERVAL's
// default against it.
func TestLoadConfigLeavesOutRulesOverAWrongValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want string // the one problem
	}{
		{map[string]string{"GATE_TRANSACTION_TIMEOUT": "90"}, "GATE_TRANSACTION_TIMEOUT"},
		{map[string]string{"GATE_REDIS_MODE": "sentinal", "GATE_REDIS_SENTINEL_MASTER": "mymaster", "GATE_REDIS_SENTINEL_ADDRS": "s-0:26379"}, "GATE_REDIS_MODE"},
		{map[string]string{"GATE_TICK_INTERVAL": "2m"}, "GATE_TICK_INTERVAL"},
	}
	for _, tt := range tests {
		_, err := loadMap(tt.env)
		var p Problems
		if !errors.As(err, &p) || len(p) != 1 || !strings.HasPrefix(p[0].Error(), tt.want+"=") {
			t.Errorf("env %v: got %v; want one problem, on %s", tt.env, err, tt.want)
		}
	}
	// Two wrong values each naming the other are both reported: neither is left out for
	// the other's sake.
	_, err := loadMap(map[string]string{"GATE_TICK_INTERVAL": "2m", "GATE_WINDOW": "30s", "GATE_SYNC_INTERVAL": "1s"})
	var p Problems
	if !errors.As(err, &p) || len(p) == 0 {
		t.Errorf("a tick past the window and a sync interval under the tick: got %v, want problems", err)
	}
}

// TestLoadConfigKafkaTLSFalseWithItsFiles: GATE_KAFKA_TLS=false beside another
// GATE_KAFKA_TLS_* variable, which turns TLS on, was taken silently, the gate dialling
// over TLS all the same (the chart refuses the pair): against a plain listener it waited
// 40 s for a metadata timeout that named no TLS. It is refused, naming what is set.
func TestLoadConfigKafkaTLSFalseWithItsFiles(t *testing.T) {
	t.Parallel()
	_, err := loadMap(map[string]string{"GATE_KAFKA_TLS": "false", "GATE_KAFKA_TLS_SERVER_NAME": "kafka.internal"})
	if err == nil || !strings.Contains(err.Error(), `GATE_KAFKA_TLS="false"`) || !strings.Contains(err.Error(), "GATE_KAFKA_TLS_SERVER_NAME") {
		t.Errorf("GATE_KAFKA_TLS=false with GATE_KAFKA_TLS_SERVER_NAME: %v; want it refused, naming both", err)
	}
	for _, env := range []map[string]string{
		{"GATE_KAFKA_TLS_SERVER_NAME": "kafka.internal"},
		{"GATE_KAFKA_TLS": "true", "GATE_KAFKA_TLS_SERVER_NAME": "kafka.internal"},
		{"GATE_KAFKA_TLS": "false"},
	} {
		if _, err := loadMap(env); err != nil {
			t.Errorf("%v: %v", env, err)
		}
	}
}

// TestLoadConfigEnumerationsIgnoreCase: every variable naming one of a few values takes
// it in any case, as GATE_DELIVERY=Exactly-Once and GATE_REDIS_MODE=Cluster are taken;
// GATE_COST=Bytes alone was refused ("unknown cost").
func TestLoadConfigEnumerationsIgnoreCase(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{
		"GATE_COST": "bytes", "GATE_DELIVERY": "exactly-once", "GATE_REDIS_MODE": "cluster",
		"GATE_KAFKA_GROUP_PROTOCOL": "consumer", "GATE_KAFKA_START_OFFSET": "latest",
		"GATE_KAFKA_SASL_MECHANISM": "scram-sha-256", "GATE_ON_UNDELIVERABLE": "skip",
		"GATE_ON_DATA_LOSS": "stop", "GATE_THRESHOLD_MODE": "adaptive", "GATE_CLOCK": "event",
		"GATE_LOG_LEVEL": "debug", "GATE_LOG_FORMAT": "text",
	} {
		env := map[string]string{name: value}
		// What each needs beside it to load at all.
		switch name {
		case "GATE_REDIS_MODE":
			env["GATE_REDIS_URLS"] = "redis://127.0.0.1:7000"
		case "GATE_KAFKA_SASL_MECHANISM":
			env["GATE_KAFKA_SASL_USERNAME"], env["GATE_KAFKA_SASL_PASSWORD"], env["GATE_KAFKA_TLS"] = "u", "p", "true"
		}
		want, err := loadMap(env)
		if err != nil {
			t.Errorf("%s=%s: %v", name, value, err)
			continue
		}
		env[name] = strings.ToUpper(value[:1]) + value[1:]
		got, err := loadMap(env)
		if err != nil {
			t.Errorf("%s=%s: %v, want it taken as %s", name, env[name], err, value)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s=%s loads otherwise than %s", name, env[name], value)
		}
	}
}

// Names lists a variable of the gate's written in another case, for Load to refuse: it was
// left out, and the variable ignored in silence (a review).
func TestNamesAnyCase(t *testing.T) {
	env := map[string]string{"gate_threshold": "5000", "GATE_WINDOW": "10s", "other": "x"}
	got := Names([]string{"gate_threshold=5000", "GATE_WINDOW=10s", "other=x"}, func(k string) string { return env[k] })
	if !slices.Equal(got, []string{"gate_threshold", "GATE_WINDOW"}) {
		t.Errorf("Names = %q, want gate_threshold and GATE_WINDOW", got)
	}
}

// TestUnreadSettings: a setting of a mode not chosen is taken (a switch of mode during an
// incident must not fail over the other mode's settings left in place) and named by
// Unread, which serve logs; at its default, or in the mode that reads it, it is not.
func TestUnreadSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want []string // keys, in order
	}{
		{"defaults", nil, nil},
		{"commit interval, at least once", map[string]string{"GATE_COMMIT_INTERVAL": "5s"}, nil},
		{"commit interval, exactly once", map[string]string{"GATE_DELIVERY": "exactly-once", "GATE_COMMIT_INTERVAL": "5s"}, []string{"GATE_COMMIT_INTERVAL"}},
		{"commit interval at its default, exactly once", map[string]string{"GATE_DELIVERY": "exactly-once", "GATE_COMMIT_INTERVAL": "1000ms"}, nil},
		{"divert hold, divert", map[string]string{"GATE_DIVERT_HOLD": "5m"}, nil},
		{"divert hold, cap", map[string]string{"GATE_LIMIT_MODE": "cap", "GATE_DIVERT_HOLD": "5m"}, []string{"GATE_DIVERT_HOLD"}},
		{"no hold, cap", map[string]string{"GATE_LIMIT_MODE": "cap", "GATE_DIVERT_HOLD": "0"}, nil},
		{"adaptive settings, adaptive", map[string]string{"GATE_THRESHOLD_MODE": "adaptive", "GATE_ADAPTIVE_FLOOR": "50", "GATE_ADAPTIVE_MIN_HISTORY": "1h"}, nil},
		{"adaptive settings, static", map[string]string{"GATE_ADAPTIVE_FACTOR": "6", "GATE_ADAPTIVE_FLOOR": "50", "GATE_ADAPTIVE_CEILING": "5000",
			"GATE_ADAPTIVE_HALF_LIFE": "24h", "GATE_ADAPTIVE_MAX_SPIKE": "2h", "GATE_ADAPTIVE_MIN_HISTORY": "1h"},
			[]string{"GATE_ADAPTIVE_FACTOR", "GATE_ADAPTIVE_FLOOR", "GATE_ADAPTIVE_CEILING", "GATE_ADAPTIVE_HALF_LIFE", "GATE_ADAPTIVE_MAX_SPIKE", "GATE_ADAPTIVE_MIN_HISTORY"}},
		{"adaptive settings at their defaults, static", map[string]string{"GATE_ADAPTIVE_FACTOR": "4", "GATE_ADAPTIVE_MIN_HISTORY": "1440m"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := loadMap(tt.env)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var got []string
			for _, u := range c.Unread() {
				got = append(got, u.Key)
				if u.Value == "" || u.Why == "" {
					t.Errorf("%s: value %q, why %q", u.Key, u.Value, u.Why)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("unread %v, want %v", got, tt.want)
			}
		})
	}
}
