# capture gate. `make test` works on a fresh machine: it installs redis-server and the rest (Debian)
# when missing; tests start their own servers on free ports.

# Every recipe line runs in bash with -e -u and pipefail: a failing step anywhere in a
# pipe (go test ... | tee) fails the target.
SHELL       := bash
.SHELLFLAGS := -eu -o pipefail -c

GO        ?= go
BIN       ?= bin/gate
DEV_BIN   ?= bin/gate-dev
PKGS      ?= ./...
BENCHTIME ?= 1s
# staticcheck, fetched and run through the Go toolchain (go run pkg@version), pinned to a
# release that knows this module's Go version (go.mod); bump it with Go.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Every go command builds with -trimpath: compiled packages then name no directory, so a
# clone in another directory (CI's clean clone) reuses the build cache rather than
# compiling every test binary again (make test's -race builds on a 2-core AMD EPYC VM, a
# warm cache: 18 s in a new directory, against 96 s without -trimpath).
export GOFLAGS := -trimpath $(GOFLAGS)

# The version stamped into the binary (internal/buildinfo; `gate version`, the start-up
# line, gate_build_info) and the image's tag; `make -s version` prints it.
#   - Where a release tag (vX.Y.Z) is behind HEAD: git describe's, without the v: 0.3.0 at
#     the tag, 0.3.0-5-gabc1234 five commits past it, -dirty added with uncommitted changes.
#   - Else (a clone without tags, as CI's checkout is, a tarball): the CHANGELOG's newest
#     release (its first "## [x.y.z]" heading), a fact of the tree. Exactly 0.3.0 when the
#     tree is that release's: its Unreleased section empty, as make release leaves it, and
#     nothing uncommitted. Otherwise 0.3.0-dev.g<commit, 12 hex digits>, .dirty added with
#     uncommitted changes (0.3.0-dev without git): a development build past 0.3.0 at that
#     commit. Like git describe's form it is a SemVer pre-release, so it sorts before 0.3.0,
#     not after; it has no '+', so it is a valid image tag.
#   - dev when neither says (no tag, no CHANGELOG release).
# TAG_VERSION= (empty) forces the second rule; deploy/helm TestVersionsMoveTogether holds
# it to the CHANGELOG and the chart.
TAG_VERSION       ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//')
CHANGELOG_VERSION := $(shell awk '/^\#\# \[[0-9]+\.[0-9]+\.[0-9]+\]/ { sub(/^\#\# \[/, ""); sub(/\].*/, ""); print; exit }' CHANGELOG.md 2>/dev/null)
# Non-empty when the CHANGELOG's Unreleased section has an entry (the tree is past the release).
UNRELEASED        := $(shell awk '/^\#\# \[Unreleased\]/ { u = 1; next } /^\#\# \[/ { exit } u && NF { print "yes"; exit }' CHANGELOG.md 2>/dev/null)
TREE_COMMIT       := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
TREE_DIRTY        := $(shell git rev-parse --git-dir >/dev/null 2>&1 && { git diff --quiet HEAD -- || echo .dirty; })
TREE_VERSION      := $(if $(CHANGELOG_VERSION),$(CHANGELOG_VERSION)$(if $(UNRELEASED)$(TREE_DIRTY),-dev$(if $(TREE_COMMIT),.g$(TREE_COMMIT))$(TREE_DIRTY)))
VERSION ?= $(or $(TAG_VERSION),$(TREE_VERSION),dev)
# The checked-out commit.
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/capturegate/gate/internal/buildinfo.Version=$(VERSION) \
	-X github.com/capturegate/gate/internal/buildinfo.Commit=$(COMMIT)
# The image: one docker buildx call for both architectures, cross-compiled in the build
# stage (no emulation). IMAGE_OUTPUT=--push pushes it (release.yml); the default keeps it
# in the build cache, as a multi-arch image cannot be loaded into a local docker.
IMAGE          ?= ghcr.io/capturegate/gate
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_OUTPUT   ?=

.PHONY: all version build build-dev run check test test-norace test-compose test-chart test-short test-integration image release release-notes bench deps-test vet fmt tidy clean

all: build

# The version make build stamps (VERSION above).
version:
	@echo '$(VERSION)'

# The production binary: no demo code in it (cmd/gate TestProductionBinaryLinksNoDemoCode).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/gate

