#!/usr/bin/env bash
# The whole test suite, as README.md tells: installs and starts what the tests
# need (PostgreSQL from Debian packages, on loopback), then runs the linters
# and every test on both backends, with the race detector (but for
# internal/aggregate's arithmetic, below).
set -euo pipefail
cd "$(dirname "$0")/.."

export CI=${CI:-}

# The docs test runs the curl examples of docs/api.md with bash, curl and jq;
# the events tests run docket serve against the Debian nats-server binary;
# the dashboard's browser tests drive Debian's headless chromium.
missing=""
for tool in curl jq nats-server chromium; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing$missing from Debian packages"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "missing$missing: the docs, events and browser tests will fail under CI" >&2
  fi
fi
# The database stays up for the next run; say how to stop it, whatever the
# outcome.
trap 'echo "PostgreSQL for tests is still running; stop it with: scripts/testdb.sh stop"' EXIT
eval "$(scripts/testdb.sh start | grep '^DOCKET_TEST_DATABASE_URL=' | sed 's/^/export /')"
echo "PostgreSQL for tests: $DOCKET_TEST_DATABASE_URL"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "not gofmt'ed:"; echo "$unformatted"; exit 1; fi

echo "== go vet"
go vet ./...

echo "== staticcheck"
if ! command -v staticcheck >/dev/null 2>&1; then
  GOBIN="$(go env GOPATH)/bin" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
  export PATH="$(go env GOPATH)/bin:$PATH"
fi
staticcheck ./...

echo "== go test -race"
# Every package under the race detector but internal/aggregate: its tests
# are arithmetic on one goroutine (the accuracy on the shared datasets and
# synthetic crowds, every method), where the detector finds nothing and
# makes them four times slower (108 s against 27, one run after the other
# on a 2-core machine). They run without it; its one test of concurrent
# use, TestPosteriorConcurrent, runs with it.
#
# -race also turns on checkptr (-d=checkptr) in every package it builds. In
# modernc.org's SQLite, C translated to Go with unsafe pointer arithmetic
# in every function, those checks were about half the CPU of the SQLite
# tests (TestRunRace 27 s against 13, TestQCExperiment 193 s against 124),
# checking code that is not docket's. They are off there only: docket's
# packages and every other module keep them, and the race detector stays
# on in all.
nocheckptr='-gcflags=modernc.org/...=-d=checkptr=0'
race_packages=$(go list ./... | grep -v '/internal/aggregate$')
go test -race -count=1 -timeout 20m "$nocheckptr" "$@" $race_packages
echo "== go test internal/aggregate"
go test -count=1 -timeout 20m -skip '^TestPosteriorConcurrent$' "$@" ./internal/aggregate
go test -race -count=1 -timeout 20m "$nocheckptr" -run '^TestPosteriorConcurrent$' "$@" ./internal/aggregate
