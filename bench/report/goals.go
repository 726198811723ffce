package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// goal is a figure's target from issue 6.
type goal struct {
	text string
	met  func(float64) bool
	// by says by how much v misses the goal.
	by func(float64) string
	// bounds are the limits a figure is judged against (none for exactly: a figure is
	// printed 0 only when it is).
	bounds []float64
}

func atMost(x float64) goal {
	return goal{fmt.Sprintf("≤ %g", x), func(v float64) bool { return v <= x },
		func(v float64) string { return "over by " + gap(v-x) }, []float64{x}}
}

func atLeast(x float64) goal {
	return goal{fmt.Sprintf("≥ %g", x), func(v float64) bool { return v >= x },
		func(v float64) string { return "short by " + gap(x-v) }, []float64{x}}
}

func within(lo, hi float64) goal {
	return goal{fmt.Sprintf("within [%g, %g]", lo, hi), func(v float64) bool { return v >= lo && v <= hi },
		func(v float64) string {
			if v < lo {
				return "below by " + gap(lo-v)
			}
			return "above by " + gap(v-hi)
		}, []float64{lo, hi}}
}

func exactly(x float64) goal {
	return goal{fmt.Sprintf("= %g", x), func(v float64) bool { return v == x },
		func(v float64) string { return "off by " + gap(math.Abs(v-x)) }, nil}
}

// undecided reports whether v meets g by less than the rounding of the figures it comes
// from (printedError): go test prints a benchmark's figures rounded (1.0304 as 1.030), so
// a figure that close to a limit may be one past it, and is not shown met. A figure of 0
// at a limit of 0 is decided: go test prints 0 as 0 (a count) and only a share under
// 0.00000005 as 0.0000000, which reads as 0 too.
func (g goal) undecided(v float64) bool {
	if !g.met(v) {
		return false
	}
	for _, b := range g.bounds {
		if (v != 0 || b != 0) && math.Abs(v-b) < printedError(v) {
			return true
		}
	}
	return false
}

// notShown is a table's "met" for a figure that meets its goal by less than the rounding
// of what go test printed (goal.undecided): make bench fails on it, so no table shows it
// met.
const notShown = "not shown"

// verdict is a table's "met" for v against g: yes, no or notShown.
func (g goal) verdict(v float64) string {
	switch {
	case !g.met(v):
		return "no"
	case g.undecided(v):
		return notShown
	}
	return "yes"
}

// printedError bounds how far a figure near v can be from what go test printed of it, or
// from a ratio of two such: half a unit of the last digit printed (testing's prettyPrint:
// no decimals from 999.95, seven below 0.001), or 0.1% of v, a ratio's two roundings,
// whichever is more.
func printedError(v float64) float64 {
	y := math.Abs(v)
	half := 0.5
	for _, edge := range []float64{999.95, 99.995, 9.9995, 0.99995, 0.099995, 0.0099995, 0.00099995} {
		if y >= edge {
			break
		}
		half /= 10
	}
	return max(half, 1e-3*y)
}

// row is one line of a table: a key, its goal (nil: none) and a note.
type row struct {
	key  string
	goal *goal
	note string
}

