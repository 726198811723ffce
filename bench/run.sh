#!/usr/bin/env bash
# The benchmarks behind bench/results.json, one part after another (make bench runs this,
# tees its output to bench/raw.txt and then runs bench/report on it).
#
# - One package at a time (go test -p 1): on a 2-core machine, two packages' benchmarks at
#   once share the cores and time each other (a tick missed its deadline that way).
# - A part that fails does not stop the others: what was measured still reaches the
#   report, and the run ends failed, naming the part. A tick that misses its deadline
#   on a slow machine is not a failure: the tick benchmarks count it (failed-ticks,
#   summed into bench_failed_ticks).
# - Each part says how long it took; the list of them, with the total, ends the output.
# - Every benchmark runs verbose (-v): a benchmark that skips (the real-Kafka ones without
#   Java, those needing redis-server without it) prints "--- SKIP:" and why only then, and
#   the report fails make bench on it, as on a part that failed, a figure with a goal
#   missing, one from a fallback and a goal missed (bench/report/gate.go).
#
# GO (go) and BENCHTIME (1s) come from make.
set -u -o pipefail
GO=${GO:-go}
BENCHTIME=${BENCHTIME:-1s}
cd "$(dirname "$0")/.."

# Benchmarks of the tick package that run once each (-benchtime 1x), in parts of their own.
SYNC_ONCE='^Benchmark(Fidelity|CatchUp|FleetRedis|MillionTeams|DivertSwitches|AdaptiveCost|AdaptiveFleetCost|Rotation)$'

parts=()
failed=()
start_all=$(date +%s)

# part NAME CMD...: runs CMD, notes how long it took and whether it failed.
part() {
	local name=$1
	shift
	echo "=== bench part: $name"
	local s
	s=$(date +%s)
	if "$@"; then
		parts+=("$(printf '%-28s %5d s' "$name" $(($(date +%s) - s)))")
	else
		parts+=("$(printf '%-28s %5d s  FAILED' "$name" $(($(date +%s) - s)))")
		failed+=("$name")
	fi
}

