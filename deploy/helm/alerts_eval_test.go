package helm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	engine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/template"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// evalPod is a gate pod the chart's default selector picks (release gate, namespace ingest).
const evalPod = `namespace="ingest", pod="gate-capture-gate-7d9f8b6c5-x2k4p"`

// gateScraped is the series Prometheus keeps of the gate of evalPod itself, started at
// minute start and scraped from then on for minutes minutes: up, and the process's start
// time (the alerts on a counter's growth count a new series whole only on a gate scraped
// in the hour before their window, or started in it or since).
func gateScraped(start, minutes int) string {
	skip := ""
	if start > 0 {
		skip = fmt.Sprintf("_x%d ", start)
	}
	return fmt.Sprintf("  up{%s} %s1x%d\n  process_start_time_seconds{%s} %s%dx%d\n", evalPod, skip, minutes, evalPod, skip, start*60, minutes)
}

// firingAt evaluates the chart's alert name (rendered with the defaults) with
// Prometheus' query engine at each of at, minutes after the start of load, and returns
// whether it fired then: as Prometheus does, once its expression returns a series. load
// has a series a line, as promtool's tests write them: its name and labels, then a sample
// a minute from minute 0 (0x4 1x60: 0 five times, then 1 sixty-one times).
func firingAt(t *testing.T, name, load string, at ...int) []bool {
	t.Helper()
	return firingAtWith(t, "prometheusRule: {enabled: true}", name, load, at...)
}

// firingAtWith is firingAt with the chart's defaults and values (YAML) merged over them,
// e.g. an alert's threshold raised.
func firingAtWith(t *testing.T, values, name, load string, at ...int) []bool {
	t.Helper()
	var fired []bool
	for _, n := range alertsAt(t, values, name, load, at...) {
		fired = append(fired, n > 0)
	}
	return fired
}

// alertSeries is how many alerts name fires at minute m: the series its expression returns.
func alertSeries(t *testing.T, values, name, load string, m int) int {
	t.Helper()
	return alertsAt(t, values, name, load, m)[0]
}

// alertsAt evaluates as firingAtWith does and returns how many series the expression
// returns at each of at: one alert each.
func alertsAt(t *testing.T, values, name, load string, at ...int) []int {
	t.Helper()
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, values))
	var fired []int
	for _, v := range queryAt(t, alertExpr(t, vals, name), load, at...) {
		fired = append(fired, len(v))
	}
	return fired
}

// queryAt evaluates expr with Prometheus' query engine over load (as alertsAt takes it)
// at each of at, minutes after the start of load, and returns the vector at each.
func queryAt(t *testing.T, expr, load string, at ...int) []engine.Vector {
	t.Helper()
	var series []storage.Series
	for _, l := range strings.Split(strings.TrimSpace(load), "\n") {
		lbls, vs, err := promql.ParseSeriesDesc(strings.TrimSpace(l))
		if err != nil {
			t.Fatalf("series %q: %v", l, err)
		}
		var ss []chunks.Sample
		for i, v := range vs {
			if !v.Omitted {
				ss = append(ss, floatSample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		series = append(series, storage.NewListSeries(lbls, ss))
	}
	slices.SortFunc(series, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	db := storage.QueryableFunc(func(int64, int64) (storage.Querier, error) {
		return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var sel []storage.Series
			for _, s := range series {
				if matchAll(s.Labels(), ms) {
					sel = append(sel, s)
				}
			}
			return &seriesList{s: sel, i: -1}
		}}, nil
	})
	ng := engine.NewEngine(engine.EngineOpts{MaxSamples: 1_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	out := make([]engine.Vector, len(at))
	for i, m := range at {
		q, err := ng.NewInstantQuery(context.Background(), db, nil, expr, time.UnixMilli(int64(m)*time.Minute.Milliseconds()))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s: %v", expr, res.Err)
		}
		v, err := res.Vector()
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		out[i] = slices.Clone(v) // the query's own, until Close
		q.Close()
	}
	return out
}

func matchAll(ls labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(ls.Get(m.Name)) {
			return false
		}
	}
	return true
}

// seriesList is a storage.SeriesSet of series in memory.
type seriesList struct {
	s []storage.Series
	i int
}

func (l *seriesList) Next() bool                        { l.i++; return l.i < len(l.s) }
func (l *seriesList) At() storage.Series                { return l.s[l.i] }
func (l *seriesList) Err() error                        { return nil }
func (l *seriesList) Warnings() annotations.Annotations { return nil }

// floatSample is a float sample at t (ms).
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }

// TestPartitionStoppedAlertLastsWhileStopped: a partition stopped at minute 5 stays
// stopped until minute 65, when it is revoked (gate_partitions_stopped back to 0; the
// counter of undeliverable records stays at 1). GatePartitionStopped fires for the whole
// stop and resolves after it. Before, it read increase(...[15m]) of the counter and
// resolved at minute 20, the partition still stopped and the gate not ready.
func TestPartitionStoppedAlertLastsWhileStopped(t *testing.T) {
	load := fmt.Sprintf("  gate_partitions_stopped{%s} 0x4 1x60 0x20\n", evalPod) +
		fmt.Sprintf("  gate_records_undeliverable_total{%s, action=\"stopped\"} 0x4 1x80\n", evalPod) +
		fmt.Sprintf("  gate_records_undeliverable_total{%s, action=\"skipped\"} 0x84\n", evalPod)
	at := []int{2, 6, 19, 21, 40, 64, 70, 84}
	want := []bool{false, true, true, true, true, true, false, false}
	if got := firingAt(t, "GatePartitionStopped", load, at...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GatePartitionStopped at minutes %v fired %v, want %v (stopped from 5 to 65)", at, got, want)
	}
}

// TestCacheNearCapacityAlertPerWindow: under GATE_CLOCK=event each window's cache holds up
// to GATE_CACHE_CAPACITY (300000 by default) on its own, and a window's keys stay cached a
// window or two after it. A gate whose two windows hold 160000 keys each (53 %) is not
// near its capacity; one whose fullest window holds 280000 is.
// GateLimiterCacheNearCapacity fires for the second only. Before, it compared
// gate_limiter_cache_entries, every window's keys added up (320000), with 0.9 x the
// capacity and fired for the first.
func TestCacheNearCapacityAlertPerWindow(t *testing.T) {
	for _, tc := range []struct {
		entries, fullest int
		want             bool
	}{
		{320000, 160000, false},
		{400000, 280000, true},
		{250000, 250000, false}, // wall clock: one cache
		{290000, 290000, true},
	} {
		load := fmt.Sprintf("  gate_limiter_cache_entries{%s} %dx40\n", evalPod, tc.entries) +
			fmt.Sprintf("  gate_limiter_cache_fullest_entries{%s} %dx40\n", evalPod, tc.fullest)
		if got := firingAt(t, "GateLimiterCacheNearCapacity", load, 30)[0]; got != tc.want {
			t.Errorf("%d keys cached, the fullest cache %d of 300000: GateLimiterCacheNearCapacity fired %v, want %v",
				tc.entries, tc.fullest, got, tc.want)
		}
	}
}

// alertText is the summary and description of the chart's alert name (rendered with the
// defaults) as Prometheus expands them for an alert of lbls at value.
func alertText(t *testing.T, name string, lbls map[string]string, value float64) string {
	t.Helper()
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true}"))
	u, _ := promRule(t, vals)
	for _, g := range u.Object["spec"].(map[string]any)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			if r["alert"] != name {
				continue
			}
			data := template.AlertTemplateData(lbls, nil, "", engine.Sample{F: value})
			var out []string
			for _, k := range []string{"summary", "description"} {
				// As Prometheus' rules manager expands an alert's annotations.
				text := "{{$labels := .Labels}}{{$value := .Value}}" + r["annotations"].(map[string]any)[k].(string)
				s, err := template.NewTemplateExpander(context.Background(), text, name, data, 0, nil, nil, nil).Expand()
				if err != nil {
					t.Fatalf("%s's %s: %v", name, k, err)
				}
				out = append(out, s)
			}
			return strings.Join(out, "\n")
		}
	}
	t.Fatalf("no alert %s", name)
	return ""
}

