#!/usr/bin/env bash
# Runs docket and River back to back on fresh databases and prints a table
# of medians (docs/benchmarks.md shows one). Every run counts completions as
# committed: from each library's after-commit reports, checked against the
# database at the end (internal/bench).
#
#   bench/run.sh                    everything (about 25 minutes with REPS=3)
#   MODES="burn" BACKENDS=postgres REPS=1 bench/run.sh
#
# Environment:
#   DOCKET_BENCH_PG  base URL of a DURABLE PostgreSQL server, without the
#                    database name (default postgres://postgres@127.0.0.1:54330,
#                    the cluster of: DOCKET_TESTDB_DURABLE=1
#                    DOCKET_TESTDB_DIR=/tmp/docket-benchdb DOCKET_TESTDB_PORT=54330
#                    scripts/testdb.sh start). Never the test cluster: fsync is off there.
#   BACKENDS         "postgres sqlite"      MODES  "burn continuous latency"
#   REPS             runs of each (default 3; the table shows medians)
#   JOBS             burn: jobs (default 200000; SQLITE_JOBS default 50000)
#   DURATION         continuous and latency: duration (default 30s)
#   RATE             latency: inserts per second (default 500)
#   WORKERS          handler slots of both (default 5000)
#   INSERT_CONCURRENCY  bulk-insert clients in burn mode (default 1)
#   NICE             niceness of the benchmark processes, e.g. -10 on a
#                    shared machine (needs root; default 0)
#   BASELINE         path of another docket binary (e.g. built from an older
#                    commit): it runs in River's place, so the table compares
#                    this checkout against that build, alternating
#   RIVER            with BASELINE, 1 runs River too: three systems
#                    alternating, so both ratios come from one invocation
#   OUT              result directory (default bench/results)
#   CHARTS           directory for the SVG charts (default docs)
set -euo pipefail
cd "$(dirname "$0")/.."

pg=${DOCKET_BENCH_PG:-postgres://postgres@127.0.0.1:54330}
backends=${BACKENDS:-postgres sqlite}
modes=${MODES:-burn continuous latency}
reps=${REPS:-3}
jobs=${JOBS:-200000}
sqlite_jobs=${SQLITE_JOBS:-50000}
duration=${DURATION:-30s}
rate=${RATE:-500}
workers=${WORKERS:-5000}
insert_concurrency=${INSERT_CONCURRENCY:-1}
nice=${NICE:-0}
out=${OUT:-bench/results}
charts=${CHARTS:-docs}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
echo "building docket and the River programs" >&2
go build -o "$bin/docket" ./cmd/docket
# The River modules follow docket's go.mod through a replace directive.
other=river
if [ -n "${BASELINE:-}" ]; then
  other=baseline
  [ "${RIVER:-0}" = 1 ] && other="baseline river"
  cp "$BASELINE" "$bin/baseline"
fi
if [[ " $other " == *" river "* ]]; then
  (cd bench/river/postgres && GOFLAGS=-mod=mod go build -o "$bin/river-postgres" .)
  (cd bench/river/sqlite && GOFLAGS=-mod=mod go build -o "$bin/river-sqlite" .)
fi
mkdir -p "$out" "$charts"
rm -f "$out"/*.json

psql_admin() { psql "$pg/postgres?sslmode=disable" -qAtX "$@"; }
if [[ " $backends " == *" postgres "* ]]; then
  psql_admin -c "SELECT 'PostgreSQL ' || current_setting('server_version') || ', fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit') || ', full_page_writes=' || current_setting('full_page_writes')" >&2
  if [ "$(psql_admin -c "SHOW fsync")" != on ] || [ "$(psql_admin -c "SHOW synchronous_commit")" != on ]; then
    echo "run.sh: $pg is not durable (fsync and synchronous_commit must be on)" >&2
    exit 1
  fi
fi

# fresh_url BACKEND SYSTEM: a new empty database for one run.
fresh_url() {
  if [ "$1" = postgres ]; then
    local db="bench_$2"
    psql_admin -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" -c "CHECKPOINT" >/dev/null
    echo "$pg/$db?sslmode=disable"
  else
    rm -f "$bin/$2.db" "$bin/$2.db-wal" "$bin/$2.db-shm"
    echo "sqlite:$bin/$2.db"
  fi
}

# one BACKEND MODE SYSTEM REP
one() {
  local backend=$1 mode=$2 system=$3 rep=$4 url n args
  url=$(fresh_url "$backend" "$system")
  n=$jobs; [ "$backend" = sqlite ] && n=$sqlite_jobs
  case $mode in
    burn) args=(--mode burn --jobs "$n" --insert-concurrency "$insert_concurrency") ;;
    continuous) args=(--mode continuous --duration "$duration") ;;
    latency) args=(--mode latency --rate "$rate" --duration "$duration") ;;
  esac
  args+=(--database-url "$url" --workers "$workers" --interval 1s)
  local file="$out/$backend-$mode-$system-$rep.json"
  echo "== $backend $mode $system run $rep" >&2
  if [ "$system" = docket ]; then
    nice -n "$nice" "$bin/docket" bench "${args[@]}" -o json >"$file"
  elif [ "$system" = baseline ]; then
    nice -n "$nice" "$bin/baseline" bench "${args[@]}" -o json | jq -c '.system = "baseline"' >"$file"
  else
    nice -n "$nice" "$bin/river-$backend" "${args[@]}" -o json >"$file"
  fi
}

for rep in $(seq 1 "$reps"); do
  for backend in $backends; do
    for mode in $modes; do
      # Alternate who goes first, so neither always runs on a warmer machine.
      order="docket $other"
      (( rep % 2 )) || order=$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')
      for system in $order; do one "$backend" "$mode" "$system" "$rep"; done
    done
  done
done

go run ./bench/chart -table "$out"/*.json
for backend in $backends; do
  for mode in $modes; do
    [ "$mode" = latency ] && continue
    go run ./bench/chart -svg "$charts/bench-$mode-$backend.svg" \
      -title "$mode, $backend: committed jobs/s over time (docket blue, $other red)" \
      "$out/$backend-$mode-"*.json
  done
done