# repeat N CMD...: runs CMD N times, all of them even when one fails, which it reports.
repeat() {
	local n=$1 rc=0 k
	shift
	for ((k = 0; k < n; k++)); do
		"$@" || rc=1
	done
	return $rc
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, $($GO env GOVERSION)"
echo "started: $(date -u '+%Y-%m-%d %H:%M UTC')"

memory() { "$GO" test -run 'TestMemoryPerTeam' -v -count=1 ./internal/limit/ | grep -E 'bytes|ok|FAIL|SKIP|_test\.go:[0-9]+: '; }
part memory-per-team memory
# BenchmarkRouteTurns (no rules file, one rule, three rules in turns on one goroutine: the
# one routing path's goals) runs on its own after the others, a fixed twenty rounds a run,
# five runs each in a process of its own as the check beside the map is (a process gets a
# fast or a slow machine); the report takes the medians of the five.
ROUTE_TURNS='^BenchmarkRouteTurns$'
limit_sync_route() {
	local rc=0
	"$GO" test -p 1 -v -run '^$' -bench . -skip "$SYNC_ONCE|$ROUTE_TURNS" -benchmem -benchtime "$BENCHTIME" -count=1 -timeout 20m ./internal/limit/ ./internal/tick/ ./internal/route/ || rc=1
	"$GO" test -c -o bench/route.test ./internal/route/ || return 1
	(cd internal/route && repeat 5 ../../bench/route.test -test.v -test.run '^$' -test.bench "$ROUTE_TURNS" -test.benchtime 20x -test.timeout 10m) || rc=1
	return $rc
}
part limit-sync-route limit_sync_route
# The simulations whose figures are counts and Redis's own CPU time, never a duration
# (fake clocks): each in a process of its own, all at once, their output kept in order.
# One after another they took 20 minutes on a 2-core VM, most of it five 2-to-4-minute
# fleet runs that each keep one core busy.
concurrent_sync() {
	"$GO" test -c -o bench/tick.test ./internal/tick/ || return
	local benches=(
		'^BenchmarkAdaptiveCost$' # its three variants in lockstep, in one process
		'^BenchmarkAdaptiveFleetCost$/^static$' '^BenchmarkAdaptiveFleetCost$/^learned$'
		'^Benchmark(Fidelity|CatchUp|DivertSwitches)$'
	)
	local dir pids=() rc=0 i
	dir=$(mktemp -d)
	for i in "${!benches[@]}"; do
		(cd internal/tick && ../../bench/tick.test -test.v -test.run '^$' -test.bench "${benches[$i]}" -test.benchtime 1x -test.timeout 40m) >"$dir/$i.txt" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || rc=1
		cat "$dir/$i.txt"
	done
	rm -rf "$dir"
	return $rc
}
part sync-concurrent concurrent_sync
# Those that time something (ticks at a fleet's and at a million teams' scale): alone.
part sync-timed "$GO" test -v -run '^$' -bench '^Benchmark(FleetRedis|MillionTeams)$' -benchtime 1x -count=1 -timeout 40m ./internal/tick/
# BenchmarkRotation five times (the report takes the means): one run's CPU ratio ranged
# from 1.27 to 1.34 on the same machine and code, its two gates' lockstep notwithstanding
# (the garbage collector's work lands in whichever gate's second it runs in).
part rotation "$GO" test -v -run '^$' -bench '^BenchmarkRotation$' -benchtime 1x -count=5 -timeout 30m ./internal/tick/
part fleet-processes "$GO" test -v -run '^$' -bench '^BenchmarkFleetProcessWindow$' -benchtime 1x -count=1 -timeout 10m ./internal/faulttest/
part spike-trace "$GO" test -v -run '^$' -bench '^BenchmarkSpikeTrace$' -benchtime 1x -count=1 -timeout 10m ./internal/spike/ -args -spike-chart="$PWD/bench/spike.svg"

# The check beside the bare maps fifteen more times, interleaved, each in a process of its
# own (the report takes medians). On the 2-core VMs the sessions run on, a process gets a
# fast or a slow machine for its runs (the check 36 to 74 ns, the map 25 to 59, their
# ratio 0.60 to 2.23 in 43 processes of the same code), and medians of six made check ÷
# map 0.86 to 2.02 in four make bench runs; of eleven, 1.50 once where the 43 give 1.42;
# of sixteen, 1.62 once. So each process also measures them in turns
# (BenchmarkCheckBesideMap), which share the machine's state: its ratio is the goal's.
hotpath_once() {
	bench/limit.test -test.v -test.run '^$' -test.bench '^BenchmarkCheck$/^zipf100k$/^parallel$/^(baremap|baremap-copied|divert-batchclock)$' -test.benchtime "$BENCHTIME" -test.benchmem &&
		bench/limit.test -test.v -test.run '^$' -test.bench '^BenchmarkCheckBesideMap$' -test.benchtime 1x
}
hotpath() {
	"$GO" test -c -o bench/limit.test ./internal/limit/ || return
	repeat 15 hotpath_once
}
part hotpath-interleaved hotpath

# The whole gate beside a bare pass-through: six runs of a million records on kfake (in a
# process of its own; the client bound to one CPU, the broker to another), three with the
# two sharing every core, three of 300,000 on Apache Kafka, four on three Apache Kafka
# brokers (single runs there range from 0.58 to 1.12 in exactly-once ÷ at-least-once: two
# runs were too few to tell), then the real broker's latency.
# The gate's CPU goal is against the pass-through lending franz-go the gate's pools; the
# gate runs with its tick on a real redis-server (bound with the broker), whose CPU is
# reported apart.
consume_bin() { "$GO" test -c -o bench/consume.test ./internal/consume/; }
part consume-build consume_bin
part end-to-end repeat 6 bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkEndToEnd$' -test.benchtime 1000000x
part end-to-end-shared-cores repeat 3 bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkEndToEndSharedCores$' -test.benchtime 1000000x
part end-to-end-same-clock repeat 3 bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkEndToEndSameClock$' -test.benchtime 300000x
part rotation-gate repeat 3 bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkRotationGate$' -test.benchtime 1000000x
# Outcomes six times of 4,000,000 records, for the exactly-once figures and, at least
# once, the pairs beside the turns below (runs of 2,000,000 lasted a second each, and
# their on ÷ off ratios ranged from 0.91 to 1.01 on one machine), each gate with outcomes
# run after the same gate without in three, before it in the other three: a pair's
# second run is slower for being second (BenchmarkOutcomes).
outcomes() {
	local rc=0 k
	for ((k = 0; k < 6; k++)); do
		bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkOutcomes$' -test.benchtime 4000000x -outcomes-first=$((k % 2)) || rc=1
	done
	return $rc
}
part outcomes outcomes
# outcomes_vs_off_ratio: the gates without and with outcomes in turns of a second, twelve
# rounds a process, twice; then the same with the gate without outcomes in both turns,
# what the method gives two equal gates (BenchmarkOutcomesTurns).
part outcomes-turns repeat 2 bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkOutcomesTurns$' -test.benchtime 12x
part outcomes-turns-same-gate bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkOutcomesTurnsSameGate$' -test.benchtime 12x
part real-kafka repeat 3 bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkRealKafka$' -test.benchtime 300000x
part real-kafka-replicated repeat 4 bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkRealKafkaReplicated$' -test.benchtime 300000x
# gate replay against a bare consume of the same 1,000,000 records, in turns, on kfake and
# on Apache Kafka (issue Replay's goal); then its routing alone on one worker and on one a
# processor.
part replay "$GO" test -v -run '^$' -bench '^(BenchmarkReplay|BenchmarkEngineWorkers)$' -benchtime 1x -count=3 -timeout 30m ./internal/replay/
part real-kafka-latency bench/consume.test -test.v -test.run '^$' -test.bench '^BenchmarkRealKafkaLatency$' -test.benchtime 1x

echo "=== bench parts (seconds)"
printf '%s\n' "${parts[@]}"
echo "total: $(($(date +%s) - start_all)) s"
if ((${#failed[@]} > 0)); then
	echo "bench parts failed: ${failed[*]} (the report below has what the others measured)" >&2
	exit 1
fi
