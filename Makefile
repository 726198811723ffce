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

# Runs the gate with its GATE_* settings (default Redis: redis://127.0.0.1:6379/0).
run: build
	./$(BIN)

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

test-short: deps-test
	$(GO) test -short -count=1 $(PKGS)

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

clean:
	rm -rf bin
