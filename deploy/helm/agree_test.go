package helm

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
)

// agreeCase is a value (YAML, merged over testdata/defaults.yaml) and whether the gate
// takes what the chart renders from it.
type agreeCase struct {
	name, values string
	ok           bool
}

// agreeCases are values where the schema, the templates and the gate's own checks of the
// variable they render must say the same.
var agreeCases = []agreeCase{
	// GATE_DIVERT_HOLD: unset (one window), or any Go duration of 0 or more (0 = no
	// hold); under the event clock only 0.
	{"divertHold unset", `limit: {divertHold: ""}`, true},
	{"divertHold 0", `limit: {divertHold: "0"}`, true},
	{"divertHold 0s", `limit: {divertHold: "0s"}`, true},
	{"divertHold 0ms", `limit: {divertHold: "0ms"}`, true},
	{"divertHold 0m0s", `limit: {divertHold: "0m0s"}`, true},
	{"divertHold 0.0s", `limit: {divertHold: "0.0s"}`, true},
	{"divertHold 90s", `limit: {divertHold: "90s"}`, true},
	{"divertHold 1m30s", `limit: {divertHold: "1m30s"}`, true},
	{"divertHold .5s", `limit: {divertHold: ".5s"}`, true},
	{"divertHold 0s event clock", `limit: {divertHold: "0s", clock: event}`, true},
	{"divertHold 0ms event clock", `limit: {divertHold: "0ms", clock: event}`, true},
	{"divertHold 1m event clock", `limit: {divertHold: "1m", clock: event}`, false},
	// GATE_MAX_EVENT_AGE: the event clock's; on the wall clock its default alone (it
	// bounds nothing there, and was taken silently).
	{"maxEventAge 1h event clock", `limit: {maxEventAge: "1h", clock: event}`, true},
	{"maxEventAge 1h wall clock", `limit: {maxEventAge: "1h"}`, false},
	{"maxEventAge 900s wall clock", `limit: {maxEventAge: "900s"}`, true},
	{"maxEventAge 15m wall clock", `limit: {maxEventAge: "15m"}`, true},
	{"divertHold -1s", `limit: {divertHold: "-1s"}`, false},
	{"divertHold 5 (no unit)", `limit: {divertHold: "5"}`, false},
	{"divertHold abc", `limit: {divertHold: "abc"}`, false},
	// GATE_KAFKA_FETCH_MAX_BYTES: a whole number of bytes from 1024 to 52428800.
	{"fetchMaxBytes 1024", `kafka: {fetchMaxBytes: 1024}`, true},
	{"fetchMaxBytes 52428800", `kafka: {fetchMaxBytes: 52428800}`, true},
	{"fetchMaxBytes 1000", `kafka: {fetchMaxBytes: 1000}`, false},
	{"fetchMaxBytes 52428801", `kafka: {fetchMaxBytes: 52428801}`, false},
	// GATE_STALL_NOT_READY, GATE_STALL_RESTART: a duration, any zero one turning it off.
	{"stallNotReady 0s", `kafka: {stallNotReady: "0s", stallRestart: "0s"}`, true},
	{"stallNotReady 0", `kafka: {stallNotReady: "0", stallRestart: "0"}`, true},
	{"stallNotReady -1s", `kafka: {stallNotReady: "-1s"}`, false},
	// ... longer than GATE_KAFKA_REBALANCE_TIMEOUT, and GATE_STALL_RESTART longer than it,
	// unless off.
	{"stallNotReady = rebalanceTimeout", `kafka: {stallNotReady: 60s}`, false},
	{"stallNotReady 61s", `kafka: {stallNotReady: 61s}`, true},
	{"rebalanceTimeout 3m, stallNotReady 2m", `kafka: {rebalanceTimeout: 3m}`, false},
	{"rebalanceTimeout 3m, stallNotReady 0", `kafka: {rebalanceTimeout: 3m, stallNotReady: "0"}`, true},
	{"stallRestart = stallNotReady", `kafka: {stallNotReady: 10m}`, false},
	{"stallRestart 0, stallNotReady 15m", `kafka: {stallNotReady: 15m, stallRestart: "0"}`, true},
	// ... and with GATE_STALL_NOT_READY off, GATE_STALL_RESTART held to its bounds.
	{"stallNotReady 0, stallRestart 30s", `kafka: {stallNotReady: "0", stallRestart: 30s}`, false},
	{"stallNotReady 0, stallRestart = rebalanceTimeout", `kafka: {stallNotReady: "0", stallRestart: 60s}`, false},
	{"stallNotReady 0, stallRestart 61s", `kafka: {stallNotReady: "0", stallRestart: 61s}`, true},
	{"exactly-once stallNotReady 0, stallRestart 6s, transactionInterval 5s", `kafka: {delivery: exactly-once, revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: 5s, stallNotReady: "0", stallRestart: 6s}`, false},
	{"exactly-once stallNotReady 0, stallRestart 6001ms, transactionInterval 5s", `kafka: {delivery: exactly-once, revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: 5s, stallNotReady: "0", stallRestart: 6001ms}`, true},
	// ... and with exactly-once longer than GATE_KAFKA_REBALANCE_TIMEOUT plus
	// GATE_TRANSACTION_INTERVAL: only a committed transaction is progress.
	{"exactly-once stallNotReady = rebalanceTimeout + transactionInterval", `kafka: {delivery: exactly-once, revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: 5s, stallNotReady: 6s}`, false},
	{"exactly-once stallNotReady 5s, transactionInterval 5s", `kafka: {delivery: exactly-once, revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: 5s, stallNotReady: 5s}`, false},
	{"exactly-once stallNotReady 6001ms", `kafka: {delivery: exactly-once, revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: 5s, stallNotReady: 6001ms}`, true},
	{"exactly-once stallNotReady 6s, transactionInterval 0", `kafka: {delivery: exactly-once, revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: "0", stallNotReady: 6s}`, true},
	{"exactly-once stallNotReady 0, transactionInterval 5s", `kafka: {delivery: exactly-once, revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: 5s, stallNotReady: "0", stallRestart: "0"}`, true},
	{"at-least-once stallNotReady 5s, transactionInterval 5s", `kafka: {revokeTimeout: 500ms, rebalanceTimeout: 1s, transactionInterval: 5s, stallNotReady: 5s}`, true},
	// GATE_TRANSACTION_TIMEOUT from 1s to 15m, GATE_TRANSACTION_INTERVAL up to 10s and
	// below half of it: checked in either delivery mode.
	{"transactionTimeout 15m", `kafka: {transactionTimeout: 15m}`, true},
	{"transactionTimeout 15m1s", `kafka: {transactionTimeout: 15m1s}`, false},
	{"transactionTimeout 20m exactly-once", `kafka: {delivery: exactly-once, transactionTimeout: 20m}`, false},
	{"transactionTimeout 999ms", `kafka: {transactionTimeout: 999ms}`, false},
	{"transactionInterval 10s", `kafka: {transactionInterval: 10s}`, true},
	{"transactionInterval 11s", `kafka: {transactionInterval: 11s}`, false},
	{"transactionInterval 7.499s timeout 15s", `kafka: {transactionTimeout: 15s, transactionInterval: 7.499s}`, true},
	{"transactionInterval 7.5s timeout 15s", `kafka: {transactionTimeout: 15s, transactionInterval: 7.5s}`, false},
	// GATE_COLD_WRITE_INTERVAL: unset (once a window), 0 or a duration (at most the window).
	{"coldWriteInterval 30s", `sync: {coldWriteInterval: "30s"}`, true},
	{"coldWriteInterval 0", `sync: {coldWriteInterval: "0"}`, true},
	{"coldWriteInterval 0s", `sync: {coldWriteInterval: "0s"}`, true},
	{"coldWriteInterval 30 (no unit)", `sync: {coldWriteInterval: "30"}`, false},
	{"coldWriteInterval abc", `sync: {coldWriteInterval: "abc"}`, false},
	// GATE_THRESHOLD, GATE_ADAPTIVE_FLOOR, GATE_ADAPTIVE_CEILING: at most limit.MaxThreshold
	// (2^43-1).
	{"threshold at max", `limit: {threshold: 8796093022207}`, true},
	{"threshold over max", `limit: {threshold: 8796093022208}`, false},
	{"adaptive floor over max", `limit: {adaptive: {floor: 8796093022208}}`, false},
	{"adaptive ceiling over max", `limit: {adaptive: {ceiling: 8796093022208}}`, false},
	{"extra threshold over max", `limit: {extra: [{window: 1h, threshold: 8796093022208}]}`, false},
	// GATE_WINDOW: from 2ms (longer than a tick of 1ms, the shortest) to 8784h (366 days).
	{"window 2ms", `{limit: {window: 2ms}, sync: {tickInterval: 1ms, interval: 1ms}}`, true},
	{"window 2000000ns", `{limit: {window: 2000000ns}, sync: {tickInterval: 1ms, interval: 1ms}}`, true},
	{"window .002s", `{limit: {window: .002s}, sync: {tickInterval: 1ms, interval: 1ms}}`, true},
	{"window 1999us", `{limit: {window: 1999us}, sync: {tickInterval: 1ms, interval: 1ms}}`, false},
	{"window 1ms", `{limit: {window: 1ms}, sync: {tickInterval: 500us}}`, false},
	// GATE_TICK_INTERVAL: 1ms at least (1ns was taken: no Redis round trip fits).
	{"tickInterval 1ms", `{limit: {window: 1s}, sync: {tickInterval: 1ms}}`, true},
	{"tickInterval 999us", `{limit: {window: 1s}, sync: {tickInterval: 999us}}`, false},
	{"tickInterval 1ns", `{limit: {window: 1s}, sync: {tickInterval: 1ns}}`, false},
	{"window 500us", `{limit: {window: 500us}, sync: {tickInterval: 100us}}`, false},
	{"window 500us default tick", `limit: {window: 500us}`, false},
	{"window 8784h", `limit: {window: 8784h}`, true},
	{"window 527040m", `limit: {window: 527040m}`, true},
	{"window 8785h", `limit: {window: 8785h}`, false},
	{"window 8784h0m1s", `limit: {window: 8784h0m1s}`, false},
	{"window 8784.0001h", `limit: {window: 8784.0001h}`, false},
	{"window 8784h with extra", `limit: {window: 8784h, extra: [{window: 1h, threshold: 10}]}`, true},
	{"window 8785h with extra", `limit: {window: 8785h, extra: [{window: 1h, threshold: 10}]}`, false},
	{"window 500us with rules (unused)", "{limit: {window: 500us}, rules: [{name: all, key: 'json:team_id', limits: ['1m:10']}]}", true},
	// GATE_CACHE_IDLE_TIMEOUT: at least 1s.
	{"cacheIdleTimeout 1s", `limit: {cacheIdleTimeout: 1s}`, true},
	{"cacheIdleTimeout 1000ms", `limit: {cacheIdleTimeout: 1000ms}`, true},
	{"cacheIdleTimeout 1.5s", `limit: {cacheIdleTimeout: 1.5s}`, true},
	{"cacheIdleTimeout 500ms", `limit: {cacheIdleTimeout: 500ms}`, false},
	{"cacheIdleTimeout 999ms", `limit: {cacheIdleTimeout: 999ms}`, false},
	{"cacheIdleTimeout .5s", `limit: {cacheIdleTimeout: .5s}`, false},
	{"cacheIdleTimeout 999999999ns", `limit: {cacheIdleTimeout: 999999999ns}`, false},
	// GATE_ADAPTIVE_CEILING: 0, or at least GATE_ADAPTIVE_FLOOR.
	{"adaptive ceiling 0", `limit: {adaptive: {floor: 100, ceiling: 0}}`, true},
	{"adaptive ceiling = floor", `limit: {adaptive: {floor: 100, ceiling: 100}}`, true},
	{"adaptive ceiling over floor", `limit: {adaptive: {floor: 100, ceiling: 101}}`, true},
	{"adaptive ceiling under floor", `limit: {adaptive: {floor: 100, ceiling: 99}}`, false},
	{"adaptive ceiling 1", `limit: {adaptive: {ceiling: 1}}`, false},
	{"adaptive ceiling under floor adaptive", `limit: {thresholdMode: adaptive, adaptive: {floor: 1000, ceiling: 999}}`, false},
	// GATE_ADAPTIVE_HALF_LIFE, GATE_ADAPTIVE_MIN_HISTORY: at least the window (an hour when
	// the window is longer in static mode), whatever the mode.
	{"halfLife = window", `limit: {adaptive: {halfLife: 60s}}`, true},
	{"halfLife 1m", `limit: {adaptive: {halfLife: 1m}}`, true},
	{"halfLife 30s", `limit: {adaptive: {halfLife: 30s}}`, false},
	{"halfLife 59.999s", `limit: {adaptive: {halfLife: 59.999s}}`, false},
	{"halfLife 29m window 30m adaptive", `limit: {window: 30m, thresholdMode: adaptive, adaptive: {halfLife: 29m}}`, false},
	{"halfLife 30m window 30m adaptive", `limit: {window: 30m, thresholdMode: adaptive, adaptive: {halfLife: 30m}}`, true},
	{"halfLife 1h window 2h static", `limit: {window: 2h, adaptive: {halfLife: 1h}}`, true},
	{"halfLife 59m window 2h static", `limit: {window: 2h, adaptive: {halfLife: 59m}}`, false},
	{"minHistory = window", `limit: {adaptive: {minHistory: 60s}}`, true},
	{"minHistory 59s", `limit: {adaptive: {minHistory: 59s}}`, false},
	{"minHistory 1h window 2h static", `limit: {window: 2h, adaptive: {minHistory: 1h}}`, true},
	{"minHistory 59m window 2h static", `limit: {window: 2h, adaptive: {minHistory: 59m}}`, false},
	{"minHistory 10m window 15m adaptive", `limit: {window: 15m, thresholdMode: adaptive, adaptive: {minHistory: 10m}}`, false},
	// GATE_ADAPTIVE_MAX_SPIKE: from 1h plus two windows (the window at most an hour in
	// static mode) to 168h.
	{"maxSpike 168h", `limit: {adaptive: {maxSpike: 168h}}`, true},
	{"maxSpike 200h", `limit: {adaptive: {maxSpike: 200h}}`, false},
	{"maxSpike 168h1ns", `limit: {adaptive: {maxSpike: 168h1ns}}`, false},
	{"maxSpike 1h2m", `limit: {adaptive: {maxSpike: 1h2m}}`, true},
	{"maxSpike 62m", `limit: {adaptive: {maxSpike: 62m}}`, true},
	{"maxSpike 1h1m59s", `limit: {adaptive: {maxSpike: 1h1m59s}}`, false},
	{"maxSpike 1h", `limit: {adaptive: {maxSpike: 1h}}`, false},
	{"maxSpike 2h window 30m", `limit: {window: 30m, adaptive: {maxSpike: 2h}}`, true},
	{"maxSpike 1h59m window 30m adaptive", `limit: {window: 30m, thresholdMode: adaptive, adaptive: {maxSpike: 1h59m}}`, false},
	{"maxSpike 3h window 2h static", `limit: {window: 2h, adaptive: {maxSpike: 3h}}`, true},
	{"maxSpike 2h59m window 2h static", `limit: {window: 2h, adaptive: {maxSpike: 2h59m}}`, false},
	{"maxSpike 1h2m window 2h with rules (60s)", "{limit: {window: 2h, adaptive: {maxSpike: 1h2m}}, rules: [{name: all, key: 'json:team_id', limits: ['1m:10']}]}", true},
	// With rules, against each adaptive rule's first window only (GATE_WINDOW unset):
	// TestRulesAdaptiveDurationsAsTheGateChecksThem gives the rules to the gate too.
	{"halfLife 30s with rules, none adaptive", "{limit: {adaptive: {halfLife: 30s}}, rules: [{name: all, key: 'json:team_id', limits: ['1m:10']}]}", true},
	// GATE_TICK_INTERVAL: shorter than GATE_WINDOW (under rules, which leave it unset, than
	// each rule's windows: the gate reads them from the file, which gate env -check does
	// not, so TestRulesTickAgainstTheRulesWindows checks a rule's window the tick's), and
	// no longer than GATE_SYNC_INTERVAL.
	{"tickInterval 59s", `sync: {tickInterval: 59s, interval: 59s}`, true},
	{"tickInterval 59.999s", `sync: {tickInterval: 59.999s, interval: 1m}`, true},
	{"tickInterval = window", `sync: {tickInterval: 60s, interval: 60s}`, false},
	{"tickInterval 1m", `sync: {tickInterval: 1m, interval: 2m}`, false},
	{"tickInterval over window", `{limit: {window: 10s}, sync: {tickInterval: 15s}}`, false},
	{"tickInterval 1s window 2s", `limit: {window: 2s}`, true},
	{"tickInterval 1s window 1s", `limit: {window: 1s}`, false},
	{"tickInterval 90s window 2m", `{limit: {window: 2m}, sync: {tickInterval: 90s, interval: 90s}}`, true},
	{"tickInterval 60s with rules", "{sync: {tickInterval: 60s, interval: 60s}, rules: [{name: all, key: 'json:team_id', limits: ['2m:10']}]}", true},
	{"tickInterval 90s with rules of 1h", "{sync: {tickInterval: 90s, interval: 90s}, rules: [{name: all, key: 'json:team_id', limits: ['1h:10']}]}", true},
	{"tickInterval over sync interval", `sync: {tickInterval: 20s}`, false},
	{"sync interval = tickInterval", `sync: {tickInterval: 15s, interval: 15s}`, true},
	// GATE_COLD_WRITE_INTERVAL: at most the window.
	{"coldWriteInterval = window", `sync: {coldWriteInterval: 60s}`, true},
	{"coldWriteInterval 1m", `sync: {coldWriteInterval: 1m}`, true},
	{"coldWriteInterval 61s", `sync: {coldWriteInterval: 61s}`, false},
	{"coldWriteInterval 1m0.001s", `sync: {coldWriteInterval: 1m0.001s}`, false},
	{"coldWriteInterval 90s window 2m", `{limit: {window: 2m}, sync: {coldWriteInterval: 90s}}`, true},
	{"coldWriteInterval 2m window 90s", `{limit: {window: 90s}, sync: {coldWriteInterval: 2m}}`, false},
	{"coldWriteInterval 5m with rules (each rule's window caps it)", "{sync: {coldWriteInterval: 5m}, rules: [{name: all, key: 'json:team_id', limits: ['1h:10']}]}", true},
	// GATE_REDIS_KEY_TTL: 0, or a duration of at most 8784h (366 days).
	{"keyTTL 8784h", `redis: {keyTTL: 8784h}`, true},
	{"keyTTL 8785h", `redis: {keyTTL: 8785h}`, false},
	{"keyTTL 8784h0.5s", `redis: {keyTTL: 8784h0.5s}`, false},
	// GATE_FORCE_OVERFLOW: each team once.
	{"forceOverflow distinct", `routing: {forceOverflow: [a, b]}`, true},
	{"forceOverflow a team twice", `routing: {forceOverflow: [a, b, a]}`, false},
	// GATE_FORCE_OVERFLOW: the gate trims each entry's spaces, so " a" and "a" are one
	// team twice, and " a" forces a, not the key " a".
	{"forceOverflow a team twice, once spaced", `routing: {forceOverflow: [" a", a]}`, false},
	{"forceOverflow a team with a space inside", `routing: {forceOverflow: ["a b"]}`, true},
	// GATE_KAFKA_BROKERS: host:port, the port from 1 to 65535, no user info.
	{"brokers host:9092", `kafka: {brokers: ["kafka-0.kafka:9092"]}`, true},
	{"brokers [::1]:9092", `kafka: {brokers: ["[::1]:9092"]}`, true},
	{"brokers port 65535", `kafka: {brokers: ["kafka:65535"]}`, true},
	{"brokers port 09092", `kafka: {brokers: ["kafka:09092"]}`, true},
	{"brokers port 0", `kafka: {brokers: ["kafka:0"]}`, false},
	{"brokers port 00", `kafka: {brokers: ["kafka:00"]}`, false},
	{"brokers port 65536", `kafka: {brokers: ["kafka:65536"]}`, false},
	{"brokers port 99999", `kafka: {brokers: ["kafka:99999"]}`, false},
	{"brokers user info", `kafka: {brokers: ["user@kafka:9092"]}`, false},
	{"brokers two colons", `kafka: {brokers: ["a:b:9092"]}`, false},
	{"brokers host with a space", `kafka: {brokers: ["kafka 0:9092"]}`, false},
	// GATE_COMMIT_INTERVAL: at least 10ms.
	{"commitInterval 10ms", `kafka: {commitInterval: 10ms}`, true},
	{"commitInterval .01s", `kafka: {commitInterval: .01s}`, true},
	{"commitInterval 9ms", `kafka: {commitInterval: 9ms}`, false},
	{"commitInterval 1ns", `kafka: {commitInterval: 1ns}`, false},
	// GATE_REDIS_SENTINEL_ADDRS: host:port as brokers are.
	{"sentinel addrs s:26379", `redis: {mode: sentinel, urls: ["redis://primary:6379"], sentinel: {master: m, addrs: ["s:26379"]}}`, true},
	{"sentinel addrs [fd00::1]:26379", `redis: {mode: sentinel, urls: ["redis://primary:6379"], sentinel: {master: m, addrs: ["[fd00::1]:26379"]}}`, true},
	{"sentinel addrs port 0", `redis: {mode: sentinel, urls: ["redis://primary:6379"], sentinel: {master: m, addrs: ["s:0"]}}`, false},
	{"sentinel addrs port 99999", `redis: {mode: sentinel, urls: ["redis://primary:6379"], sentinel: {master: m, addrs: ["s:99999"]}}`, false},
	{"sentinel addrs host with a space", `redis: {mode: sentinel, urls: ["redis://primary:6379"], sentinel: {master: m, addrs: ["s 1:26379"]}}`, false},
	// GATE_KAFKA_CLIENT_ID: at most 247 bytes.
	{"clientId 247 bytes", `kafka: {clientId: "` + strings.Repeat("c", 247) + `"}`, true},
	{"clientId 248 bytes", `kafka: {clientId: "` + strings.Repeat("c", 248) + `"}`, false},
	{"clientId 124 two-byte characters", `kafka: {clientId: "` + strings.Repeat("é", 124) + `"}`, false},
	// GATE_THRESHOLD_MODE adaptive: a window that divides an hour.
	{"adaptive window 20m", `limit: {window: 20m, thresholdMode: adaptive}`, true},
	{"adaptive window 7m", `limit: {window: 7m, thresholdMode: adaptive}`, false},
	{"adaptive window 2h", `limit: {window: 2h, thresholdMode: adaptive, adaptive: {maxSpike: 6h}}`, false},
	// GATE_MAX_BUFFERED_BYTES: at least GATE_KAFKA_MAX_MESSAGE_BYTES less a batch's 61-byte
	// header (a review: the chart rendered less, every pod then refused to start).
	{"maxBufferedBytes under maxMessageBytes", `kafka: {maxMessageBytes: 10485760, maxBufferedBytes: 8388608}`, false},
	{"maxBufferedBytes at maxMessageBytes less 61", `kafka: {maxMessageBytes: 10485760, maxBufferedBytes: 10485699}`, true},
	{"maxBufferedBytes 62 under maxMessageBytes", `kafka: {maxMessageBytes: 10485760, maxBufferedBytes: 10485698}`, false},
	// GATE_SYNC_INTERVAL: at most 8784h (a review: 9000h rendered).
	{"sync interval 9000h", `sync: {interval: 9000h}`, false},
	// A zero written as a number where the docs offer "0" (a review: the schema took only
	// strings).
	{"stallNotReady 0 as a number", `kafka: {stallNotReady: 0, stallRestart: 0}`, true},
	{"stallRestart 0 as a number", `kafka: {stallRestart: 0}`, true},
	{"transactionInterval 0 as a number", `kafka: {delivery: exactly-once, transactionInterval: 0}`, true},
	{"keyTTL 0 as a number", `redis: {keyTTL: 0}`, true},
	{"stallRestart 5 as a number", `kafka: {stallRestart: 5}`, false},
	// GATE_VALIDATE_JSON: only where the key is read from JSON.
	{"validateJson with json:team_id", `routing: {validateJson: true}`, true},
	{"validateJson with the record key", `routing: {validateJson: true, keyFrom: key}`, false},
	{"validateJson with a header", `routing: {validateJson: true, keyFrom: "header:team"}`, false},
	// GATE_REDIS_URLS: a database number alone for a path, and no option the gate's
	// clients set themselves (a review: the chart rendered these, the pods crash-looped).
	// An option go-redis does not know is left to the gate's start, which names it: the
	// chart would have to keep go-redis's list.
	{"redis url with a database", `redis: {urls: ["redis://r:6379/3"]}`, true},
	{"redis url ending in /", `redis: {urls: ["redis://r:6379/"]}`, true},
	{"redis url with client_name", `redis: {urls: ["redis://r:6379/0?client_name=gate"]}`, true},
	{"redis url with a negative database", `redis: {urls: ["redis://r:6379/-1"]}`, false},
	{"redis url with a path of two parts", `redis: {urls: ["redis://r:6379/0/1"]}`, false},
	{"redis url with dial_timeout", `redis: {urls: ["redis://r:6379/0?dial_timeout=1s"]}`, false},
	{"redis url with read_timeout second", `redis: {urls: ["redis://r:6379?client_name=g&read_timeout=2s"]}`, false},
	// GATE_OVERRIDES: team=limit pairs split at a pair's last '=' (a key may hold '=', a
	// base64 one ends so; a review: the schema refused them), each limit from 1 to the
	// largest threshold; no ',' in a key.
	{"overrides key holding =", `limit: {overrides: {"dGVhbQ==": 5000, "a=b": 7}}`, true},
	{"overrides key holding ,", `limit: {overrides: {"a,b": 7}}`, false},
	{"overrides at the largest threshold", `limit: {overrides: {t: 8796093022207}}`, true},
	{"overrides over the largest threshold", `limit: {overrides: {t: 8796093022208}}`, false},
	{"overrides 0", `limit: {overrides: {t: 0}}`, false},
	// GATE_KEY_FROM, GATE_EVENT_TIME_FROM: each field, and each part of a dotted one, not
	// empty and neither starting nor ending with white space, a header name likewise (the
	// value trimmed, as every variable is). The schema's first patterns rendered these for
	// gates that refuse them: the pods crash-looped.
	{"keyFrom json:team_id+distinct_id", `routing: {keyFrom: "json:team_id+distinct_id"}`, true},
	{"keyFrom json:properties.team", `routing: {keyFrom: "json:properties.team"}`, true},
	{"keyFrom json:a b", `routing: {keyFrom: "json:a b"}`, true},
	{"keyFrom header:x-team+id", `routing: {keyFrom: "header:x-team+id"}`, true},
	{"keyFrom ending in a space", `routing: {keyFrom: "json:team_id+distinct_id "}`, true},
	{"keyFrom json: team", `routing: {keyFrom: "json: team"}`, false},
	{"keyFrom json:a+ b", `routing: {keyFrom: "json:a+ b"}`, false},
	{"keyFrom json:a..b", `routing: {keyFrom: "json:a..b"}`, false},
	{"keyFrom json quoted field", `routing: {keyFrom: 'json:"a"'}`, false},
	{"keyFrom json:a+json:b", `routing: {keyFrom: "json:a+json:b"}`, false},
	{"keyFrom json:a+header:b", `routing: {keyFrom: "json:a+header:b"}`, false},
	{"keyFrom json:a+key (a field named key)", `routing: {keyFrom: "json:a+key"}`, true},
	{"keyFrom header in quotes", `routing: {keyFrom: 'header:"x"'}`, false},
	{"keyFrom a later field in quotes", `routing: {keyFrom: "json:a+'b.c'"}`, false},
	{"keyFrom a field holding a quote", `routing: {keyFrom: 'json:a"b'}`, true},
	{"keyFrom json:a.", `routing: {keyFrom: "json:a."}`, false},
	{"keyFrom json:a+", `routing: {keyFrom: "json:a+"}`, false},
	{"keyFrom header: x", `routing: {keyFrom: "header: x"}`, false},
	{"eventTimeFrom json:ts", `limit: {clock: event, eventTimeFrom: "json:ts"}`, true},
	{"eventTimeFrom json:props.ts", `limit: {clock: event, eventTimeFrom: "json:props.ts"}`, true},
	{"eventTimeFrom json: ts", `limit: {clock: event, eventTimeFrom: "json: ts"}`, false},
	{"eventTimeFrom json:a..b", `limit: {clock: event, eventTimeFrom: "json:a..b"}`, false},
}

