package main

import "fmt"

// The whole gate beside a bare pass-through, on franz-go's kfake broker and on Apache Kafka
// (internal/consume BenchmarkEndToEnd, BenchmarkEndToEndSharedCores, BenchmarkRealKafka,
// BenchmarkRealKafkaLatency).

// Benchmark names the figures come from (without the -GOMAXPROCS suffix).
const (
	benchE2EGate     = "BenchmarkEndToEnd/gate"
	benchE2EPass     = "BenchmarkEndToEnd/passthrough"
	benchE2EPooled   = "BenchmarkEndToEnd/passthrough-pooled"
	benchE2EExactly  = "BenchmarkEndToEnd/exactly-once"
	benchSharedGate  = "BenchmarkEndToEndSharedCores/gate"
	benchSharedPass  = "BenchmarkEndToEndSharedCores/passthrough"
	benchRealGate    = "BenchmarkRealKafka/gate"
	benchRealPass    = "BenchmarkRealKafka/passthrough"
	benchRealExactly = "BenchmarkRealKafka/exactly-once"
	benchRealPassEOS = "BenchmarkRealKafka/passthrough-eos"
	benchSameGate    = "BenchmarkEndToEndSameClock/gate"
	benchSamePass    = "BenchmarkEndToEndSameClock/passthrough"
	benchSamePassEOS = "BenchmarkEndToEndSameClock/passthrough-eos"
	benchSameExactly = "BenchmarkEndToEndSameClock/exactly-once"
	benchSameGateOut = "BenchmarkEndToEndSameClock/gate-outcomes"
	benchSameEOSOut  = "BenchmarkEndToEndSameClock/exactly-once-outcomes"
	benchOutGate     = "BenchmarkOutcomes/gate"
	benchReplayKfake = "BenchmarkReplay/kfake"
	benchReplayKafka = "BenchmarkReplay/kafka"
	benchReplayWork  = "BenchmarkEngineWorkers"
	benchOutGateOn   = "BenchmarkOutcomes/gate-outcomes"
	benchOutEOS      = "BenchmarkOutcomes/exactly-once"
	benchOutEOSOn    = "BenchmarkOutcomes/exactly-once-outcomes"
	benchOutTurns    = "BenchmarkOutcomesTurns"
	benchOutSame     = "BenchmarkOutcomesTurnsSameGate"
	benchRotTeam     = "BenchmarkRotationGate/rotation-team-rule"
	benchRotUser     = "BenchmarkRotationGate/rotation-user-rule"
	benchRepPass     = "BenchmarkRealKafkaReplicated/passthrough"
	benchRepGate     = "BenchmarkRealKafkaReplicated/gate"
	benchRepPassEOS  = "BenchmarkRealKafkaReplicated/passthrough-eos"
	benchRepExactly  = "BenchmarkRealKafkaReplicated/exactly-once"
	benchRealLatALO  = "BenchmarkRealKafkaLatency/at-least-once"
	benchRealLatEOS  = "BenchmarkRealKafkaLatency/exactly-once"
)

