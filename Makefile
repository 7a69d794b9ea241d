# syncd: run `make help` for the targets.
GO ?= go
BIN := bin/syncd
PKGS := ./...

.PHONY: help build test lint demo clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/syncd
	$(GO) build -o $(BIN) ./cmd/syncd

test: ## run the test suite against a real PostgreSQL (SYNCD_TEST_DATABASE_URL, default 127.0.0.1:5432)
	$(GO) test -count=1 -timeout 15m $(PKGS)

lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting"; exit 1)
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

demo: build ## create a demo source on the local PostgreSQL, sync it, print status
	./scripts/demo.sh

clean: ## remove build output
	rm -rf bin