// rows lists the keys in table order, with their goals (nil: no goal, shown alongside).
var rows = []row{
	{"hotpath_ns_per_op", nil, "check, parallel, Zipf 100k teams, clock read per 64 records"},
	{"hotpath_allocs_per_op", nil, ""},
	{"hotpath_vs_map_ratio", ptr(atMost(1.5)), "÷ bare sharded map, caller's own key strings: BenchmarkCheckBesideMap, the two in turns in one process, median of the processes' ratios"},
	{"hotpath_vs_map_copied_ratio", nil, "÷ bare sharded map holding copied keys, as a real cache must, the same way"},
	{"hotpath_vs_map_ratio_sequential", nil, "the same from BenchmarkCheck, one after the other in each process: ratio of the medians"},
	{"hotpath_vs_map_copied_ratio_sequential", nil, "the same, copied keys"},
	{"hotpath_beside_map_ns_per_op", nil, "the check in BenchmarkCheckBesideMap, median of the processes"},
	{"hotpath_beside_map_map_ns_per_op", nil, "the bare map there, the same"},
	{"hotpath_beside_map_processes", nil, "the processes BenchmarkCheckBesideMap ran in, counted in the output: its medians are over them"},
	{"hotpath_serial_ns_per_op", nil, "check, one goroutine"},
	{"sync_lua_checks_per_s", nil, "one EVALSHA of the sliding-log script per record, one connection"},
	{"hotpath_vs_sync_lua_speedup", ptr(atLeast(100)), "(1e9 ÷ hotpath_serial_ns_per_op) ÷ sync_lua_checks_per_s"},
	{"route_one_rule_vs_no_file_ratio", ptr(atMost(1.05)), "routing a cached JSON record with a one-rule file (the team rule) ÷ without a rules file: BenchmarkRouteTurns, no file, one rule and three rules in turns of 65,536 records on one goroutine; each run's ratio of its medians, the median of the runs"},
	{"route_three_rules_vs_one_rule_ratio", ptr(atMost(1.2)), "three rules ÷ one rule, the same"},
	{"route_ns_per_record_no_file", nil, "routing one record without a rules file, ns: each run's median turn, the median of the runs"},
	{"route_ns_per_record_one_rule", nil, "the same, one rule"},
	{"route_ns_per_record_three_rules", nil, "the same, three rules"},
	{"e2e_gate_records_per_s", nil, "mean over the runs"},
	{"e2e_passthrough_records_per_s", nil, "mean over the runs"},
	{"e2e_vs_passthrough_ratio", ptr(atLeast(0.9)), "ratio of the means"},
	{"e2e_vs_passthrough_ratio_worst_run", nil, "the least of the runs' ratios, each gate run against the plain pass-through of its process, run right after it"},
	{"e2e_gate_cpu_s_per_million_records", nil, "the bench process's CPU (user + system) per million records, the gate's tick syncing with a real redis-server every second included, bound to one CPU with GOMAXPROCS 1 (the chart's default), the broker and redis-server in processes of their own bound to another; mean over the runs"},
	{"e2e_passthrough_pooled_cpu_s_per_million_records", nil, "the same, the pass-through lending franz-go the gate's pools (kgo.WithPools) and recycling its input once produced, as the gate does: the CPU goal's baseline"},
	{"e2e_cpu_vs_passthrough_ratio", ptr(atMost(1.15)), "gate (its tick included) ÷ the pooled pass-through, the best franz-go consume→produce→commit loop (e2e_passthrough_pooled_cpu_s_per_million_records): ratio of the medians over the runs"},
	{"e2e_cpu_vs_passthrough_ratio_of_means", nil, "the same, ratio of the means"},
	{"e2e_cpu_vs_passthrough_ratio_worst_run", nil, "the greatest of the runs' ratios, each gate run against the pooled pass-through of its process"},
	{"e2e_passthrough_cpu_s_per_million_records", nil, "the same as e2e_gate_cpu_s_per_million_records, the plain pass-through (no pools: the fetched records left to the garbage collector)"},
	{"e2e_cpu_vs_unpooled_passthrough_ratio", nil, "gate ÷ the plain pass-through, ratio of the medians: not a goal (the CPU goal's baseline until the pooled pass-through replaced it)"},
	{"e2e_redis_cpu_s_per_million", nil, "redis-server's CPU (INFO cpu, user + sys) per million records over the gate's runs: what its tick costs Redis, a process of its own, not in the gate's figures; mean over the runs"},
	{"e2e_gate_alloc_bytes_per_record", nil, "bytes the bench process allocated per record (runtime.MemStats.TotalAlloc), mean over the runs: the garbage collector's work follows it"},
	{"e2e_passthrough_pooled_alloc_bytes_per_record", nil, "the same, the pooled pass-through"},
	{"e2e_passthrough_alloc_bytes_per_record", nil, "the same, the plain pass-through"},
	{"e2e_client_gomaxprocs", nil, "GOMAXPROCS of the runs above: 1 when client and broker were bound to a CPU each (BenchmarkEndToEnd), the machine's when it has only one"},
	{"e2e_runs_bound", nil, "BenchmarkEndToEnd's runs (each mode in each process) that said their client and broker were bound to a CPU each"},
	{"e2e_runs_not_bound", nil, "those that said binding them fell back, sharing the cores (the Sources below say why)"},
	{"e2e_shared_cores_gate_cpu_s_per_million_records", nil, "BenchmarkEndToEndSharedCores: the gate with client and broker sharing every core (GOMAXPROCS the machine's), mean over the runs"},
	{"e2e_shared_cores_passthrough_cpu_s_per_million_records", nil, "the same, the pass-through"},
	{"e2e_shared_cores_cpu_vs_passthrough_ratio", nil, "ratio of the means: the broker's work and the threads' placing in the client's CPU, not a goal"},
	{"e2e_shared_cores_cpu_vs_passthrough_ratio_worst_run", nil, "the greatest of those runs' ratios"},
	{"e2e_shared_cores_vs_passthrough_ratio", nil, "records/s, gate ÷ pass-through, ratio of the means, cores shared"},
	{"e2e_exactly_once_records_per_s", nil, "the gate with exactly-once delivery (transactions spanning polls, read_committed input), mean over the runs"},
	{"e2e_exactly_once_vs_at_least_once", nil, "÷ e2e_gate_records_per_s (at-least-once, the default), ratio of the means"},
	{"kfake_gate_records_per_s", nil, "BenchmarkEndToEndSameClock: BenchmarkRealKafka's sides and clock on kfake (a process of its own, sharing the cores), mean over the runs"},
	{"kfake_passthrough_records_per_s", nil, "the pass-through that produces without waiting per poll and commits behind its acknowledgements, the same"},
	{"kfake_e2e_vs_passthrough_ratio", ptr(atLeast(0.9)), "kfake_gate_records_per_s ÷ kfake_passthrough_records_per_s, ratio of the means"},
	{"kfake_exactly_once_records_per_s", nil, "the exactly-once gate, the same"},
	{"kfake_eos_vs_alo_ratio", ptr(atLeast(0.85)), "÷ kfake_gate_records_per_s, ratio of the means"},
	{"kfake_eos_passthrough_records_per_s", nil, "the exactly-once pass-through with the gate's transaction policy, the same"},
	{"kfake_eos_vs_eos_passthrough_ratio", ptr(atLeast(0.9)), "kfake_exactly_once_records_per_s ÷ kfake_eos_passthrough_records_per_s, ratio of the means"},
	{"outcomes_vs_off_ratio", ptr(atLeast(0.95)), "BenchmarkOutcomesTurns: the gate at least once with outcome rows (GATE_OUTCOMES_TOPIC) ÷ without, in records/s, in turns on the same clock's kfake (a round a turn of each, the first alternating; each turn 1,000,000 records timed after 300,000 untimed, to its graceful stop's last commit), the median of a run's rounds, the mean of the runs (issue Outcomes: throughput with outcomes on ≥ 0.95 × off)"},
	{"outcomes_cpu_vs_off_ratio", nil, "the same rounds, the bench process's CPU a record, on ÷ off"},
	{"outcomes_turns_off_records_per_s", nil, "the same rounds, the gate without outcomes, records/s, the median of a run's rounds, the mean of the runs"},
	{"outcomes_turns_on_records_per_s", nil, "the same, the gate with outcomes"},
	{"outcomes_turns_rounds", nil, "the rounds of every run"},
	{"outcomes_turns_same_gate_ratio", nil, "BenchmarkOutcomesTurnsSameGate: the same method with the gate without outcomes in both turns, what it gives two equal gates (1 without a bias of its own)"},
	{"outcomes_turns_same_gate_cpu_ratio", nil, "the same, CPU a record"},
	{"outcomes_off_gate_records_per_s", nil, "BenchmarkOutcomes: the gate, at least once, six runs of 4,000,000 records (three with the outcomes gate first) on the same clock's kfake, mean over the runs"},
	{"outcomes_gate_records_per_s", nil, "the same gate writing outcome rows (GATE_OUTCOMES_TOPIC), run right after it, the same"},
	{"outcomes_pairs_vs_off_ratio", nil, "outcomes_gate_records_per_s ÷ outcomes_off_gate_records_per_s, ratio of the means: a pair a process, whose single pairs scattered from 0.80 to 1.12"},
	{"outcomes_pairs_cpu_vs_off_ratio", nil, "the bench process's CPU per record, on ÷ off, ratio of the means"},
	{"outcomes_off_exactly_once_records_per_s", nil, "the exactly-once gate, the same runs"},
	{"outcomes_exactly_once_records_per_s", nil, "the exactly-once gate writing outcome rows in its transactions, the same"},
	{"outcomes_eos_vs_off_ratio", nil, "÷ outcomes_off_exactly_once_records_per_s, ratio of the means"},
	{"outcomes_alloc_bytes_per_record", nil, "bytes allocated per record by the gate writing outcomes, less the gate without, means (0 on the hot path: route's TestOutcomesNoAllocation; the rest is the seals')"},
	{"outcomes_eos_alloc_bytes_per_record", nil, "the same, exactly once"},
	{"outcomes_eos_cpu_vs_off_ratio", nil, "the bench process's CPU per record, on ÷ off, exactly once, ratio of the means"},
	{"outcomes_rows_per_million_records", nil, "outcome rows written a million records at least once (a seal every GATE_OUTCOMES_FLUSH_INTERVAL, 10 s, which a run of 4,000,000 records ends before: its rows are its stop's seal, a row per team that routed in it), means"},
	{"outcomes_eos_rows_per_million_records", nil, "the same exactly once (a seal every transaction, GATE_TRANSACTION_INTERVAL)"},
	{"outcomes_short_run_vs_off_ratio", nil, "BenchmarkEndToEndSameClock's runs of 300,000 records, shorter than one GATE_COMMIT_INTERVAL: every row written after the last record and awaited, a shutdown's cost timed as a rate"},
	{"outcomes_short_run_eos_vs_off_ratio", nil, "the same, exactly once"},
	{"replay_consume_records_per_s", nil, "BenchmarkReplay/kfake: a bare franz-go consume of 1,000,000 records (8 partitions, read_committed, nothing done per record), mean over the runs"},
	{"replay_records_per_s", nil, "gate replay's read (merged in record-time order) and decision (a per-user rule and a team rule) of the same range, in turns with the consume, the same, on its default workers (one a processor, dealt by team_id)"},
	{"replay_one_worker_records_per_s", nil, "the same replay on one worker (-workers 1), in turns with the others"},
	{"replay_consume_cpu_ns_per_record", nil, "the bare consume's CPU a record, the process's (kfake's included)"},
	{"replay_cpu_ns_per_record", nil, "the replay's on its default workers, the same: with replay_consume_cpu_ns_per_record, how many cores replay_vs_consume_ratio ≥ 0.8 needs"},
	{"replay_vs_consume_ratio", ptr(atLeast(0.8)), "replay_records_per_s ÷ replay_consume_records_per_s, ratio of the means (issue Replay: a replay reads and decides at ≥ 0.8 × a bare consume)"},
	{"real_kafka_replay_consume_records_per_s", nil, "BenchmarkReplay/kafka: the same on Apache Kafka 4.3.1, one node on the same machine, its JVM warmed by a consume first"},
	{"real_kafka_replay_records_per_s", nil, "the replay, the same"},
	{"real_kafka_replay_one_worker_records_per_s", nil, "the replay on one worker, the same"},
	{"replay_routing_one_worker_records_per_s", nil, "BenchmarkEngineWorkers: the replay's routing alone (the same records and rules, already read, no broker), on one worker"},
	{"replay_routing_workers_records_per_s", nil, "the same on one worker a processor, in turns with one"},
	{"replay_routing_workers_speedup", nil, "the time on one worker ÷ the time on one a processor: how routing scales with processors when nothing else needs them"},
	{"real_kafka_replay_vs_consume_ratio", ptr(atLeast(0.8)), "ratio of the means, on Apache Kafka"},
	{"real_kafka_gate_records_per_s", nil, "BenchmarkRealKafka: Apache Kafka 4.3.1, one node on the same machine, timed to the same end as the pass-through (real_kafka_e2e_vs_passthrough_ratio), mean over the runs"},
	{"real_kafka_passthrough_records_per_s", nil, "a bare franz-go pass-through written as the gate works (produces without waiting, commits behind its acknowledgements every second and at its stop), same broker, same clock, mean over the runs"},
	{"real_kafka_e2e_vs_passthrough_ratio", ptr(atLeast(0.9)), "ratio of the means, same broker, same run, one clock for both: from the side's start to the first look at the broker (every 2 ms) that finds every input record on the outputs (their end offsets) and the group's commits (OffsetFetch) at every input partition's end; each side is asked to stop, committing what it has acknowledged, once its records are on the outputs"},
	{"real_kafka_cpu_vs_passthrough_ratio", nil, "the bench process's CPU per record, gate ÷ pass-through, ratio of the means (the JVM broker is another process)"},
	{"real_kafka_exactly_once_records_per_s", nil, "the gate with exactly-once delivery on the real transaction coordinator, same clock (its commits are its transactions'), mean over the runs"},
	{"real_kafka_eos_vs_alo_ratio", ptr(atLeast(0.85)), "÷ real_kafka_gate_records_per_s, ratio of the means: what exactly-once costs, with transactions spanning polls (GATE_TRANSACTION_INTERVAL's default)"},
	{"real_kafka_eos_passthrough_records_per_s", nil, "a bare franz-go exactly-once pass-through (GroupTransactSession) with the gate's transaction policy, same broker, same clock, mean over the runs"},
	{"real_kafka_eos_vs_eos_passthrough_ratio", ptr(atLeast(0.9)), "real_kafka_exactly_once_records_per_s ÷ real_kafka_eos_passthrough_records_per_s, ratio of the means"},
	{"real_kafka_replicated_passthrough_records_per_s", nil, "BenchmarkRealKafkaReplicated: three Apache Kafka brokers, every topic replicated three times, the at-least-once pass-through (produces without waiting, commits behind its acknowledgements), same clock, mean over the runs"},
	{"real_kafka_replicated_gate_records_per_s", nil, "BenchmarkRealKafkaReplicated: three Apache Kafka brokers, every topic replicated three times, the at-least-once gate, same clock, mean over the runs"},
	{"real_kafka_replicated_exactly_once_records_per_s", nil, "the same cluster, the exactly-once gate"},
	{"real_kafka_replicated_eos_passthrough_records_per_s", nil, "the same cluster, the exactly-once pass-through with the gate's transaction policy"},
	{"real_kafka_replicated_eos_vs_alo_ratio", ptr(atLeast(0.85)), "real_kafka_replicated_exactly_once_records_per_s ÷ real_kafka_replicated_gate_records_per_s, ratio of the means"},
	{"real_kafka_replicated_eos_vs_eos_passthrough_ratio", ptr(atLeast(0.9)), "real_kafka_replicated_exactly_once_records_per_s ÷ real_kafka_replicated_eos_passthrough_records_per_s, ratio of the means"},
	{"real_kafka_replicated_e2e_vs_passthrough_ratio", nil, "real_kafka_replicated_gate_records_per_s ÷ real_kafka_replicated_passthrough_records_per_s, ratio of the means"},
	{"real_kafka_replicated_passthrough_eos_vs_alo_ratio", nil, "real_kafka_replicated_eos_passthrough_records_per_s ÷ real_kafka_replicated_passthrough_records_per_s, ratio of the means: what exactly-once costs a franz-go program that does nothing else on this cluster, the ceiling of real_kafka_replicated_eos_vs_alo_ratio"},
	{"real_kafka_latency_p50_ms", nil, "produced → readable on accepted, 2,000 records/s, at-least-once"},
	{"real_kafka_latency_p99_ms", nil, "the same, p99"},
	{"real_kafka_latency_p50_ms_eos", nil, "the same with exactly-once, read with read_committed"},
	{"real_kafka_latency_p99_ms_eos", ptr(atMost(150)), "the same, p99: at most GATE_TRANSACTION_INTERVAL's default (100 ms) + 50 ms"},
	{"catchup_false_overflow_event", ptr(atMost(0)), "GATE_CLOCK=event: share of records limited when 4 gates replay a backlog of 10 windows at 10×, teams at 30-90% of their limits"},
	{"catchup_false_overflow_wall", nil, "the same replay with GATE_CLOCK=wall"},
	{"sync_read_reduction", ptr(atLeast(0.95)), "100k teams, Zipf, 60 s window, 15 s sync"},
	{"sync_read_reduction_reference", nil, "the reference design's cadence, same traffic"},
	{"redis_commands_per_tick", nil, "same run as sync_read_reduction"},
	{"redis_commands_per_tick_baseline", nil, "the same traffic written as before writes were made safe to repeat (INCRBY + EXPIRE per count)"},
	{"redis_cpu_s_per_million_events", nil, "redis-server CPU (INFO cpu, user + sys) per million events, same run as sync_read_reduction"},
	{"redis_cpu_s_per_million_events_baseline", nil, "the same, writes as before (INCRBY + EXPIRE per count)"},
	{"redis_commands_per_tick_nohold", nil, "the same traffic with divert holds off (GATE_DIVERT_HOLD=0, GATE_DIVERT_RELEASE=1): what the hold flags cost"},
	{"redis_cpu_s_per_million_events_nohold", nil, "the same, Redis CPU"},
	{"redis_commands_per_tick_rules3", nil, "the same traffic under three rules (team; team:user, 50 users a team; an event type, 1 in 20 events), one tick"},
	{"redis_writes_per_tick_rules3", nil, "the same, counts written per tick: one per active key and window"},
	{"redis_cpu_s_per_million_events_rules3", nil, "the same, Redis CPU"},
	{"redis_cpu_rules3_vs_one_rule", ptr(atMost(1.5)), "redis_cpu_s_per_million_events_rules3 ÷ the one rule's (the team), run in lockstep beside it: the keys of the user rule and of the event-type rule (a match) under the floor neither written nor read"},
	{"redis_commands_rules3_vs_one_rule", ptr(atMost(1.5)), "redis_commands_per_tick_rules3 ÷ the one rule's, in lockstep: a write batch carries counters of every rule of one window, and a lane's hold flags go in one command"},
	{"rotation_redis_cpu_vs_team_rule", ptr(atMost(1.5)), "BenchmarkRotation (five runs, the means): 20k records/s of 100k Zipf teams × 50 users and one team with a fresh distinct_id on 20% of them, a team+distinct_id rule before the team rule ÷ the team rule alone, in lockstep: Redis CPU per million records"},
	{"rotation_gate_cpu_vs_team_rule", ptr(atMost(1.3)), "the same, the process's CPU per record (checks and the tick's client side, the load's generation included in both)"},
	{"rotation_whole_gate_team_rule_cpu_s_per_million", nil, "BenchmarkRotationGate: the rotation load through the whole gate (kfake, read, route, produce, the tick on redis-server) with the team rule alone: the bench process's CPU seconds per million records, mean over the runs"},
	{"rotation_whole_gate_user_rule_cpu_s_per_million", nil, "the same with the team_id+distinct_id rule before the team rule"},
	{"rotation_whole_gate_cpu_vs_team_rule", nil, "rotation_whole_gate_user_rule_cpu_s_per_million ÷ rotation_whole_gate_team_rule_cpu_s_per_million, ratio of the means: the gate's CPU per record, as the issue measured it, beside BenchmarkRotation's limiters and tick alone"},
	{"rotation_heap_vs_team_rule", ptr(atMost(1.5)), "the same, each alone for 10 simulated minutes: peak live heap"},
	{"rotation_heap_flat", ptr(atMost(1.1)), "the same, the rotation's live heap at minute 10 ÷ at minute 3"},
	{"rotation_gate_cpu_ns_per_record", nil, "the rotation's process CPU per record"},
	{"rotation_team_gate_cpu_ns_per_record", nil, "the team rule alone's, in the same lockstep"},
	{"redis_cpu_vs_baseline", ptr(atMost(0.2)), "redis_cpu_s_per_million_events ÷ its baseline, same run"},
	{"redis_cpu_s_per_million_events_adaptive_static", nil, "BenchmarkAdaptiveCost, static: the same workload, windows 24-32 of a fresh fleet; redis-server CPU during the ticks (between them it idles for as long as the benchmark takes to simulate a second)"},
	{"redis_cpu_s_per_million_events_adaptive", nil, "GATE_THRESHOLD_MODE=adaptive before any team is learned: the profiles' upkeep alone, in lockstep with static in one process"},
	{"redis_cpu_s_per_million_events_adaptive_learned", nil, "adaptive with every team learned from its first fold (min history one window), the same lockstep"},
	{"redis_cpu_adaptive_vs_static", ptr(atMost(1.1)), "redis_cpu_s_per_million_events_adaptive ÷ _adaptive_static"},
	{"redis_cpu_adaptive_learned_vs_static", ptr(atMost(1.1)), "redis_cpu_s_per_million_events_adaptive_learned ÷ _adaptive_static (goal: at most 10% more)"},
	{"redis_process_cpu_s_per_million_events_adaptive_static", nil, "the same three, redis-server's CPU over the measured windows, idle time included"},
	{"redis_process_cpu_s_per_million_events_adaptive", nil, "the same, adaptive"},
	{"redis_process_cpu_s_per_million_events_adaptive_learned", nil, "the same, learned"},
	{"redis_process_cpu_adaptive_vs_static", nil, "redis_process_cpu_s_per_million_events_adaptive ÷ _adaptive_static"},
	{"redis_process_cpu_adaptive_learned_vs_static", nil, "the same, learned"},
	{"redis_cpu_s_per_million_events_adaptive_fleet_static", nil, "BenchmarkAdaptiveFleetCost: 4 gates, static, windows 12-20, redis-server CPU during the ticks"},
	{"redis_cpu_s_per_million_events_adaptive_fleet", nil, "the same fleet, every team learned, a process of its own beside it"},
	{"redis_cpu_adaptive_fleet_vs_static", ptr(atMost(1.1)), "the fleet's ratio (goal: at most 10% more)"},
	{"redis_process_cpu_s_per_million_events_adaptive_fleet_static", nil, "the same fleet, static, idle time included"},
	{"redis_process_cpu_s_per_million_events_adaptive_fleet", nil, "the same, learned"},
	{"redis_process_cpu_adaptive_fleet_vs_static", nil, "the same, the ratio"},
	{"gates_per_redis_core", ptr(atLeast(64)), "gates one Redis core carries at 50% CPU, each at 100k Zipf records/s over 100k teams (BenchmarkFleetRedis, least over 1-64 gates)"},
	{"gates_per_redis_core_baseline", nil, "the same with the writes as before (one gate)"},
	{"divert_switches_per_min_swing_n1", ptr(atMost(8)), "divert, 1 gate, 4 partitions, a minute swinging around the limit (1.33 × 3 s, 0.67 × 3 s): topic switches within partitions, summed (BenchmarkDivertSwitches; at most 2 per partition)"},
	{"divert_switches_per_min_swing_n2", ptr(atMost(8)), "the same, 2 gates"},
	{"divert_switches_per_min_swing_n4", ptr(atMost(8)), "the same, 4 gates"},
	{"divert_switches_per_min_swing_n1_baseline", nil, "the same, 1 gate, divert without holds (GATE_DIVERT_HOLD=0, GATE_DIVERT_RELEASE=1)"},
	{"divert_switches_per_min_swing_n2_baseline", nil, "the same, 2 gates, without holds"},
	{"divert_switches_per_min_swing_n4_baseline", nil, "the same, 4 gates, without holds"},
	{"divert_switches_steady_n1", ptr(exactly(4)), "a minute steady at 1.2 ×, 1 gate: the crossing, one per partition"},
	{"divert_switches_steady_n2", ptr(exactly(4)), "the same, 2 gates"},
	{"divert_switches_steady_n4", ptr(exactly(4)), "the same, 4 gates"},
	{"divert_switches_steady_n2_baseline", nil, "the same, 2 gates, without holds"},
	{"divert_diverted_x0.8_n4", ptr(exactly(0)), "records diverted in a minute at 0.8 ×, 4 gates (1 and 2: divert_diverted_x0.8_n1, _n2)"},
	{"divert_release_after_calm_s_n4", ptr(atMost(11)), "after 20 s at 2 ×, traffic at 0.3 ×: seconds from the exact count falling under the release level to the last of 4 gates releasing the team (hold 10 s, tick 1 s)"},
	{"divert_release_spread_s_n4", ptr(atMost(1)), "same run: seconds between the first and the last gate releasing it"},
	{"adaptive_spike_recall", ptr(atLeast(0.9)), "spike protection's learner (BenchmarkSpikeTrace), the whole trace: the daily one (10k teams, 7 days, spikes of 5/20/100 × on 3% of teams) and the other shapes (weekly, pause, steps, nightly batch, late start: 300 teams each over 21 days); from day 2, divert: share of spike windows' records diverted"},
	{"adaptive_spike_recall_static", nil, "the same, the best single static threshold in hindsight (by F1)"},
	{"adaptive_spike_precision", nil, "share of diverted records that were in a spike, the shapes' onsets counting against it (a lasting step's first GATE_ADAPTIVE_MAX_SPIKE, a nightly import until the learner accepts it)"},
	{"adaptive_spike_precision_settled", ptr(atLeast(0.95)), "the same outside the onsets, where diverting is the design: a step is a spike until it lasts, an import until the learner accepts it (one of its hours a pattern hour, or a night with a learned threshold ending with none of its hours marked a burst)"},
	{"adaptive_spike_precision_static", nil, "the same, best static threshold"},
	{"adaptive_false_overflow_share", nil, "share of spike-free teams' records diverted, the whole trace, onsets included"},
	{"adaptive_false_overflow_share_settled", ptr(atMost(0.001)), "the same outside the shapes' onsets"},
	{"adaptive_onset_diverted_share", ptr(atMost(0.005)), "share of spike-free teams' records diverted in the shapes' onsets, which the _settled keys leave out (per shape: _<shape>)"},
	{"adaptive_false_overflow_share_static", nil, "the same, best static threshold"},
	{"adaptive_peak_false_overflow", nil, "records of spike-free teams diverted within an hour of their daily peak, onsets included (a step up, an import, near the team's peak)"},
	{"adaptive_peak_false_overflow_settled", ptr(exactly(0)), "the same outside the shapes' onsets: once the learner has accepted an import, none of it diverted at the team's peak, as none of the daily trace's (goal = 0, as _daily's)"},
	{"adaptive_import_accepted_night_max", ptr(atMost(7)), "teams with a nightly import: the latest night on which the learner accepted one (its onset's end; never: 22); goal: accepted by the seventh night, as operations.md promises for an import there from a team's first days"},
	{"adaptive_detect_windows", ptr(atMost(2)), "windows from a spike's start to ≥ 90% of it diverted, mean over the spikes detected only, weighed by volume (the median: adaptive_detect_windows_median; those never detected: adaptive_undetected_spike_share)"},
	{"adaptive_detect_windows_lower_bound", nil, "the same with each spike never detected counted as its length: a lower bound, which can show the goal missed but never met"},
	{"adaptive_undetected_spike_share", nil, "share of the spikes never ≥ 90% diverted in any window: mostly small teams' spikes under the floor (GATE_ADAPTIVE_FLOOR), which the learner takes as noise by design"},
	{"adaptive_undetected_spike_share_over_floor", ptr(atMost(0.1)), "the same of the spikes over the floor (usual volume × factor at least the floor, mean over the spike): goal the recall goal's tenth, counted per spike"},
	{"adaptive_detect_windows_static", nil, "the same, best static threshold, over the spikes it detects at all (adaptive_spikes_undetected_static says how many it misses)"},
	{"adaptive_spike_recall_cap", nil, "cap mode: share of spike records over the usual volume diverted (a cap admits up to 4 × the baseline)"},
	{"adaptive_spike_recall_daily", ptr(atLeast(0.9)), "the daily trace alone (10k teams, 7 days): recall"},
	{"adaptive_spike_precision_daily", ptr(atLeast(0.95)), "the daily trace alone: precision"},
	{"adaptive_false_overflow_share_daily", ptr(atMost(0.001)), "the daily trace alone: false overflow"},
	{"adaptive_peak_false_overflow_daily", ptr(exactly(0)), "the daily trace alone: records of spike-free teams diverted within an hour of their daily peak"},
	{"adaptive_false_overflow_share_weekly", ptr(atMost(0.001)), "teams whose weekdays are 2, 5, 8 or 12 × their weekend, spike-free: share diverted"},
	{"adaptive_false_overflow_share_pause", ptr(atMost(0.001)), "teams silent 6, 24 or 72 h, then back at their usual volume, spike-free: share diverted"},
	{"adaptive_pause_return_diverted", ptr(exactly(0)), "records diverted in the two days after a pause, spike-free pause teams"},
	{"adaptive_step_accepted_after_h", ptr(atMost(3)), "teams stepping up for good to 3, 6 or 20 ×: hours from the step to the last window with > 1% diverted, the most (bound GATE_ADAPTIVE_MAX_SPIKE 3 h; mean: _mean)"},
	{"adaptive_false_overflow_share_stepdown", ptr(atMost(0.001)), "teams stepping down for good to a third or a tenth, spike-free: share diverted"},
	{"adaptive_false_overflow_share_late", ptr(atMost(0.001)), "teams starting in days 2 to 10, spike-free: share diverted"},
	{"adaptive_false_overflow_share_batch", nil, "teams with a nightly import of 10 or 30 × for 30 to 60 minutes, spike-free: share diverted, the import's onset included"},
	{"adaptive_false_overflow_share_settled_batch", ptr(atMost(0.001)), "the same once the learner has accepted the import"},
	{"adaptive_false_overflow_share_stepup", nil, "step-up teams, spike-free: share diverted (the step until it is re-learned)"},
	{"adaptive_false_overflow_share_settled_stepup", ptr(atMost(0.001)), "the same after the step's first GATE_ADAPTIVE_MAX_SPIKE"},
	{"adaptive_spike_recall_weekly", ptr(atLeast(0.9)), "recall of the spikes injected in the weekly teams (each shape's: adaptive_spike_recall_<shape>)"},
	{"fleet_process_worst_window", ptr(within(0.97, 1.03)), "four gate processes, one team at 2 × its limit, cap: the window farthest from the threshold, ÷ threshold (BenchmarkFleetProcessWindow; the simulation's cap_admitted_worst_window_n4_x2)"},
	{"tick_p99_ms_1m_teams", ptr(atMost(1000)), "one gate caching a million teams, 100k Zipf records/s: tick p99 over a steady minute (BenchmarkMillionTeams; the tick interval is 1 s)"},
	{"bytes_per_entity_1m_teams", ptr(atMost(150)), "same run: heap held by the limiter and the tick per cached team"},
	{"tick_all_teams_commands_per_tick", nil, "a tick with all 100k teams dirty (BenchmarkTick/standalone)"},
	{"bytes_per_entity", ptr(atMost(150)), "heap per cached team at 300k teams"},
	{"bytes_per_entity_16b_teams", nil, "the same, teams of 16 bytes (a composite key), beyond the 11 an entry holds: in its table's arena"},
	{"bytes_per_entity_36b_teams", nil, "the same, teams of 36 bytes (a UUID's length)"},
	{"bench_failed_ticks", ptr(atMost(0)), "ticks the tick benchmarks and the end-to-end gate's tick saw fail (a read or write past its timeout: the machine too slow or too loaded for them), counted rather than stopping the run; a figure measured beside failed ticks is suspect"},
}