# The multi-arch image (Dockerfile), tagged with VERSION; needs docker buildx and a
# running engine.
image:
	docker buildx build --platform $(IMAGE_PLATFORMS) \
		--build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) \
		-t $(IMAGE):$(VERSION) $(IMAGE_OUTPUT) .

# The demo stack, a binary of its own (cmd/gate-dev).
build-dev:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(DEV_BIN) ./cmd/gate-dev

# Runs gate-dev: an in-process Kafka broker on 127.0.0.1:19092, a Redis, two gates in one
# group, a load generator and a live view, until Ctrl-C (flags: bin/gate-dev -h).
run: build-dev
	./$(DEV_BIN)

# Everything the suite needs beyond Go and Java, installed if missing (Debian packages):
# redis-server, kcat (librdkafka's client, for the real-Kafka suite's compressed input),
# Maven (which fetches Apache Kafka's jars, internal/kafkatest, on first use) and
# Chromium (headless, renders gate replay's report page in its test).
DEPS_TEST_PKGS := redis-server:redis-server kcat:kcat mvn:maven chromium:chromium
deps-test:
	@missing=""; for p in $(DEPS_TEST_PKGS); do \
		command -v "$${p%%:*}" >/dev/null 2>&1 || missing="$$missing $${p#*:}"; done; \
	if [ -n "$$missing" ] && ! command -v apt-get >/dev/null 2>&1; then \
		echo "make test needs$$missing (Debian package names) and this machine has no apt-get: install them, or run go test ./... , which skips the tests that need them" >&2; exit 1; \
	fi; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing (Debian packages)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@for p in $(DEPS_TEST_PKGS); do command -v "$${p%%:*}" >/dev/null 2>&1 || { echo "$${p%%:*} is still missing"; exit 1; }; done