// e2eFigures puts the end-to-end figures: records/s, CPU and bytes allocated per record,
// the gate over the pass-through, with client and broker bound and sharing cores, and on
// Apache Kafka with its latency.
func e2eFigures(b Samples, out map[string]float64) {
	b.putRatio(out, "records/s", benchE2EGate, "e2e_gate_records_per_s", benchE2EPass, "e2e_passthrough_records_per_s", "e2e_vs_passthrough_ratio")
	// CPU: the bench process's (user + system, every thread) per million records; the
	// broker and redis-server run in processes of their own, so this is the client's
	// alone, the gate's tick included. The goal's baseline is the pass-through that lends
	// franz-go the gate's pools and recycles its input as the gate does (passthrough-pooled):
	// the best franz-go loop, not one that leaves the fetched records to the collector.
	b.putRatio(out, "cpu-s/Mrecords", benchE2EGate, "e2e_gate_cpu_s_per_million_records",
		benchE2EPooled, "e2e_passthrough_pooled_cpu_s_per_million_records", "e2e_cpu_vs_passthrough_ratio_of_means")
	// The goal's figure is the ratio of the medians, as the hot path's: one run in six
	// now and then comes out a quarter off on a busy VM (the gate 1.35 CPU-s per million
	// where its other five gave 1.08 to 1.11), which moves a mean of six by 0.04.
	if r, ok := b.medianRatio(benchE2EGate, benchE2EPooled, "cpu-s/Mrecords"); ok {
		out["e2e_cpu_vs_passthrough_ratio"] = r
	}
	// The plain pass-through (no pools), the goal's baseline before: no goal.
	b.putRatio(out, "cpu-s/Mrecords", benchE2EGate, "", benchE2EPass, "e2e_passthrough_cpu_s_per_million_records", "")
	if r, ok := b.medianRatio(benchE2EGate, benchE2EPass, "cpu-s/Mrecords"); ok {
		out["e2e_cpu_vs_unpooled_passthrough_ratio"] = r
	}
	// What the gate's tick costs Redis, its own process: apart from the gate's figures.
	if v, ok := b.Mean(benchE2EGate, "redis-cpu-s/Mrecords"); ok {
		out["e2e_redis_cpu_s_per_million"] = v
	}
	b.putRatio(out, "alloc-B/record", benchE2EGate, "e2e_gate_alloc_bytes_per_record",
		benchE2EPass, "e2e_passthrough_alloc_bytes_per_record", "")
	b.putRatio(out, "alloc-B/record", benchE2EGate, "", benchE2EPooled, "e2e_passthrough_pooled_alloc_bytes_per_record", "")
	// The worst of the runs, each gate run against the pass-through run of its process:
	// the wall time against the plain pass-through (e2e_vs_passthrough_ratio's), the CPU
	// against the pooled one (the CPU goal's).
	if v, ok := worstRatio(b, benchE2EGate, benchE2EPass, "records/s", false); ok {
		out["e2e_vs_passthrough_ratio_worst_run"] = v
	}
	if v, ok := worstRatio(b, benchE2EGate, benchE2EPooled, "cpu-s/Mrecords", true); ok {
		out["e2e_cpu_vs_passthrough_ratio_worst_run"] = v
	}
	b.putRatio(out, "records/s", benchE2EExactly, "e2e_exactly_once_records_per_s", benchE2EGate, "", "e2e_exactly_once_vs_at_least_once")
	if v, ok := b.Mean(benchE2EGate, "gomaxprocs"); ok {
		out["e2e_client_gomaxprocs"] = v
	}
	// The same two with client and broker sharing every core: informational.
	b.putRatio(out, "records/s", benchSharedGate, "", benchSharedPass, "", "e2e_shared_cores_vs_passthrough_ratio")
	b.putRatio(out, "cpu-s/Mrecords", benchSharedGate, "e2e_shared_cores_gate_cpu_s_per_million_records",
		benchSharedPass, "e2e_shared_cores_passthrough_cpu_s_per_million_records", "e2e_shared_cores_cpu_vs_passthrough_ratio")
	if v, ok := worstRatio(b, benchSharedGate, benchSharedPass, "cpu-s/Mrecords", true); ok {
		out["e2e_shared_cores_cpu_vs_passthrough_ratio_worst_run"] = v
	}
	// BenchmarkRealKafka's ratios on kfake, on its clock (the same end for every side).
	b.putRatio(out, "records/s", benchSameGate, "kfake_gate_records_per_s", benchSamePass, "kfake_passthrough_records_per_s", "kfake_e2e_vs_passthrough_ratio")
	b.putRatio(out, "records/s", benchSameExactly, "kfake_exactly_once_records_per_s", benchSameGate, "", "kfake_eos_vs_alo_ratio")
	b.putRatio(out, "records/s", benchSameExactly, "", benchSamePassEOS, "kfake_eos_passthrough_records_per_s", "kfake_eos_vs_eos_passthrough_ratio")
	// The rotation load through the whole gate, the per-user rule's gate ÷ the team rule's.
	b.putRatio(out, "cpu-s/Mrecords", benchRotUser, "rotation_whole_gate_user_rule_cpu_s_per_million", benchRotTeam, "rotation_whole_gate_team_rule_cpu_s_per_million", "rotation_whole_gate_cpu_vs_team_rule")
	// Outcomes on ÷ off at least once, the goal's: the gates in turns of a second, the
	// median of each run's rounds (BenchmarkOutcomesTurns), beside the same method's
	// figure for two equal gates, its bias. Then each right after the other in every run,
	// over runs of seconds (BenchmarkOutcomes: a pair a process, too few to tell a few
	// per cent on a VM whose minutes differ by more), and over the same clock's short ones.
	for _, k := range []struct{ name, unit, key string }{
		{benchOutTurns, "on/off", "outcomes_vs_off_ratio"},
		{benchOutTurns, "cpu_on/off", "outcomes_cpu_vs_off_ratio"},
		{benchOutTurns, "off_records/s", "outcomes_turns_off_records_per_s"},
		{benchOutTurns, "on_records/s", "outcomes_turns_on_records_per_s"},
		{benchOutSame, "on/off", "outcomes_turns_same_gate_ratio"},
		{benchOutSame, "cpu_on/off", "outcomes_turns_same_gate_cpu_ratio"},
	} {
		if v, ok := b.Mean(k.name, k.unit); ok {
			out[k.key] = v
		}
	}
	if rs := b[benchOutTurns]["rounds"]; len(rs) > 0 {
		sum := 0.0
		for _, r := range rs {
			sum += r
		}
		out["outcomes_turns_rounds"] = sum
	}
	b.putRatio(out, "records/s", benchOutGateOn, "outcomes_gate_records_per_s", benchOutGate, "outcomes_off_gate_records_per_s", "outcomes_pairs_vs_off_ratio")
	b.putRatio(out, "records/s", benchOutEOSOn, "outcomes_exactly_once_records_per_s", benchOutEOS, "outcomes_off_exactly_once_records_per_s", "outcomes_eos_vs_off_ratio")
	b.putRatio(out, "cpu-s/Mrecords", benchOutGateOn, "", benchOutGate, "", "outcomes_pairs_cpu_vs_off_ratio")
	b.putRatio(out, "cpu-s/Mrecords", benchOutEOSOn, "", benchOutEOS, "", "outcomes_eos_cpu_vs_off_ratio")
	for _, m := range []struct{ on, off, key string }{
		{benchOutGateOn, benchOutGate, "outcomes_alloc_bytes_per_record"},
		{benchOutEOSOn, benchOutEOS, "outcomes_eos_alloc_bytes_per_record"},
	} {
		if on, ok := b.Mean(m.on, "alloc-B/record"); ok {
			if off, ok := b.Mean(m.off, "alloc-B/record"); ok {
				out[m.key] = on - off
			}
		}
	}
	// What the rows' cost follows: rows written a million records, a seal a commit
	// interval at least once, a transaction exactly once.
	if v, ok := b.Mean(benchOutGateOn, "outcome-rows/Mrecords"); ok {
		out["outcomes_rows_per_million_records"] = v
	}
	if v, ok := b.Mean(benchOutEOSOn, "outcome-rows/Mrecords"); ok {
		out["outcomes_eos_rows_per_million_records"] = v
	}
	b.putRatio(out, "records/s", benchSameGateOut, "", benchSameGate, "", "outcomes_short_run_vs_off_ratio")
	b.putRatio(out, "records/s", benchSameEOSOut, "", benchSameExactly, "", "outcomes_short_run_eos_vs_off_ratio")
	// gate replay against a bare consume of the same range, in turns in one benchmark.
	b.putRatio(out, "replay-records/s", benchReplayKfake, "replay_records_per_s", "", "", "")
	b.putRatio(out, "consume-records/s", benchReplayKfake, "replay_consume_records_per_s", "", "", "")
	b.putRatio(out, "replay-records/s", benchReplayKafka, "real_kafka_replay_records_per_s", "", "", "")
	b.putRatio(out, "consume-records/s", benchReplayKafka, "real_kafka_replay_consume_records_per_s", "", "", "")
	b.putRatio(out, "replay1-records/s", benchReplayKfake, "replay_one_worker_records_per_s", "", "", "")
	b.putRatio(out, "replay1-records/s", benchReplayKafka, "real_kafka_replay_one_worker_records_per_s", "", "", "")
	b.putRatio(out, "consume-cpu-ns/record", benchReplayKfake, "replay_consume_cpu_ns_per_record", "", "", "")
	b.putRatio(out, "replay-cpu-ns/record", benchReplayKfake, "replay_cpu_ns_per_record", "", "", "")
	// Its routing alone, on one worker and on one a processor, in turns.
	b.putRatio(out, "one-worker-records/s", benchReplayWork, "replay_routing_one_worker_records_per_s", "", "", "")
	b.putRatio(out, "workers-records/s", benchReplayWork, "replay_routing_workers_records_per_s", "", "", "")
	if v, ok := b.Mean(benchReplayWork, "speedup"); ok {
		out["replay_routing_workers_speedup"] = v
	}
	for _, k := range []string{"", "real_kafka_"} {
		if r, ok := out[k+"replay_records_per_s"]; ok && out[k+"replay_consume_records_per_s"] > 0 {
			out[k+"replay_vs_consume_ratio"] = r / out[k+"replay_consume_records_per_s"]
		}
	}
	b.putRatio(out, "records/s", benchRealGate, "real_kafka_gate_records_per_s",
		benchRealPass, "real_kafka_passthrough_records_per_s", "real_kafka_e2e_vs_passthrough_ratio")
	b.putRatio(out, "cpu-s/Mrecords", benchRealGate, "", benchRealPass, "", "real_kafka_cpu_vs_passthrough_ratio")
	b.putRatio(out, "records/s", benchRealExactly, "real_kafka_exactly_once_records_per_s", benchRealGate, "", "real_kafka_eos_vs_alo_ratio")
	b.putRatio(out, "records/s", benchRealExactly, "", benchRealPassEOS, "real_kafka_eos_passthrough_records_per_s", "real_kafka_eos_vs_eos_passthrough_ratio")
	b.putRatio(out, "records/s", benchRepExactly, "real_kafka_replicated_exactly_once_records_per_s", benchRepGate, "real_kafka_replicated_gate_records_per_s", "real_kafka_replicated_eos_vs_alo_ratio")
	b.putRatio(out, "records/s", benchRepExactly, "", benchRepPassEOS, "real_kafka_replicated_eos_passthrough_records_per_s", "real_kafka_replicated_eos_vs_eos_passthrough_ratio")
	b.putRatio(out, "records/s", benchRepGate, "", benchRepPass, "real_kafka_replicated_passthrough_records_per_s", "real_kafka_replicated_e2e_vs_passthrough_ratio")
	b.putRatio(out, "records/s", benchRepPassEOS, "", benchRepPass, "", "real_kafka_replicated_passthrough_eos_vs_alo_ratio")
	for _, l := range []struct{ bench, suffix string }{{benchRealLatALO, ""}, {benchRealLatEOS, "_eos"}} {
		if v, ok := b.Mean(l.bench, "p50_ms"); ok {
			out["real_kafka_latency_p50_ms"+l.suffix] = v
		}
		if v, ok := b.Mean(l.bench, "p99_ms"); ok {
			out["real_kafka_latency_p99_ms"+l.suffix] = v
		}
	}
}