// TestChartAgreesWithGate: for each of agreeCases the chart (values.schema.json, then
// the templates' own checks) accepts the value exactly when the gate accepts the
// environment it renders. A value the chart takes and the gate refuses installs and
// crash-loops; one the chart refuses and the gate takes cannot be set. The gate's verdict
// is checked too (`gate env -check` on the environment rendered without the schema), so
// that a case's ok states what the gate does.
func TestChartAgreesWithGate(t *testing.T) {
	bin, err := gateBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range agreeCases {
		t.Run(tc.name, func(t *testing.T) {
			vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, tc.values))
			_, chartErr := render(t, vals, capabilities())
			switch {
			case tc.ok && chartErr != nil:
				t.Errorf("the gate takes %s; the chart refuses it: %v", tc.values, chartErr)
			case !tc.ok && chartErr == nil:
				t.Errorf("the gate refuses %s; the chart renders it (the pods would crash-loop)", tc.values)
			}
			// The gate's verdict, on what the templates render without the schema.
			d, tmplErr := renderWithoutSchema(t, vals)
			if tmplErr != nil {
				if tc.ok {
					t.Errorf("the templates refuse %s: %v", tc.values, tmplErr)
				}
				return // refused by the templates' own check: the gate never sees it
			}
			out, gateErr := gateCheck(bin, d)
			if tc.ok != (gateErr == nil) {
				t.Errorf("case says the gate %s %s, but gate env -check: %v\n%s", map[bool]string{true: "takes", false: "refuses"}[tc.ok], tc.values, gateErr, out)
			}
		})
	}
}

// renderWithoutSchema renders vals as `helm install --skip-schema-validation` would and
// returns the Deployment.
func renderWithoutSchema(t *testing.T, vals map[string]any) (*appsv1.Deployment, error) {
	t.Helper()
	c := mustChart(t)
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValuesWithSchemaValidation(c, vals, opts, capabilities(), true)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return nil, err
	}
	r := rendered{files: map[string]string{}}
	for name, out := range files {
		if !strings.HasSuffix(name, "NOTES.txt") {
			r.files[name] = out
		}
	}
	objs, err := decode(r)
	if err != nil {
		t.Fatal(err)
	}
	return objs.typed["Deployment"][0].(*appsv1.Deployment), nil
}