func ptr(g goal) *goal { return &g }

// goalOf is key's goal in rows or fidelityRows (nil: none).
func goalOf(key string) *goal {
	for _, rs := range [][]row{rows, fidelityRows} {
		for _, r := range rs {
			if r.key == key {
				return r.goal
			}
		}
	}
	return nil
}

// goalRows are the rows with a goal, rows then fidelityRows.
func goalRows() []row {
	var out []row
	for _, r := range append(slices.Clone(rows), fidelityRows...) {
		if r.goal != nil {
			out = append(out, r)
		}
	}
	return out
}

// gap is how far a figure is from its goal: at four decimals (round), or where that is 0
// for a figure that misses it, to four significant digits.
func gap(d float64) string {
	if r := round(d); r != 0 || d == 0 {
		return format(r)
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(d, 'g', 4, 64), 64)
	return format(v)
}

// fidelityRows are the fidelity keys, ours; the baselines' are <key>_<baseline>.
var fidelityRows = []row{
	{"fleet_admitted_over_threshold", ptr(within(0.97, 1.03)), "cap, 4 instances, team at 2 ×: admitted per window ÷ threshold, mean of windows 3–8"},
	{"fleet_admitted_worst_window", ptr(within(0.97, 1.03)), "same run, the window farthest from 1"},
	{"divert_detect_ticks", ptr(atMost(3)), "divert, 4 instances, 0.5 → 5 ×: exact count over the threshold → ≥ 90% of the team diverted"},
	{"divert_leak_over_threshold", ptr(atMost(0.2)), "same run, records accepted meanwhile ÷ threshold"},
	{"divert_share_steady", ptr(atLeast(0.99)), "divert, 4 instances, team held at 1.2 ×: share diverted, windows 3–8"},
	{"cap_admitted_worst_window_n16_x1.2", ptr(within(0.97, 1.03)), "cap, 16 instances, team at 1.2 ×: the window farthest from 1"},
	{"fleet_user_rule_admitted_worst_window", ptr(within(0.97, 1.03)), "BenchmarkFleetUserRule: a capped runaway key at 2 × and 10 × among keys under the floor (the sketch), 1, 4 and 16 gates: the window farthest from 1"},
	{"cap_admitted_worst_window_n16_x2", ptr(within(0.97, 1.03)), "the same at 2 ×"},
	{"cap_admitted_worst_window_n16_x10", ptr(within(0.97, 1.03)), "the same at 10 ×"},
	{"divert_detect_ticks_n16_x1.2", ptr(atMost(2)), "divert, 16 instances, 0.5 → 1.2 ×: exact count over the threshold → ≥ 90% of the team diverted in a tick"},
	{"divert_detect_ticks_n16_x2", ptr(atMost(2)), "the same, 0.5 → 2 ×"},
	{"divert_detect_ticks_n16_x10", ptr(atMost(2)), "the same, 0.5 → 10 ×"},
	{"false_overflow_below_80pct", ptr(exactly(0)), "records limited of teams at 0.3, 0.6, 0.78 × beside the hot one, all scenarios, both modes"},
}
