# codexec developer commands. `make help` lists them.
GO      ?= go
BIN     := bin
PKGS    := ./...
TESTFLAGS ?= -race -count=1 -timeout 30m

.PHONY: help build run test test/short vet bench bench/go deps clean

help: ## Show this help.
	@grep -E '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-12s %s\n", $$1, $$2}'

build: ## Build bin/codexec.
	$(GO) build -o $(BIN)/codexec ./cmd/codexec

run: ## Run codexec on its embedded defaults (MCP on stdio).
	$(GO) run ./cmd/codexec dev

deps: ## Install what the tests need (redis-server, bubblewrap, python3-venv, uv, bin/nats-server).
	./.ci/install-deps

test: deps vet ## Install what the tests need, then run every test under -race.
	PATH="$(CURDIR)/$(BIN):$$PATH" $(GO) test $(TESTFLAGS) $(PKGS)

test/short: ## Run the fast tests only (no race detector).
	$(GO) test -short -count=1 $(PKGS)

vet: ## go vet and gofmt.
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

bench: build ## Measure execute_code end to end through MCP clients (codexec bench; BENCHFLAGS=...).
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/codexec bench $(BENCHFLAGS)

bench/go: ## Run the Go benchmarks.
	$(GO) test -run '^$$' -bench . -benchtime 2s $(PKGS)

clean: ## Remove build outputs.
	rm -rf $(BIN)
