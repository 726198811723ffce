# capture gate. `make test` works on a fresh machine: it installs redis-server (Debian)
# when missing; tests start their own servers on free ports.
GO        ?= go
BIN       ?= bin/gate
PKGS      ?= ./...
BENCHTIME ?= 1s

.PHONY: all build run test test-short bench deps-test vet fmt tidy clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/gate

# Runs gate dev: an in-process Kafka broker on 127.0.0.1:19092, a Redis, two gates in one
# group, a load generator and a live view, until Ctrl-C (flags: bin/gate dev -h).
run: build
	./$(BIN) dev

# Everything the suite needs beyond Go, installed if missing.
deps-test:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "installing redis-server (Debian package)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@command -v redis-server >/dev/null 2>&1 || { echo "redis-server is still missing"; exit 1; }

test: deps-test
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 8m $(PKGS)
	cd deploy/compose && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd deploy/helm && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

test-short: deps-test
	$(GO) test -short -count=1 $(PKGS)

# The long fault scenarios (Redis stopped 30 s and hung 10 s, three SIGKILLs, three
# scale rounds, a minute of steady traffic, more broker faults; internal/faulttest with
# GATE_SOAK=1), then each route fuzz target for FUZZTIME.
FUZZTIME ?= 60s
.PHONY: soak
soak: deps-test
	GATE_SOAK=1 $(GO) test -race -count=1 -timeout 30m -v ./internal/faulttest/
	$(GO) test -run '^$$' -fuzz '^FuzzTeam$$' -fuzztime $(FUZZTIME) ./internal/route/
	$(GO) test -run '^$$' -fuzz '^FuzzRoute$$' -fuzztime $(FUZZTIME) ./internal/route/

# Benchmarks: the per-record check beside a bare sharded-map lookup, the tick against a
# real Redis, memory per cached team, routing, and the whole gate beside a bare franz-go
# pass-through through the in-process broker. Compare figures within one run: these machines are noisy.
bench: deps-test
	$(GO) test -run 'TestMemoryPerTeam' -v -count=1 ./internal/limit/ | grep -E 'bytes|ok|FAIL'
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count=1 ./internal/limit/ ./internal/sync/ ./internal/route/
	$(GO) test -run '^$$' -bench BenchmarkEndToEnd -benchtime 200000x -count=3 ./internal/consume/

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
