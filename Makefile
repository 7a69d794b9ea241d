# syncd: run `make help` for the targets.
GO ?= go
BIN := bin/syncd
PKGS := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE ?= syncd:$(VERSION)
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: help build test test-race test-race-all lint demo clean docker install bench-bound mutations bench-reconcile fuzz soak reliability bench bench-quick bench-micro

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/syncd
	$(GO) build -ldflags "-X github.com/syncd/syncd/cli.Version=$(VERSION)" -o $(BIN) ./cmd/syncd

test: ## run the test suite against a real PostgreSQL (SYNCD_TEST_DATABASE_URL, default 127.0.0.1:5432)
	$(GO) test -count=1 -timeout 40m $(PKGS)

RACE_PKGS := ./syncer/ ./daemon/ ./sink/ ./source/ ./catalog/ ./watermark/ ./runlock/ ./metrics/ ./internal/pgutil/ ./internal/pgpool/ ./cli/ ./ops/

test-race: ## the race detector over the concurrent packages (pipelined pages, first-load workers, the scheduler, the admin server, the session pool), the binary they drive built with -race too
	SYNCD_TEST_RACE=1 $(GO) test -race -count=1 -timeout 30m $(RACE_PKGS)

test-race-all: ## the race detector over the whole tree (slow: about 3x make test)
	SYNCD_TEST_RACE=1 $(GO) test -race -count=1 -timeout 60m $(PKGS)

bench-bound: ## measure the lag a 60 s read-only transaction causes under each source.bound (about 4 minutes)
	SYNCD_BENCH_BOUND=1 $(GO) test -count=1 -timeout 15m -run TestMeasureBoundCost -v ./syncer/

bench-reconcile: ## reconcile two 1,000,000-row tables with 10 differences, beside a naive full compare (SYNCD_BENCH_ROWS overrides)
	$(GO) test -count=1 -timeout 30m -run '^$$' -bench Reconcile -benchtime 1x ./reconcile/

lint: ## gofmt, go vet, staticcheck and go mod tidy (go.mod and go.sum must be tidy)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1)
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)
	@$(GO) mod tidy -diff || (echo "go mod tidy: go.mod or go.sum is not tidy (diff above); run go mod tidy and commit the result"; exit 1)

demo: build ## create a demo source on the local PostgreSQL, sync it, print status
	./scripts/demo.sh

docker: ## build the container image syncd:VERSION (override with IMAGE=...; needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

install: build ## install syncd to PREFIX/bin (/usr/local) and its systemd unit; then systemctl daemon-reload
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/syncd
	install -d -m 0755 $(DESTDIR)/etc/systemd/system
	sed 's|/usr/local/bin/syncd|$(PREFIX)/bin/syncd|' deploy/systemd/syncd.service > $(DESTDIR)/etc/systemd/system/syncd.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/syncd.service
	install -d -m 0755 $(DESTDIR)/etc/syncd
	test -e $(DESTDIR)/etc/syncd/syncd.env || install -m 0600 deploy/systemd/syncd.env.example $(DESTDIR)/etc/syncd/syncd.env

bench: build ## benchmark syncd against the limit on the local PostgreSQL, full sizes (1M/5M/10M rows, 5 min of sustained change; 25-35 min on a quiet machine, ~12 GB of disk)
	$(GO) run ./bench/cmd/syncd-bench -syncd $(BIN) -scale $${BENCH_SCALE:-1} -plot $${BENCH_PLOT:-docs/bench-pages.png}

bench-quick: build ## the same benchmark at 2% of the sizes: a smoke test of about a minute
	$(GO) run ./bench/cmd/syncd-bench -syncd $(BIN) -scale 0.02 -plot bin/bench-pages.png

bench-micro: ## go test micro-benchmarks (COPY encoding, page apply by fast path and upsert)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/pgutil ./sink

.PHONY: docs
docs: ## regenerate docs/CLI.md, docs/CONFIG.md and docs/syncd.schema.json from the code (tests fail when they differ)
	$(GO) run ./internal/gendocs

clean: ## remove build output
	rm -rf bin

mutations: ## break each coupon safeguard in a patched copy of the tree and show which tests catch it (minutes per mutation)
	./scripts/mutations.sh

FUZZTIME ?= 10s
FUZZ_TARGETS := ./config:FuzzParse ./config:FuzzParseTable ./watermark:FuzzDecode \
	./watermark:FuzzCursorRoundTrip ./cli:FuzzParsePGTime ./internal/pgutil:FuzzAppendCopyText

fuzz: ## run every fuzz target for FUZZTIME (default 10s) each
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$pkg $$fn"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

reliability: ## the crash, fault, bad-input and security suite (tests/reliability)
	$(GO) test -count=1 -timeout 10m -v ./tests/reliability/

soak: ## long variants of the reliability suite: more kills, larger tables (SYNCD_SOAK=1)
	SYNCD_SOAK=1 $(GO) test -count=1 -timeout 60m -v ./tests/reliability/