# Static checks, run first by make test: gofmt (no file may need formatting), go vet and staticcheck
# with its default checks (a check turned off would go in a staticcheck.conf, with why).
check:
	@unformatted=$$(git ls-files --cached --others --exclude-standard '*.go' | \
		while read -r f; do if [ -e "$$f" ]; then echo "$$f"; fi; done | xargs -r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# Each package's -race run has 12 minutes: the timeout is there to catch a hang, not to time
# anything. On a 2-core Intel Xeon VM at 2.1 GHz, quiet, in .ci/run (2026-12-01),
# internal/integration took 168 s, consume 131, tick 108, limit 101, replay 72; under
# load from other work, 269, 141, 150, 190, 173.
#
# SLOW_PKGS go first: go test runs the packages in the order given, GOMAXPROCS of them at
# a time, and ./... alone is alphabetical, which started internal/integration (the
# longest, mostly waiting on its JVM brokers) after two thirds of the others and tick
# last but three: the run then ended minutes after the rest, on one package. On a
# 2-core AMD EPYC VM, warm build cache, the -race run took 10 min 14 s in the
# alphabetical order and 8 min 46 s in this one (2026-12-01). A package listed twice
# runs once; a name here that is no package fails the run.
SLOW_PKGS := ./internal/integration/ ./internal/consume/ ./internal/tick/ ./internal/replay/ \
	./internal/gate/ ./cmd/gate/ ./internal/faulttest/ ./internal/limit/
test: deps-test check
	$(GO) test -race -count=1 -timeout 12m $(if $(filter ./...,$(PKGS)),$(SLOW_PKGS)) $(PKGS)
	$(MAKE) --no-print-directory -j3 --output-sync=target test-norace test-compose test-chart

# The three checks after the -race run go side by side (-j3; each target's output printed
# whole as it ends): each keeps about one core busy for half a minute (test-norace builds
# and runs its tests package by package, test-chart's tests are serial), which one after
# the other took 64 s of .ci/run's 554 s on a 2-core AMD EPYC VM (2026-12-07).
test-compose:
	cd deploy/compose && $(GO) vet ./... && $(GO) test -count=1 ./...

# The tests that skip under the race detector, run again without it; part of make test,
# whose -race run checks none of them. They are the zero-allocation checks (route's
# TestRouteAllocs, TestRulesAllocateNothing): the race detector allocates. Each is found
# in the test files, as a Test function whose body reads raceEnabled, and must be
# reported passed: a -run filter that matches nothing, or a test that skips, fails the
# target, as does finding no such test at all (the pattern would be stale).
test-norace:
	@found=$$(git ls-files --cached --others --exclude-standard '*_test.go' ':!deploy/' | \
		while read -r f; do if [ -e "$$f" ]; then echo "$$f"; fi; done | \
		xargs -r awk 'FNR == 1 || /^}/ { name = "" } \
			/^func Test[A-Za-z0-9_]*\(/ { name = $$2; sub(/\(.*/, "", name) } \
			/raceEnabled/ && name != "" { d = FILENAME; if (!sub(/\/[^\/]*$$/, "", d)) d = "."; print "./" d, name }' | sort -u); \
	if [ -z "$$found" ]; then echo "test-norace: no Test function reads raceEnabled: nothing to run (fix the pattern, or drop the target)" >&2; exit 1; fi; \
	for pkg in $$(cut -d' ' -f1 <<<"$$found" | sort -u); do \
		names=$$(awk -v p="$$pkg" '$$1 == p { print $$2 }' <<<"$$found"); \
		out=$$($(GO) test -count=1 -timeout 5m -v -run "^($$(paste -sd'|' <<<"$$names"))$$" "$$pkg" 2>&1) || { echo "$$out"; exit 1; }; \
		for n in $$names; do \
			grep -q "^--- PASS: $$n " <<<"$$out" || { echo "$$out"; echo "test-norace: $$pkg $$n did not pass without -race (it did not run, or skipped)" >&2; exit 1; }; \
		done; \
		echo "ok without -race: $$pkg" $$names; \
	done

# The Helm chart's offline render tests (deploy/helm, its own Go module); part of make test.
test-chart:
	cd deploy/helm && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

# Cuts release VERSION (x.y.z) from a clean tree: the CHANGELOG's Unreleased section
# becomes its, the chart's version and appVersion move to it, and the list of variables
# that release's gate knows is written for the chart test (tools/release;
# deploy/helm TestVersionsMoveTogether); then a commit and the tag vVERSION, whose push runs
# release.yml (the image, the chart and the draft release, all of that version).
release:
	@test -z "$$(git status --porcelain)" || { echo "release: the working tree is not clean; commit first" >&2; exit 1; }
	$(GO) run ./tools/release -version '$(VERSION)'
	git add CHANGELOG.md deploy/helm/capture-gate/Chart.yaml deploy/helm/testdata/appversion-env.txt
	git commit -q -m 'release $(VERSION)'
	git tag -a 'v$(VERSION)' -m 'capture gate $(VERSION)'
	@echo "released $(VERSION): push main and the tag (git push origin main v$(VERSION))"

# The release notes of VERSION: its section of CHANGELOG.md, without the heading
# (release.yml drafts the GitHub release with them). Fails when there is none.
release-notes:
	@awk -v v='$(VERSION)' '/^## \[/ { if (found) exit; found = index($$0, "## [" v "]") == 1; next } found' CHANGELOG.md > release-notes.tmp
	@if [ ! -s release-notes.tmp ]; then rm -f release-notes.tmp; echo "CHANGELOG.md has no section for $(VERSION)" >&2; exit 1; fi
	@cat release-notes.tmp; rm -f release-notes.tmp

# The real-Kafka suite alone, verbose (it is part of make test): the built gate binary
# against Apache Kafka (its own jars on the JVM, or the apache/kafka image through
# testcontainers where a container runtime answers; GATETEST_IT_BROKER=jvm|container picks)
# and a real Redis.
test-integration: deps-test
	$(GO) test -count=1 -timeout 30m -v ./internal/integration/

test-short: deps-test
	$(GO) test -short -count=1 $(PKGS)

# The long fault scenarios (Redis stopped 30 s and hung 10 s, three SIGKILLs, three
# scale rounds, a minute of steady traffic, more broker faults; internal/faulttest with
# GATETEST_SOAK=1), then make fuzz.
FUZZTIME ?= 60s
.PHONY: soak fuzz
soak: deps-test
	GATETEST_SOAK=1 $(GO) test -race -count=1 -timeout 30m -v ./internal/faulttest/
	$(MAKE) --no-print-directory fuzz

# Every fuzz target of the module for FUZZTIME each, one after another (go test fuzzes one
# target per run). The targets are found, not listed: each `func FuzzName(` at the start
# of a line of a test file (deploy/'s modules aside), so a new one is fuzzed without an
# edit here; finding none fails the target (the pattern would be stale), as does any run.
fuzz:
	@found=$$(git ls-files --cached --others --exclude-standard '*_test.go' ':!deploy/' | \
		while read -r f; do if [ -e "$$f" ]; then echo "$$f"; fi; done | \
		xargs -r awk '/^func Fuzz[A-Za-z0-9_]*\(/ { name = $$2; sub(/\(.*/, "", name); \
			d = FILENAME; if (!sub(/\/[^\/]*$$/, "", d)) d = "."; print "./" d ":" name }' | sort -u); \
	if [ -z "$$found" ]; then echo "fuzz: no func Fuzz... found in the test files: nothing to run (fix the pattern)" >&2; exit 1; fi; \
	for t in $$found; do \
		echo "fuzz: $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

# Benchmarks: the per-record check beside a bare sharded-map lookup, the tick against a
# real Redis, the synchronous sliding-log Lua limiter (BenchmarkSyncLua), memory per cached
# team, routing, the fleet fidelity simulation (BenchmarkFidelity, -benchtime 1x: ours beside
# the reference cadence, local-only instances and the Lua limiter), what a fleet of 1 to 64
# gates costs one redis-server (BenchmarkFleetRedis, -benchtime 1x), a million teams in one
# gate (BenchmarkMillionTeams, 1x), how often a diverted team switches topics with and
# without holds (BenchmarkDivertSwitches, 1x), spike protection's learner on a week of
# 10k teams beside the best static threshold (BenchmarkSpikeTrace, 1x, about 40 s; it draws
# bench/spike.svg), four gate processes enforcing one cap
# (BenchmarkFleetProcessWindow, 1x, about a minute), the check beside a bare map fifteen more
# times, interleaved, each in a process of its own (the report takes the medians of the sixteen), and the whole gate beside a bare franz-go pass-through through the
# kfake broker, run in a process of its own so the bench process's CPU is the client's (six runs of the test binary of a million records each, the pooled pass-through, the gate, the plain pass-through, then the gate
# with exactly-once delivery, so a drifting machine affects all alike), the same three on Apache Kafka itself (BenchmarkRealKafka,
# three runs of 300,000 records on one JVM broker) and the real broker's produced-to-readable latency at 2,000 records/s
# in each delivery mode (BenchmarkRealKafkaLatency). Compare figures within one run: these machines are noisy. All output
# goes to bench/raw.txt; bench/report turns it into bench/results.json and bench/RESULTS.md.
# bench/run.sh runs the parts one after another, one package at a time, says how long
# each took, and goes on past a failed part; the report is made from whatever was
# measured. The target then fails if a part did, or if the report finds the run does not
# stand (it names each problem: a goal missed, a figure with a goal not measured, a
# benchmark skipped, a figure from a fallback). bench/raw.txt.gz, the raw output gzipped
# (-n: the same bytes for the same output), is meant to be committed with results.json and
# RESULTS.md: `zcat bench/raw.txt.gz | go run ./bench/report` re-derives results.json, and
# bench/report's TestResultsFromCommittedRaw checks it does. About 20 minutes on a 2-core
# machine.
bench: deps-test
	@mkdir -p bench
	status=0; GO=$(GO) BENCHTIME=$(BENCHTIME) bash bench/run.sh 2>&1 | tee bench/raw.txt || status=$$?; \
	gzip -n -9 -c bench/raw.txt > bench/raw.txt.gz; \
	report=0; $(GO) run ./bench/report < bench/raw.txt || report=$$?; \
	if [ $$status -ne 0 ]; then echo "a benchmark part failed: see bench/raw.txt" >&2; fi; \
	if [ $$report -ne 0 ]; then echo "bench/report found the run does not pass (above); bench/RESULTS.md lists why" >&2; fi; \
	if [ $$status -ne 0 ] || [ $$report -ne 0 ]; then exit 1; fi

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

tidy:
	$(GO) mod tidy
	cd deploy/compose && $(GO) mod tidy
	cd deploy/helm && $(GO) mod tidy

clean:
	rm -rf bin