// pinFigures puts how many end-to-end runs said their client and broker were bound to a
// CPU each (e2e_runs_bound) and how many said they were not (e2e_runs_not_bound), when
// any said either.
func pinFigures(p *Parsed, out map[string]float64) {
	if p.Bound+p.NotBound > 0 {
		out["e2e_runs_bound"] = float64(p.Bound)
		out["e2e_runs_not_bound"] = float64(p.NotBound)
	}
}

// pinned is what the end-to-end runs said of their binding: how many were bound, how
// many not, and whether any said either.
func pinned(res map[string]float64) (bound, notBound int, said bool) {
	b, ok1 := res["e2e_runs_bound"]
	n, ok2 := res["e2e_runs_not_bound"]
	return int(b), int(n), ok1 || ok2
}

// pinSources is RESULTS.md's word on where the end-to-end client and broker ran; why is
// the reason a run gave for not binding them.
func pinSources(res map[string]float64, why string) string {
	bound, notBound, said := pinned(res)
	switch {
	case !said:
		return "whether the client and the broker were bound to CPUs of their own is not in the benchmark output"
	case notBound == 0:
		return "the client bound to one CPU with GOMAXPROCS 1 as the chart runs the gate by default and the broker to another, as a real one is on other machines"
	case bound == 0:
		return fmt.Sprintf("the client and the broker not bound to CPUs of their own: binding them fell back in every run (%s), so the two shared the cores", why)
	default:
		return fmt.Sprintf("the client bound to one CPU with GOMAXPROCS 1 and the broker to another in %d of the %d runs; in the others binding them fell back (%s)", bound, bound+notBound, why)
	}
}