// TestTransactionRecoveriesAlertSaysItsCause: GateTransactionRecoveries fires for the
// recoveries of gate_transaction_recoveries_total that count toward the gate's stop
// (internal/consume recoverFenced), of either cause: slow_transaction, a transaction that
// outlived GATE_TRANSACTION_TIMEOUT and was fenced, and end_error, ending a transaction
// failed with its outcome unknown, no fence at all. Summed, the alert has no cause label:
// what it says names both, each with what happened, and where to tell which. Before, its
// summary said "after fenced transactions" for an end_error too.
func TestTransactionRecoveriesAlertSaysItsCause(t *testing.T) {
	for _, cause := range []string{"slow_transaction", "end_error"} {
		load := fmt.Sprintf("  gate_transaction_recoveries_total{%s, cause=%q} 0x4 1 2 2x10\n", evalPod, cause)
		if !firingAt(t, "GateTransactionRecoveries", load, 7)[0] {
			t.Errorf("cause %s: two recoveries in 10 minutes did not fire GateTransactionRecoveries", cause)
		}
	}
	text := alertText(t, "GateTransactionRecoveries", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p"}, 2)
	for _, want := range []string{"2 times", "fenced by the broker (cause slow_transaction)", "whose end failed, its outcome unknown (end_error)",
		"gate_transaction_recoveries_total{cause}", "a sixth stops the gate"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateTransactionRecoveries says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestNotReadyAlertSkipsFinishedPods: kube-state-metrics goes on exporting
// kube_pod_status_ready for a pod that has ended, Failed or Succeeded, until the pod object
// is deleted: a gate pod evicted under node pressure, or ended by a node's graceful
// shutdown, is such a pod, named as a gate is, never ready again, while its ReplicaSet
// runs a new one in its place. GateNotReady fired for it until someone deleted the pod,
// with nothing to curl. A running or pending pod that is not ready still fires it.
func TestNotReadyAlertSkipsFinishedPods(t *testing.T) {
	for _, tc := range []struct {
		phase string
		want  bool
	}{
		{"Failed", false}, // evicted, or ended by a node's shutdown
		{"Succeeded", false},
		{"Running", true},
		{"Pending", true},
	} {
		load := fmt.Sprintf("  kube_pod_status_ready{%s, condition=\"true\"} 0x40\n", evalPod) +
			fmt.Sprintf("  kube_pod_status_ready{%s, condition=\"false\"} 1x40\n", evalPod)
		for _, p := range []string{"Pending", "Running", "Succeeded", "Failed", "Unknown"} {
			v := 0
			if p == tc.phase {
				v = 1
			}
			load += fmt.Sprintf("  kube_pod_status_phase{%s, phase=%q} %dx40\n", evalPod, p, v)
		}
		if got := firingAt(t, "GateNotReady", load, 30)[0]; got != tc.want {
			t.Errorf("a gate pod %s and not ready: GateNotReady fired %v, want %v", tc.phase, got, tc.want)
		}
	}
}

// TestTransactionRecoveriesAlertSumsCauses: slow_transaction and end_error recoveries
// count together toward the gate's stop (internal/consume recoverFenced: five within 10
// minutes are recovered from, the sixth of either stops the gate), so
// GateTransactionRecoveries fires on their sum: one of each in 10 minutes is two, its
// default threshold. group_churn, never counted, does not add. Before, it took each cause
// on its own and stayed silent at one of each; with its threshold raised to 4, at three
// and two, the gate one recovery from its stop.
func TestTransactionRecoveriesAlertSumsCauses(t *testing.T) {
	for _, tc := range []struct {
		slow, end, churn int
		want             bool
	}{
		{1, 1, 0, true},
		{1, 0, 5, false},
		{0, 1, 0, false},
		{2, 0, 0, true},
	} {
		load := ""
		for _, c := range []struct {
			cause string
			n     int
		}{{"slow_transaction", tc.slow}, {"end_error", tc.end}, {"group_churn", tc.churn}} {
			load += fmt.Sprintf("  gate_transaction_recoveries_total{%s, cause=%q} 0x4 %dx10\n", evalPod, c.cause, c.n)
		}
		if got := firingAt(t, "GateTransactionRecoveries", load, 7)[0]; got != tc.want {
			t.Errorf("%d slow_transaction, %d end_error and %d group_churn recoveries in 10 minutes: GateTransactionRecoveries fired %v, want %v",
				tc.slow, tc.end, tc.churn, got, tc.want)
		}
	}
}

// TestRedisErrorsAlertSumsCauses: GateRedisErrors' threshold is failed Redis pipelines a
// tick, per gate and instance (0.1/s at the default 1s tick), whatever failed them: an instance
// flapping between hanging (timeout) and refusing connections (connection) fails the
// gate's ticks as much as one failing one way. 4 of each a minute, 0.13/s, fire it; 4 of
// one alone, 0.07/s, do not, nor do 4 a minute on each of two instances. Before, it took
// each cause on its own and stayed silent at 4 and 4.
func TestRedisErrorsAlertSumsCauses(t *testing.T) {
	for _, tc := range []struct {
		load string
		want bool
	}{
		{`cause="timeout", redis_instance="0"} 0+4x20` + "\n" + `cause="connection", redis_instance="0"} 0+4x20`, true},
		{`cause="timeout", redis_instance="0"} 0+4x20`, false},
		{`cause="timeout", redis_instance="0"} 0+4x20` + "\n" + `cause="connection", redis_instance="1"} 0+4x20`, false},
		{`cause="timeout", redis_instance="0"} 0+7x20`, true},
		{`cause="tls", redis_instance="0"} 0+7x20`, true}, // a certificate refused fails every tick too
	} {
		load := ""
		for _, l := range strings.Split(tc.load, "\n") {
			load += fmt.Sprintf("  gate_limiter_errors_total{%s, %s\n", evalPod, l)
		}
		if got := firingAt(t, "GateRedisErrors", load, 15)[0]; got != tc.want {
			t.Errorf("%s: GateRedisErrors fired %v, want %v", load, got, tc.want)
		}
	}
}

// TestOverridesHashMissingAlertPerRule: with a rules file, GATE_OVERRIDES is unset and each
// rule has its own hash, written back with gate overrides -rule NAME; a gate that starts
// while it is gone has only the rule's thresholds. GateOverridesHashMissing for a rule
// says so; without rules it names GATE_OVERRIDES. Before, it said "has only
// GATE_OVERRIDES" for a rule too, a setting such a gate refuses.
func TestOverridesHashMissingAlertPerRule(t *testing.T) {
	pod := map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p"}
	text := alertText(t, "GateOverridesHashMissing", pod, 1)
	if !strings.Contains(text, "has only GATE_OVERRIDES") || strings.Contains(text, "-rule") {
		t.Errorf("without rules, GateOverridesHashMissing says\n%s\nwant it to name GATE_OVERRIDES and no -rule", text)
	}
	pod["rule"] = "team-user"
	text = alertText(t, "GateOverridesHashMissing", pod, 1)
	for _, want := range []string{"rule team-user", "only the rule's thresholds", "gate overrides -rule team-user"} {
		if !strings.Contains(text, want) {
			t.Errorf("for rule team-user, GateOverridesHashMissing says\n%s\nwant it to say %q", text, want)
		}
	}
	if strings.Contains(text, "GATE_OVERRIDES") {
		t.Errorf("for rule team-user, GateOverridesHashMissing says\n%s\nnaming GATE_OVERRIDES, unset with rules", text)
	}
}

// TestRedisRefusingWritesAlertSumsCauses: GateRedisRefusingWrites' threshold is writes
// refused a tick, per gate and instance (0.1/s at the default 1s tick), whatever Redis refused them
// with: in a failover the old primary answers readonly and the new one noreplicas until
// its replicas attach, taking turns, and the gate's counts go unwritten either way. 4 of
// each a minute, 0.13/s, fire it; 4 of one alone, 0.07/s, do not, nor do 4 a minute on
// each of two instances. Before, it took each cause on its own and stayed silent at 4
// and 4.
func TestRedisRefusingWritesAlertSumsCauses(t *testing.T) {
	for _, tc := range []struct {
		load string
		want bool
	}{
		{`cause="readonly", redis_instance="0"} 0+4x20` + "\n" + `cause="noreplicas", redis_instance="0"} 0+4x20`, true},
		{`cause="readonly", redis_instance="0"} 0+4x20`, false},
		{`cause="readonly", redis_instance="0"} 0+4x20` + "\n" + `cause="noreplicas", redis_instance="1"} 0+4x20`, false},
		{`cause="readonly", redis_instance="0"} 0+4x20` + "\n" + `cause="timeout", redis_instance="0"} 0+4x20`, false},
		{`cause="oom", redis_instance="0"} 0+7x20`, true},
	} {
		load := ""
		for _, l := range strings.Split(tc.load, "\n") {
			load += fmt.Sprintf("  gate_limiter_errors_total{%s, %s\n", evalPod, l)
		}
		if got := firingAt(t, "GateRedisRefusingWrites", load, 15)[0]; got != tc.want {
			t.Errorf("%s: GateRedisRefusingWrites fired %v, want %v", load, got, tc.want)
		}
	}
	text := alertText(t, "GateRedisRefusingWrites", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p", "redis_instance": "0"}, 0.13)
	for _, want := range []string{"Redis instance 0", "oom, readonly, misconf and noreplicas together", "gate_limiter_errors_total{cause}"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateRedisRefusingWrites says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestRedisErrorAlertsScaleWithTheTick: a gate counts at most one failed pipeline a tick
// for each Redis instance (tick's report), so at a sync.tickInterval of 10s a Redis that
// fails every tick counts 0.1 a second, and a fixed threshold of 0.1/s could never be
// passed: GateRedisErrors and GateRedisRefusingWrites stayed silent through a whole
// outage. The threshold is the share of ticks that fail (0.1/s at the default 1s).
func TestRedisErrorAlertsScaleWithTheTick(t *testing.T) {
	for _, tc := range []struct {
		alert, tick, load string // load: failures a minute, as a series' rise
		want              bool
	}{
		// Redis down: every 10s tick fails.
		{"GateRedisErrors", "10s", `cause="connection", redis_instance="0"} 0+6x20`, true},
		{"GateRedisRefusingWrites", "10s", `cause="readonly", redis_instance="1"} 0+6x20`, true},
		// Half the 10s ticks fail; one tick in twenty does not fire it.
		{"GateRedisErrors", "10s", `cause="timeout", redis_instance="0"} 0+3x20`, true},
		{"GateRedisErrors", "10s", `cause="timeout", redis_instance="0"} 0+0.3x20`, false},
		// The default tick: as before, 0.1/s.
		{"GateRedisErrors", "1s", `cause="timeout", redis_instance="0"} 0+7x20`, true},
		{"GateRedisErrors", "1s", `cause="timeout", redis_instance="0"} 0+4x20`, false},
	} {
		load := fmt.Sprintf("  gate_limiter_errors_total{%s, %s\n", evalPod, tc.load)
		vals := fmt.Sprintf("prometheusRule: {enabled: true}\nsync: {tickInterval: %s}", tc.tick)
		if got := firingAtWith(t, vals, tc.alert, load, 15)[0]; got != tc.want {
			t.Errorf("tick %s, %s: %s fired %v, want %v", tc.tick, strings.TrimSpace(load), tc.alert, got, tc.want)
		}
	}
}

// TestDeadLetterRateAlertSumsReasons: GateDeadLetterRateHigh's threshold is the share of
// the records routed that go to the dead-letter topic (1 % by default), whatever their
// reason: a producer's release that breaks 0.6 % of its records one way and 0.6 %
// another sends 1.2 % of them to dead letter. It fires then, and not at 0.6 % of one
// reason alone. Before, it took each reason on its own and stayed silent at 0.6 and 0.6.
func TestDeadLetterRateAlertSumsReasons(t *testing.T) {
	for _, tc := range []struct {
		notJSON, missing int
		want             bool
	}{
		{6, 6, true},
		{6, 0, false},
		{12, 0, true},
	} {
		load := fmt.Sprintf("  gate_records_total{%s, route=\"accepted\", reason=\"\"} 0+%dx30\n", evalPod, 1000-tc.notJSON-tc.missing) +
			fmt.Sprintf("  gate_records_total{%s, route=\"dead_letter\", reason=\"not_json\"} 0+%dx30\n", evalPod, tc.notJSON) +
			fmt.Sprintf("  gate_records_total{%s, route=\"dead_letter\", reason=\"field_missing\"} 0+%dx30\n", evalPod, tc.missing)
		if got := firingAt(t, "GateDeadLetterRateHigh", load, 25)[0]; got != tc.want {
			t.Errorf("%d not_json and %d field_missing of 1000 records a minute: GateDeadLetterRateHigh fired %v, want %v",
				tc.notJSON, tc.missing, got, tc.want)
		}
	}
}

// TestCountsDroppedAlertSumsReasons: GateLimiterCountsDropped's threshold is counted
// records a gate dropped unwritten in 10 minutes, whatever dropped them: stale_epoch and
// write_cap (gate_limiter_dropped_counts_total{reason}) and displaced
// (gate_limiter_displaced_counts_total) alike leave the fleet's levels low by that much.
// With the threshold at 1000, 600 dropped for stale_epoch and 600 for write_cap in 10
// minutes fire it, as do 600 and 600 displaced; 600 of one alone does not. Before, it took
// each reason, and the displaced counts, on its own and stayed silent at 1200; at its
// default threshold (0) a gate dropping all three ways fired three alerts.
func TestCountsDroppedAlertSumsReasons(t *testing.T) {
	for _, tc := range []struct {
		stale, writeCap, displaced int
		want                       bool
	}{
		{60, 60, 0, true},
		{60, 0, 60, true},
		{0, 0, 60, false},
		{60, 0, 0, false},
		{110, 0, 0, true},
	} {
		load := fmt.Sprintf("  gate_limiter_dropped_counts_total{%s, reason=\"stale_epoch\"} 0+%dx30\n", evalPod, tc.stale) +
			fmt.Sprintf("  gate_limiter_dropped_counts_total{%s, reason=\"write_cap\"} 0+%dx30\n", evalPod, tc.writeCap) +
			fmt.Sprintf("  gate_limiter_displaced_counts_total{%s} 0+%dx30\n", evalPod, tc.displaced)
		if got := firingAtWith(t, "prometheusRule: {enabled: true, alerts: {GateLimiterCountsDropped: {threshold: 1000}}}",
			"GateLimiterCountsDropped", load, 20)[0]; got != tc.want {
			t.Errorf("%d stale_epoch, %d write_cap and %d displaced a minute, threshold 1000 in 10 minutes: GateLimiterCountsDropped fired %v, want %v",
				tc.stale, tc.writeCap, tc.displaced, got, tc.want)
		}
	}
	load := fmt.Sprintf("  gate_limiter_dropped_counts_total{%s, reason=\"stale_epoch\"} 0+5x30\n", evalPod) +
		fmt.Sprintf("  gate_limiter_dropped_counts_total{%s, reason=\"write_cap\"} 0+5x30\n", evalPod) +
		fmt.Sprintf("  gate_limiter_displaced_counts_total{%s} 0+5x30\n", evalPod)
	if n := alertSeries(t, "prometheusRule: {enabled: true}", "GateLimiterCountsDropped", load, 20); n != 1 {
		t.Errorf("one gate dropping counts three ways: GateLimiterCountsDropped fired %d alerts, want 1", n)
	}
	text := alertText(t, "GateLimiterCountsDropped", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p"}, 1200)
	for _, want := range []string{"1.2k counted records", "gate_limiter_dropped_counts_total{reason}", "gate_limiter_displaced_counts_total"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateLimiterCountsDropped says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestInputRecordsLostAlertFiresOnAFreshGate: a gate's gate_records_lost_total series of
// a partition is created when the partition is assigned, and a retention gap below the
// group's committed offset (the fleet away longer than the retention) is counted at the
// first fetch, a moment later: on a gate that has just started, or taken the partition
// over, Prometheus' first sample of the series is already the records lost, and
// increase() counts nothing before it. GateInputRecordsLost fires on such a series for
// its first 15 minutes, as on one that grows, and stays silent on one that has not grown.
// Before, it stayed silent on every gap found at a partition's first fetch.
func TestInputRecordsLostAlertFiresOnAFreshGate(t *testing.T) {
	lost := func(partition, samples string) string {
		return fmt.Sprintf("  gate_records_lost_total{%s, topic=\"events\", partition=%q, cause=\"retention\"} %s\n", evalPod, partition, samples)
	}
	at := []int{20, 24, 34, 43}
	for _, tc := range []struct {
		what, load string
		want       []bool
	}{
		{"born at 500 at minute 23", lost("0", "_x23 500x30"), []bool{false, true, true, false}},
		{"born at 0 at minute 19, 500 from minute 23", lost("0", "_x19 0x3 500x30"), []bool{false, true, true, false}},
		{"500 since minute 0, unchanged", lost("0", "500x55"), []bool{false, false, false, false}},
		{"born at 0 at minute 23, unchanged", lost("0", "_x23 0x30"), []bool{false, false, false, false}},
		// A gate restarted in place (same pod, same labels): the counter starts again.
		{"500 since minute 0, restarted at minute 22 and born at 200 at minute 23", lost("0", "500x21 _ 200x30"), []bool{false, true, true, false}},
	} {
		if got := firingAt(t, "GateInputRecordsLost", tc.load+gateScraped(0, 55), at...); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: GateInputRecordsLost at minutes %v fired %v, want %v", tc.what, at, got, tc.want)
		}
	}
}

// TestInputRecordsLostAlertSkipsAMissedScrape: a gate that lost 500 records long ago and
// lost none since is not new because one scrape of it failed (a timeout, the pod
// throttled, Prometheus restarted): the failed scrape marks its series stale, and 15
// minutes later GateInputRecordsLost, a critical alert with no for, looked back at the gap,
// found no series there and counted the whole 500 again as lost in the last 15 minutes.
// It stays silent. A series that is new still counts whole.
func TestInputRecordsLostAlertSkipsAMissedScrape(t *testing.T) {
	lost := func(samples string) string {
		return fmt.Sprintf("  gate_records_lost_total{%s, topic=\"events\", partition=\"0\", cause=\"retention\"} %s\n", evalPod, samples)
	}
	at := []int{20, 25, 26, 27, 30, 60}
	for _, tc := range []struct {
		what, load string
		want       []bool
	}{
		{"500 since minute 0, one scrape missed at minute 11", lost("500x10 stale 500x60"), []bool{false, false, false, false, false, false}},
		{"500 since minute 0, not scraped from minute 11 to 18", lost("500x10 stale _x6 500x60"), []bool{false, false, false, false, false, false}},
		{"500 since minute 0, not scraped from minute 11 to 50", lost("500x10 stale _x38 500x30"), []bool{false, false, false, false, false, false}},
		{"born at 500 at minute 24", lost("_x24 500x50"), []bool{false, true, true, true, true, false}},
	} {
		if got := firingAt(t, "GateInputRecordsLost", tc.load+gateScraped(0, 80), at...); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: GateInputRecordsLost at minutes %v fired %v, want %v", tc.what, at, got, tc.want)
		}
	}
}

// TestInputRecordsLostAlertSumsPartitions: GateInputRecordsLost's threshold is input
// records lost in 15 minutes: a topic's retention catching a lagging fleet deletes records
// of every partition, on every gate, the loss the sum of them. With the threshold at 1000,
// 400 lost on each of three partitions, two of them on another gate, fire it once for the
// topic; 400 on one alone does not. Before, it took each partition and cause on its own,
// stayed silent at 1200, and at its default threshold fired an alert per partition.
func TestInputRecordsLostAlertSumsPartitions(t *testing.T) {
	other := strings.Replace(evalPod, "x2k4p", "q7z2m", 1)
	lost := func(pod, partition, cause string) string {
		return fmt.Sprintf("  gate_records_lost_total{%s, topic=\"events\", partition=%q, cause=%q} 0x4 400x30\n", pod, partition, cause)
	}
	none := func(pod, partition, cause string) string {
		return fmt.Sprintf("  gate_records_lost_total{%s, topic=\"events\", partition=%q, cause=%q} 0x35\n", pod, partition, cause)
	}
	const raised = "prometheusRule: {enabled: true, alerts: {GateInputRecordsLost: {threshold: 1000}}}"
	three := lost(evalPod, "0", "retention") + lost(other, "1", "retention") + lost(other, "2", "broker")
	if !firingAtWith(t, raised, "GateInputRecordsLost", three, 10)[0] {
		t.Errorf("400 records lost on each of 3 partitions, threshold 1000: GateInputRecordsLost did not fire")
	}
	one := lost(evalPod, "0", "retention") + none(other, "1", "retention") + none(other, "2", "broker")
	if firingAtWith(t, raised, "GateInputRecordsLost", one, 10)[0] {
		t.Errorf("400 records lost on one partition, threshold 1000: GateInputRecordsLost fired")
	}
	// A series born within the window is counted once, not also by its increase.
	fresh := fmt.Sprintf("  gate_records_lost_total{%s, topic=\"events\", partition=\"0\", cause=\"retention\"} _x3 0x2 800x30\n", evalPod)
	if firingAtWith(t, raised, "GateInputRecordsLost", fresh, 10)[0] {
		t.Errorf("800 records lost on a partition assigned 7 minutes before, threshold 1000: GateInputRecordsLost fired")
	}
	if n := alertSeries(t, "prometheusRule: {enabled: true}", "GateInputRecordsLost", three, 10); n != 1 {
		t.Errorf("records of topic events lost on 3 partitions: GateInputRecordsLost fired %d alerts, want 1", n)
	}
	text := alertText(t, "GateInputRecordsLost", map[string]string{"namespace": "ingest", "topic": "events"}, 1200)
	for _, want := range []string{"1.2k records of events", "gate_records_lost_total{pod, partition, cause}", "input records lost"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateInputRecordsLost says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestFetchHeldByCommitsAlert: at least once, a gate whose offset commits fail for 2 ×
// GATE_COMMIT_INTERVAL (a group coordinator gone, the READ ACL on the group revoked) holds
// fetching its input (gate_fetch_held_by_commits 1) until one succeeds. A gate caught up
// when it holds has no lag it knows of (its lag is read from fetches, held too) and
// nothing in flight, and routes nothing, with its commit errors only in a counter and a
// warn line; the held offsets are its work all the same (it stalls: see
// TestFetchHeldByCommitsAlertSaysTheGateStalls). GateFetchHeldByCommits fires while the hold
// lasts past its 5 minutes (not for a coordinator's failover of seconds) and resolves at
// the first commit that succeeds. Before, no alert watched it.
func TestFetchHeldByCommitsAlert(t *testing.T) {
	load := fmt.Sprintf("  gate_fetch_held_by_commits{%s} 0x4 1x30 0x10\n", evalPod) +
		fmt.Sprintf("  gate_commit_errors_total{%s} 0x4 0+60x30 1800x10\n", evalPod) +
		fmt.Sprintf("  gate_stalled_seconds{%s} 0x45\n", evalPod)
	at := []int{2, 6, 30, 34, 36, 44}
	want := []bool{false, true, true, true, false, false}
	if got := firingAt(t, "GateFetchHeldByCommits", load, at...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GateFetchHeldByCommits at minutes %v fired %v, want %v (held from 5 to 35)", at, got, want)
	}
	u, _ := promRule(t, mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true}")))
	for _, r := range u.Object["spec"].(map[string]any)["groups"].([]any)[0].(map[string]any)["rules"].([]any) {
		if r := r.(map[string]any); r["alert"] == "GateFetchHeldByCommits" {
			if sev := r["labels"].(map[string]any)["severity"]; r["for"] != "5m" || sev != "critical" {
				t.Errorf("GateFetchHeldByCommits: for %v severity %v, want 5m critical", r["for"], sev)
			}
		}
	}
	text := alertText(t, "GateFetchHeldByCommits", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p"}, 1)
	for _, want := range []string{"gate-capture-gate-7d9f8b6c5-x2k4p", "routes nothing", "gate_commit_errors_total", "interval commit failed"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateFetchHeldByCommits says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestFetchHeldByCommitsAlertSaysTheGateStalls: the held offsets count as the gate's work
// (internal/consume hasWork), so a gate holding its fetches stalls: gate_stalled_seconds
// grows, /readyz fails past GATE_STALL_NOT_READY (2 minutes) and /healthz past
// GATE_STALL_RESTART (10 minutes), before GateFetchHeldByCommits fires at 5. What it says
// says so. Before, it said the gate stays ready and shows no stall, sending the on-call
// elsewhere for the GateStalled and GateNotReady of the same gate.
func TestFetchHeldByCommitsAlertSaysTheGateStalls(t *testing.T) {
	text := alertText(t, "GateFetchHeldByCommits", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p"}, 1)
	for _, bad := range []string{"stays ready", "neither stall"} {
		if strings.Contains(text, bad) {
			t.Errorf("GateFetchHeldByCommits says\n%s\nwhich it must not: %q", text, bad)
		}
	}
	for _, want := range []string{"GATE_STALL_NOT_READY", "GATE_STALL_RESTART", "gate_stalled_seconds"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateFetchHeldByCommits says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestFetchErrorsAlert: the fetch errors franz-go hands back (gate_fetch_errors_total)
// are those it does not cure by itself: a refused fetch or group (the gate then also not
// ready), a group session ended otherwise (the coordinator unreachable), a corrupt batch
// or an offset it cannot validate, retried without end on that partition while the
// gate's other partitions progress (no stall). GateFetchErrors fires at more than 0.1 a
// second (its default threshold) over 5 minutes, every error of the gate together: 12 a
// minute do, 3 a minute do not, nor does a burst of 20 at a broker's restart once it is
// 5 minutes past. The counter is created at the gate's start; a gate that fails from its
// start, its first sample already past zero, or restarted (the counter reset), is counted
// from its second sample. Before, no alert watched it.
func TestFetchErrorsAlert(t *testing.T) {
	at := []int{8, 20, 28}
	for _, tc := range []struct {
		what, samples string
		want          []bool
	}{
		{"12 a minute", "0x4 0+12x30", []bool{true, true, true}},
		{"3 a minute", "0x4 0+3x30", []bool{false, false, false}},
		{"a burst of 20 at minute 5", "0x4 20x30", []bool{false, false, false}},
		{"born at 500 at minute 14, 12 a minute", "_x14 500+12x20", []bool{false, true, true}},
		{"restarted at minute 14, born again at 40, 12 a minute", "0+12x12 _ 40+12x20", []bool{true, true, true}},
	} {
		load := fmt.Sprintf("  gate_fetch_errors_total{%s} %s\n", evalPod, tc.samples)
		if got := firingAt(t, "GateFetchErrors", load, at...); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: GateFetchErrors at minutes %v fired %v, want %v", tc.what, at, got, tc.want)
		}
	}
	// Two series of one gate (scraped by two jobs, or a label added by a relabeling) make one alert.
	two := fmt.Sprintf("  gate_fetch_errors_total{%s, job=\"a\"} 0+6x30\n  gate_fetch_errors_total{%s, job=\"b\"} 0+6x30\n", evalPod, evalPod)
	if n := alertSeries(t, "prometheusRule: {enabled: true}", "GateFetchErrors", two, 20); n != 1 {
		t.Errorf("one gate's fetch errors in two series, 6 a minute each: GateFetchErrors fired %d alerts, want 1", n)
	}
	text := alertText(t, "GateFetchErrors", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p"}, 0.2)
	for _, want := range []string{"gate-capture-gate-7d9f8b6c5-x2k4p", "0.20/s", "fetch failed; the client retries"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateFetchErrors says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestRecordSharesCountRuleTopics: a record a rule sends to its own topic (action
// topic:NAME) is counted in gate_rule_topic_records_total, not gate_records_total, and is
// a record routed all the same: the dead-letter and overflow shares are of every record
// routed. Before, their denominators left the rule topics' records out, and a rule taking
// 60 % of the traffic to its topic made 0.8 % dead letters read as 2 %: the alert fired.
func TestRecordSharesCountRuleTopics(t *testing.T) {
	for _, tc := range []struct {
		ruleTopic, dead int
		want            bool
	}{
		{600, 8, false}, // 8 of 1000: under 1 %
		{600, 12, true}, // 12 of 1000
		{0, 12, true},   // no rule topic: as before
	} {
		load := fmt.Sprintf("  gate_records_total{%s, route=\"accepted\", reason=\"allowed\"} 0+%dx30\n", evalPod, 1000-tc.ruleTopic-tc.dead) +
			fmt.Sprintf("  gate_records_total{%s, route=\"dead_letter\", reason=\"not_json\"} 0+%dx30\n", evalPod, tc.dead)
		if tc.ruleTopic > 0 {
			load += fmt.Sprintf("  gate_rule_topic_records_total{%s, rule=\"merges\", reason=\"rate_limited\"} 0+%dx30\n", evalPod, tc.ruleTopic) +
				fmt.Sprintf("  gate_rule_topic_records_total{%s, rule=\"merges\", reason=\"topic_missing\"} 0+0x30\n", evalPod)
		}
		if got := firingAt(t, "GateDeadLetterRateHigh", load, 25)[0]; got != tc.want {
			t.Errorf("%d dead letters and %d records to a rule's topic of 1000 a minute: GateDeadLetterRateHigh fired %v, want %v",
				tc.dead, tc.ruleTopic, got, tc.want)
		}
	}
}

// TestTLSAlerts: GateTLSFilesRefused fires for 15 minutes after a change the gate could not
// use, per gate and target, not for a counter at rest; GateTLSClientCertExpiring fires
// once the certificate in use has less than 7 days left (the expiry a constant gauge,
// time() moving), and not for one renewed (the gauge moved on).
func TestTLSAlerts(t *testing.T) {
	firesAfterAnIncrease(t, "GateTLSFilesRefused", `gate_tls_reload_errors_total{%s, target="kafka"}`)
	// The certificate expires 7 days and 10 minutes after the load starts; renewed at
	// minute 20 to 90 days on.
	const day = 86400
	expiring := fmt.Sprintf("  gate_tls_client_cert_expiry_timestamp_seconds{%s, target=\"redis\"} %dx40\n", evalPod, 7*day+600)
	if got, want := firingAt(t, "GateTLSClientCertExpiring", expiring, 5, 9, 11, 30), []bool{false, false, true, true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a certificate expiring at 7 days 10 minutes: GateTLSClientCertExpiring at minutes 5, 9, 11, 30 fired %v, want %v", got, want)
	}
	renewed := fmt.Sprintf("  gate_tls_client_cert_expiry_timestamp_seconds{%s, target=\"redis\"} %dx19 %dx20\n", evalPod, 7*day+600, 90*day)
	if got, want := firingAt(t, "GateTLSClientCertExpiring", renewed, 11, 30), []bool{true, false}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("renewed at minute 20: GateTLSClientCertExpiring at minutes 11, 30 fired %v, want %v", got, want)
	}
	text := alertText(t, "GateTLSFilesRefused", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p", "target": "kafka"}, 1)
	for _, want := range []string{"gate-capture-gate-7d9f8b6c5-x2k4p", "for kafka", "last good ones"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateTLSFilesRefused says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestRecordSharesCountRejectedRecordsOnce: a record the broker refuses for good is
// counted twice in gate_records_total, where it was routed and again as dead_letter
// reason rejected. GateDeadLetterRateHigh's and GateOverflowShareJump's denominators
// counted it twice, the shares low by it: 15 of 1,000 records refused read as 1.478 %,
// and every record refused as 50 %. Each record is counted once now, as the dashboard's
// panel counts it.
func TestRecordSharesCountRejectedRecordsOnce(t *testing.T) {
	// 1000 records a minute: 985 accepted, 15 overflow, all 15 refused by the overflow
	// topic and rerouted to dead letter (rejected): 1.5 % dead-lettered.
	load := fmt.Sprintf("  gate_records_total{%s, route=\"accepted\", reason=\"allowed\"} 0+985x30\n", evalPod) +
		fmt.Sprintf("  gate_records_total{%s, route=\"overflow\", reason=\"rate_limited\"} 0+15x30\n", evalPod) +
		fmt.Sprintf("  gate_records_total{%s, route=\"dead_letter\", reason=\"rejected\"} 0+15x30\n", evalPod)
	v := queryAt(t, alertExpr(t, mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true, alerts: {GateDeadLetterRateHigh: {threshold: 0}}}")), "GateDeadLetterRateHigh"), load, 25)[0]
	if len(v) != 1 || v[0].F < 0.0149 || v[0].F > 0.0151 {
		t.Errorf("GateDeadLetterRateHigh's share with 15 of 1000 records rejected: %v, want 0.015", v)
	}
}

// TestCountedAlertsFireOnAFreshGate: a gate's counters are made at 0 at start, but one that
// counts before Prometheus first scrapes it (30 s at the default interval) is first seen
// at that count, from which increase() counts nothing: a record skipped in a new pod's
// first seconds never fired GateRecordsSkipped (nor the other alerts on a counter's
// growth). Each counts such a series whole, as GateInputRecordsLost does, and stays
// silent on a series at rest.
func TestCountedAlertsFireOnAFreshGate(t *testing.T) {
	for _, c := range []struct {
		alert, series string
		window        int // minutes
	}{
		{"GateRecordsSkipped", `gate_records_undeliverable_total{%s, action="skipped"}`, 15},
		{"GateLimiterCacheOverfull", `gate_limiter_cache_overfull_total{%s}`, 10},
		{"GateLimiterCountsDropped", `gate_limiter_dropped_counts_total{%s, reason="write_cap"}`, 10},
		{"GateLimiterCountsDropped", `gate_limiter_displaced_counts_total{%s}`, 10},
		{"GateTransactionRecoveries", `gate_transaction_recoveries_total{%s, cause="slow_transaction"}`, 10},
		{"GateRedisLostAcknowledgedWrites", `gate_limiter_write_batches_total{%s, outcome="lost"}`, 15},
	} {
		series := fmt.Sprintf(c.series, evalPod)
		n := 3 // at GateTransactionRecoveries' threshold, over the others'
		w := c.window
		for _, tc := range []struct {
			what, samples string
			gate          string // the gate's own series (gateScraped)
			at            []int
			want          []bool
		}{
			{"a gate started at minute 5, born at 3", fmt.Sprintf("_x5 %dx%d", n, 2*w+30), gateScraped(5, 2*w+30), []int{4, 6, 4 + w, 6 + w}, []bool{false, true, true, false}},
			{"a gate of an hour, born at 3 at minute 65", fmt.Sprintf("_x65 %dx%d", n, 2*w+30), gateScraped(0, 2*w+95), []int{64, 66, 64 + w, 66 + w}, []bool{false, true, true, false}},
			{"at 3 for 100 minutes", fmt.Sprintf("%dx100", n), gateScraped(0, 100), []int{80, 90, 99}, []bool{false, false, false}},
			{"grown from 0 to 3 at minute 80", fmt.Sprintf("0x79 %dx30", n), gateScraped(0, 110), []int{79, 81, 78 + w, 81 + w}, []bool{false, true, true, false}},
		} {
			load := "  " + series + " " + tc.samples + "\n" + tc.gate
			if got := firingAt(t, c.alert, load, tc.at...); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%s, %s: %s at minutes %v fired %v, want %v", series, tc.what, c.alert, tc.at, got, tc.want)
			}
		}
	}
}

// TestCountedAlertsQuietAfterAPrometheusGap: Prometheus down (or its storage lost) for two
// hours leaves no sample of any series in the hour before an alert's window when it
// scrapes again: each series looked born then, and every alert on a counter's growth
// fired on its gates' lifetime totals, nothing having grown. They stay silent; a gate
// started in the gap still counts whole.
func TestCountedAlertsQuietAfterAPrometheusGap(t *testing.T) {
	for _, c := range []struct {
		alert, series string
		n             int
	}{
		{"GateRecordsSkipped", `gate_records_undeliverable_total{%s, action="skipped"}`, 3},
		{"GateLimiterCacheOverfull", `gate_limiter_cache_overfull_total{%s}`, 3},
		{"GateLimiterCountsDropped", `gate_limiter_dropped_counts_total{%s, reason="write_cap"}`, 3},
		{"GateTransactionRecoveries", `gate_transaction_recoveries_total{%s, cause="slow_transaction"}`, 3},
		{"GateRedisLostAcknowledgedWrites", `gate_limiter_write_batches_total{%s, outcome="lost"}`, 3},
		{"GateTLSFilesRefused", `gate_tls_reload_errors_total{%s, target="redis"}`, 3},
		{"GateInputRecordsLost", `gate_records_lost_total{%s, topic="events", partition="0", cause="retention"}`, 500},
	} {
		series := fmt.Sprintf(c.series, evalPod)
		// Scraped to minute 10, not from 11 to 130, again from 131.
		gap := fmt.Sprintf("  %s %dx10 _x120 %dx40\n", series, c.n, c.n) +
			fmt.Sprintf("  up{%s} 1x10 _x120 1x40\n  process_start_time_seconds{%s} 0x10 _x120 0x40\n", evalPod, evalPod)
		if got, want := firingAt(t, c.alert, gap, 131, 140, 150), []bool{false, false, false}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s at %d before and after two hours unscraped: %s at minutes 131, 140, 150 fired %v, want %v", series, c.n, c.alert, got, want)
		}
		// A gate started at minute 100, in the gap, its first scrape at minute 131.
		fresh := fmt.Sprintf("  %s _x131 %dx40\n", series, c.n) +
			fmt.Sprintf("  up{%s} _x131 1x40\n  process_start_time_seconds{%s} _x131 6000x40\n", evalPod, evalPod)
		if got, want := firingAt(t, c.alert, fresh, 132), []bool{true}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s at %d on a gate started in the gap: %s at minute 132 fired %v, want %v", series, c.n, c.alert, got, want)
		}
	}
}

// TestFleetAlerts: with no gate scraped at all every other alert is silent (their series
// are the gates' own): GateFleetAbsent fires then, and not while one is scraped; it is not
// rendered when the fleet may be at zero on purpose (KEDA down to minReplicas 0). Pods the
// Deployment wants and cannot have (a quota, no node with room) have no series either:
// GateReplicasUnavailable reads the Deployment's.
func TestFleetAlerts(t *testing.T) {
	up := fmt.Sprintf("  up{%s} 1x10 _x20\n", evalPod)
	if got, want := firingAt(t, "GateFleetAbsent", up, 5, 15, 25), []bool{false, true, true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a gate scraped to minute 10, none after: GateFleetAbsent at minutes 5, 15, 25 fired %v, want %v", got, want)
	}
	other := "  up{namespace=\"ingest\", pod=\"other-release-7d9f8b6c5-x2k4p\"} 1x30\n"
	if got, want := firingAt(t, "GateFleetAbsent", other, 5), []bool{true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("only another release's pod scraped: GateFleetAbsent fired %v, want %v", got, want)
	}
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t,
		"prometheusRule: {enabled: true}\nautoscaling: {minReplicas: 0, keda: {enabled: true}}\ncapabilityChecks: false"))
	u, _ := promRule(t, vals)
	for _, g := range u.Object["spec"].(map[string]any)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if r.(map[string]any)["alert"] == "GateFleetAbsent" {
				t.Error("GateFleetAbsent rendered for a fleet KEDA scales to zero")
			}
		}
	}
	unavailable := "  kube_deployment_status_replicas_unavailable{namespace=\"ingest\", deployment=\"gate-capture-gate\"} 0x5 3x20 0x10\n" +
		"  kube_deployment_status_replicas_unavailable{namespace=\"ingest\", deployment=\"other-release\"} 5x40\n"
	if got, want := firingAt(t, "GateReplicasUnavailable", unavailable, 4, 10, 30), []bool{false, true, false}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("3 replicas unavailable from minute 6 to 25: GateReplicasUnavailable at minutes 4, 10, 30 fired %v, want %v", got, want)
	}
}

// TestRedisEvictingKeysAlert: an instance evicting keys fires GateRedisEvictingKeys once for
// the fleet (every gate counts the same instance's evictions), and not for evictions that
// stopped more than 15 minutes ago.
func TestRedisEvictingKeysAlert(t *testing.T) {
	load := ""
	for _, pod := range []string{"gate-capture-gate-7d9f8b6c5-x2k4p", "gate-capture-gate-7d9f8b6c5-q8w2z"} {
		load += fmt.Sprintf("  gate_redis_evicted_keys_total{namespace=\"ingest\", pod=%q, redis_instance=\"0\"} 0x100 519x60\n", pod)
	}
	const values = "prometheusRule: {enabled: true}"
	for _, c := range []struct{ at, want int }{{99, 0}, {101, 1}, {114, 1}, {130, 0}} {
		if got := alertSeries(t, values, "GateRedisEvictingKeys", load, c.at); got != c.want {
			t.Errorf("two gates seeing 519 keys evicted at minute 100: GateRedisEvictingKeys at minute %d fired %d alerts, want %d", c.at, got, c.want)
		}
	}
}

// heldFor reports whether the chart's alert name (rendered with the defaults) fires at
// minute at having held for its `for:` of forMin minutes: the same label set returned at
// every minute from at-forMin to at, as Prometheus requires of a pending alert (it
// evaluates more often; a minute is enough here). firingAt leaves `for:` out, and with
// it an alert whose label set changes before its `for:` is out, which never fires.
func heldFor(t *testing.T, name string, forMin int, load string, at int) bool {
	t.Helper()
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true}"))
	mins := make([]int, 0, forMin+1)
	for m := at - forMin; m <= at; m++ {
		mins = append(mins, m)
	}
	var held map[string]bool
	for i, v := range queryAt(t, alertExpr(t, vals, name), load, mins...) {
		now := map[string]bool{}
		for _, s := range v {
			if i == 0 || held[s.Metric.String()] {
				now[s.Metric.String()] = true
			}
		}
		held = now
	}
	return len(held) > 0
}

// TestLagAlertFollowsAMovingPartition: partition 3 falls behind 20,000 records a minute
// for 50 minutes while it changes gate every 10 minutes (restarts, a crash loop, scaling:
// when lag grows), each gate dropping its series as the partition is revoked.
// GateConsumerLagGrowing fires, as it does for a partition that stays on one gate, and
// not on a lag that is high and flat. Before, it was per pod as well as partition: each
// move started its `for: 15m` again, and it never fired on the partition 1.1 million
// records behind (a review).
func TestLagAlertFollowsAMovingPartition(t *testing.T) {
	var moving strings.Builder
	for i := range 5 {
		skip := ""
		if i > 0 {
			skip = fmt.Sprintf("_x%d ", i*10)
		}
		fmt.Fprintf(&moving, "gate_partition_lag_records{namespace=\"ingest\", pod=\"gate-capture-gate-7d9f8b6c5-%s\", partition=\"3\"} %s%d+20000x9\n", strings.Repeat(string(rune('a'+i)), 5), skip, 100000+i*10*20000)
	}
	stays := "gate_partition_lag_records{" + evalPod + ", partition=\"3\"} 100000+20000x49\n"
	flat := "gate_partition_lag_records{" + evalPod + ", partition=\"3\"} 500000x49\n"
	for _, tc := range []struct {
		name, load string
		want       bool
	}{{"on one gate", stays, true}, {"moving", moving.String(), true}, {"flat", flat, false}} {
		if got := heldFor(t, "GateConsumerLagGrowing", 15, tc.load, 49); got != tc.want {
			t.Errorf("GateConsumerLagGrowing on a partition %s at minute 49 fired %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestOverridesNeverReadAlert: a gate whose every read of the live overrides fails from
// its start (an invalid entry, a WRONGTYPE key, Redis down through a deploy) keeps
// gate_overrides_last_refresh_timestamp_seconds at 0, which GateOverridesStale cannot
// measure from: GateOverridesNeverRead fires, per rule. Not on a rule that never had a
// hash (0, no error counted), nor on a first read that failed once before the next one
// succeeded, nor on a gate that has read once and failed since (GateOverridesStale's).
func TestOverridesNeverReadAlert(t *testing.T) {
	rule := evalPod + `, rule="team-user"`
	for _, tc := range []struct {
		name, load string
		want       bool
	}{
		{"every read failing", "gate_overrides_last_refresh_timestamp_seconds{" + rule + "} 0x40\n" +
			"gate_overrides_refresh_errors_total{" + rule + `, cause="invalid"} 0+1x40` + "\n", true},
		{"no hash ever", "gate_overrides_last_refresh_timestamp_seconds{" + rule + "} 0x40\n" +
			"gate_overrides_refresh_errors_total{" + rule + `, cause="invalid"} 0x40` + "\n", false},
		{"one failed first read", "gate_overrides_last_refresh_timestamp_seconds{" + rule + "} 0 60x39\n" +
			"gate_overrides_refresh_errors_total{" + rule + `, cause="redis"} 0 1x39` + "\n", false},
		{"read once, failing since", "gate_overrides_last_refresh_timestamp_seconds{" + rule + "} 60x40\n" +
			"gate_overrides_refresh_errors_total{" + rule + `, cause="redis"} 0+1x40` + "\n", false},
	} {
		if got := heldFor(t, "GateOverridesNeverRead", 5, tc.load, 40); got != tc.want {
			t.Errorf("%s: GateOverridesNeverRead at minute 40 fired %v, want %v", tc.name, got, tc.want)
		}
	}
	text := alertText(t, "GateOverridesNeverRead", map[string]string{"namespace": "ingest", "pod": "gate-capture-gate-7d9f8b6c5-x2k4p", "rule": "team-user"}, 10)
	for _, want := range []string{"rule team-user", "the rule's thresholds alone", "in the last 600s"} {
		if !strings.Contains(text, want) {
			t.Errorf("GateOverridesNeverRead says\n%s\nwant it to say %q", text, want)
		}
	}
}

// TestOverridesNeverReadAlertValueIsFailures: GateOverridesNeverRead's description says
// "{{ $value }} of its refreshes failed in the last 600s"; an alert's value is that of the
// series its expression returns, the left side's under and. Before, the left side was the
// refresh timestamp, 0 whenever the alert fires: "0 of its refreshes failed", for a gate
// whose every read had failed.
func TestOverridesNeverReadAlertValueIsFailures(t *testing.T) {
	rule := evalPod + `, rule="team-user"`
	load := "gate_overrides_last_refresh_timestamp_seconds{" + rule + "} 0x40\n" +
		"gate_overrides_refresh_errors_total{" + rule + `, cause="invalid"} 0+1x40` + "\n"
	vals := mergeValues(readValues(t, "testdata/defaults.yaml"), mustParse(t, "prometheusRule: {enabled: true}"))
	v := queryAt(t, alertExpr(t, vals, "GateOverridesNeverRead"), load, 40)[0]
	if len(v) != 1 {
		t.Fatalf("GateOverridesNeverRead at minute 40: %d series, want 1", len(v))
	}
	// one failure a minute over the 600 s the description names
	if got := v[0].F; got < 9.5 || got > 10.5 {
		t.Errorf("GateOverridesNeverRead's value at minute 40 is %v, want the 10 refreshes failed in 600s", got)
	}
	if got := v[0].Metric.Get("rule"); got != "team-user" {
		t.Errorf("GateOverridesNeverRead's series %v lacks rule team-user", v[0].Metric)
	}
}

// TestRuleTopicMissingAlert: records of a rule whose own topic is gone go to overflow,
// counted in gate_rule_topic_records_total{reason="topic_missing"}; GateRuleTopicMissing
// fires per rule while they do, summed over the gates, and not for the rule's records
// written to its topic (reason rate_limited or forced).
func TestRuleTopicMissingAlert(t *testing.T) {
	load := "gate_rule_topic_records_total{" + evalPod + `, rule="merges", reason="topic_missing"} 0x10 0+600x20 12000x20` + "\n" +
		"gate_rule_topic_records_total{" + evalPod + `, rule="merges", reason="rate_limited"} 0+600x50` + "\n"
	at := []int{5, 12, 25, 38}
	want := []bool{false, true, true, false}
	if got := firingAt(t, "GateRuleTopicMissing", load, at...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GateRuleTopicMissing at minutes %v fired %v, want %v (the topic missing from 10 to 30)", at, got, want)
	}
}

// firesAfterAnIncrease checks a counter alert of the chart's usual kind on series (a
// format of evalPod's labels): not while the counter stays at 0, nor at rest however
// high, and for the 15 minutes after one increase, a series born at 1 (an increase
// before the gate's first scrape) too.
func firesAfterAnIncrease(t *testing.T, alert, series string) {
	t.Helper()
	for _, tc := range []struct {
		what, samples string
		started       int // the gate's minute of start (gateScraped)
		at            []int
		want          []bool
	}{
		{"at 0", "0x60", 0, []int{3, 10, 25, 50}, []bool{false, false, false, false}},
		{"one at minute 5", "0x4 1x60", 0, []int{3, 10, 25}, []bool{false, true, false}},
		{"at 1 for an hour and a half, and ever since", "1x120", 0, []int{80, 95, 110}, []bool{false, false, false}},
		{"born at 1 at minute 5", "_x5 1x30", 5, []int{3, 10, 25}, []bool{false, true, false}},
	} {
		load := "  " + fmt.Sprintf(series, evalPod) + " " + tc.samples + "\n" + gateScraped(tc.started, 120)
		if got := firingAt(t, alert, load, tc.at...); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %s at minutes %v fired %v, want %v", tc.what, alert, tc.at, got, tc.want)
		}
	}
}
