.DEFAULT_GOAL := help
.PHONY: help build test race lint testdb demo chaos bench-compare

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## Build the docket binary into ./bin
	go build -o bin/docket ./cmd/docket

test: ## The whole suite: start PostgreSQL, lint, every test on both backends with -race (see scripts/test.sh)
	./scripts/test.sh

race: testdb ## go test -race on the packages with concurrency
	DOCKET_TEST_DATABASE_URL=$$(scripts/testdb.sh url) go test -race -count=1 -gcflags='modernc.org/...=-d=checkptr=0' . ./internal/engine ./internal/store/...

lint: ## gofmt, go vet, staticcheck
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet ./...
	staticcheck ./...

testdb: ## Start the throwaway PostgreSQL for tests (installs it if missing)
	scripts/testdb.sh start

chaos: ## Chaos run: jobs, workflow runs and human work (simulated contributors) under kills, pauses, database and bus restarts, then the invariant check (SEED=…, DURATION=10m, BACKEND=postgres|sqlite)
	go run ./bench/chaos -seed $${SEED:-1} -duration $${DURATION:-10m} -jobs $${JOBS:-4000} -runs $${RUNS:-1000} -backend $${BACKEND:-postgres}

demo: ## Run the demo on the embedded SQLite default
	go run ./cmd/docket demo

bench-compare: ## docket vs River (or BASELINE=old/docket), alternating, medians (REPS=5, MODES="burn continuous")
	DOCKET_TESTDB_DURABLE=1 DOCKET_TESTDB_DIR=/tmp/docket-benchdb DOCKET_TESTDB_PORT=54330 scripts/testdb.sh start >/dev/null
	REPS=$${REPS:-5} MODES="$${MODES:-burn continuous}" BACKENDS="$${BACKENDS:-postgres}" OUT=$${OUT:-bench/results} CHARTS=$${CHARTS:-bench/results} bench/run.sh