// pinNote is the table's note for e2e_gate_cpu_s_per_million_records; it names the tick
// when the gate's runs reported its Redis's CPU (e2e_redis_cpu_s_per_million), as a gate
// syncing with a real redis-server does.
func pinNote(res map[string]float64, why string) string {
	bound, notBound, said := pinned(res)
	var where string
	switch {
	case !said:
		where = "the broker in a process of its own (whether either was bound to a CPU is not in the output)"
	case notBound == 0:
		where = "bound to one CPU with GOMAXPROCS 1 (the chart's default), the broker in a process of its own bound to another"
	case bound == 0:
		where = fmt.Sprintf("not bound to a CPU (binding fell back: %s), the broker in a process of its own", why)
	default:
		where = fmt.Sprintf("bound to one CPU with GOMAXPROCS 1, the broker to another, in %d of the %d runs (the others fell back: %s)", bound, bound+notBound, why)
	}
	what := "the bench process's CPU (user + system) per million records, "
	if _, ok := res["e2e_redis_cpu_s_per_million"]; ok {
		what = "the bench process's CPU (user + system) per million records, the gate's tick syncing with a real redis-server every second included, "
	}
	return what + where + "; mean over the runs"
}

// pinHow is the README's word on where the end-to-end client and broker ran.
func pinHow(res map[string]float64) string {
	bound, notBound, said := pinned(res)
	switch {
	case !said:
		return "medians"
	case notBound == 0:
		return "medians; the client on one CPU, the broker on another"
	case bound == 0:
		return "medians; client and broker not bound to CPUs of their own"
	default:
		return fmt.Sprintf("medians; client and broker on a CPU each in %d of %d runs", bound, bound+notBound)
	}
}
