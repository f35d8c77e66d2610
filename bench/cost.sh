#!/usr/bin/env bash
# Where the time goes, per job: runs a burn of docket, River and the floor
# (../shared/bench/floor, a minimal durable queue in raw SQL) on one
# PostgreSQL cluster and prints, per job, what each cost: PostgreSQL CPU (the
# cluster's postmaster and every backend it forked), client CPU, WAL bytes,
# WAL records and full-page images, statements and commits, then the
# statements that cost the most server time.
#
# These are counts and CPU time, not wall-clock rates, so a busy machine
# changes them much less than it changes jobs/s; still, compare systems
# measured in one invocation.
#
#   bench/cost.sh                          all three, 200,000 jobs each, 1 rep
#   SYSTEMS="docket river" JOBS=100000 REPS=3 bench/cost.sh
#
# The cluster must be durable and load pg_stat_statements:
#   DOCKET_TESTDB_DURABLE=1 DOCKET_TESTDB_DIR=/tmp/docket-costdb DOCKET_TESTDB_PORT=54341 scripts/testdb.sh start
#   printf "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = all\n" >>/tmp/docket-costdb/data/postgresql.conf
#   DOCKET_TESTDB_DIR=/tmp/docket-costdb DOCKET_TESTDB_PORT=54341 scripts/testdb.sh stop    # then start again
#
# Environment: DOCKET_COST_PG (default postgres://postgres@127.0.0.1:54341),
# SYSTEMS ("docket river floor"), JOBS (200000), REPS (1), WORKERS (5000),
# DOCKET_PREP (SQL run in docket's database after `docket migrate up`, before
# the burn and its counters: prices a schema change without a migration,
# e.g. DOCKET_PREP='DROP INDEX docket_jobs_finished'; several statements
# separated by "|" are alternated as systems docket#1, docket#2, …, so one
# invocation compares them), DOCKET_BIN (docket binaries to run instead of
# building this tree; several, separated by spaces, are alternated the same
# way, e.g. DOCKET_BIN="/tmp/before /tmp/after"),
# FLOOR ("../shared/bench/floor"; its flags: FLOOR_ARGS, default a batch of
# 2,000, 2 connections, finished rows kept), TOP (statements listed, 6).
set -euo pipefail
cd "$(dirname "$0")/.."

pg=${DOCKET_COST_PG:-postgres://postgres@127.0.0.1:54341}
systems=${SYSTEMS:-docket river floor}
jobs=${JOBS:-200000}
reps=${REPS:-1}
workers=${WORKERS:-5000}
floor=${FLOOR:-../shared/bench/floor}
floor_args=${FLOOR_ARGS:---batch 2000 --workers 2 --variant update}
top=${TOP:-6}

admin() { psql "$pg/postgres?sslmode=disable" -qAtX "$@"; }
indb() { local d=$1; shift; psql "$pg/$d?sslmode=disable" -qAtX "$@"; }
[ "$(admin -c 'SHOW fsync')" = on ] || { echo "cost.sh: $pg has fsync off" >&2; exit 1; }
admin -c 'SHOW shared_preload_libraries' | grep -q pg_stat_statements \
  || { echo "cost.sh: $pg does not load pg_stat_statements (see the header)" >&2; exit 1; }
datadir=$(admin -c 'SHOW data_directory')
postmaster=$(head -1 "$datadir/postmaster.pid")
tick=$(getconf CLK_TCK)

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
echo "building" >&2
# Alternatives of docket (several DOCKET_PREP statements or binaries): one
# system each, docket#1, docket#2, …
IFS='|' read -r -a preps <<<"${DOCKET_PREP:-}"
read -r -a bins <<<"${DOCKET_BIN:-}"
(( ${#bins[@]} )) || { go build -o "$bin/docket" ./cmd/docket; bins=("$bin/docket"); }
(( ${#preps[@]} )) || preps=("")
nalt=$(( ${#preps[@]} > ${#bins[@]} ? ${#preps[@]} : ${#bins[@]} ))
if (( nalt > 1 )); then
  alts=""
  for i in $(seq 1 "$nalt"); do alts+=" docket#$i"; done
  systems=${systems/docket/${alts# }}
fi
[[ " $systems " == *" river "* ]] && (cd bench/river/postgres && GOFLAGS=-mod=mod go build -o "$bin/river" .)
[[ " $systems " == *" floor "* ]] && (cd "$floor" && go build -o "$bin/floor" .)

# pg_ticks: CPU ticks of the postmaster and its children, including the
# children it has reaped (a backend that exits adds its time to cutime).
pg_ticks() {
  local sum=0 p f
  for p in "$postmaster" $(cat /proc/"$postmaster"/task/*/children 2>/dev/null); do
    f=$(cat /proc/"$p"/stat 2>/dev/null) || continue
    f=${f##*) }
    set -- $f
    sum=$((sum + ${12} + ${13} + ${14} + ${15}))
  done
  echo "$sum"
}

wal() { indb "$1" -c "SELECT wal_records || ' ' || wal_fpi || ' ' || wal_bytes FROM pg_stat_wal"; }

printf '%-8s %4s %9s | %8s %8s | %9s %7s %6s | %7s %7s | %s\n' \
  system rep jobs/s "pg µs" "cli µs" "WAL B" "WAL rec" FPI stmts commits "heap B"
for rep in $(seq 1 "$reps"); do
  order=$systems
  (( rep % 2 )) || order=$(echo "$systems" | tr ' ' '\n' | tac | tr '\n' ' ')
  for system in $order; do
    db="cost_${system/\#/_}"
    alt=0
    [[ $system == docket\#* ]] && alt=$((${system#docket#} - 1))
    prep=${preps[$(( ${#preps[@]} > 1 ? alt : 0 ))]}
    dbin=${bins[$(( ${#bins[@]} > 1 ? alt : 0 ))]}
    admin -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" -c CHECKPOINT >/dev/null
    url="$pg/$db?sslmode=disable"
    if [[ $system == docket* ]] && [ -n "$prep" ]; then
      "$dbin" migrate up --database-url "$url" >/dev/null
      indb "$db" -c "$prep" -c CHECKPOINT >/dev/null
    fi
    indb "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null
    read -r r0 f0 b0 <<<"$(wal "$db")"
    c0=$(admin -c "SELECT xact_commit FROM pg_stat_database WHERE datname = '$db'")
    t0=$(pg_ticks)
    case $system in
      docket*) cmd=("$dbin" bench --mode burn --jobs "$jobs" --workers "$workers" --database-url "$url") ;;
      river) cmd=("$bin/river" --mode burn --jobs "$jobs" --workers "$workers" --database-url "$url") ;;
      floor) cmd=("$bin/floor" --database-url "$url" --jobs "$jobs" --runs 1 --wait-quiet 1s --max-busy 64 $floor_args) ;;
    esac
    /usr/bin/time -o "$bin/time" -f '%U %S' "${cmd[@]}" >"$bin/out" 2>"$bin/err" \
      || { cat "$bin/err" >&2; exit 1; }
    sleep 2  # let the backends of the finished process exit and be reaped
    t1=$(pg_ticks)
    c1=$(admin -c "SELECT xact_commit FROM pg_stat_database WHERE datname = '$db'")
    read -r r1 f1 b1 <<<"$(wal "$db")"
    read -r cu cs <"$bin/time"
    rate=$(grep -Eo '(docket|river|floor)_jobs_per_sec=[0-9.]+' "$bin/out" | head -1 | cut -d= -f2)
    heap=0
    [[ $system == docket* ]] && heap=$(indb "$db" -c "SELECT pg_relation_size('docket_jobs')")
    stmts=$(indb "$db" -c "SELECT sum(calls) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db')")
    awk -v s="$system" -v rep="$rep" -v n="$jobs" -v rate="${rate:-0}" -v t="$((t1 - t0))" -v hz="$tick" \
      -v cu="$cu" -v cs="$cs" -v wb="$((b1 - b0))" -v wr="$((r1 - r0))" -v fpi="$((f1 - f0))" \
      -v st="${stmts:-0}" -v cm="$((c1 - c0))" -v hb="$heap" 'BEGIN {
        printf "%-8s %4d %9.0f | %8.1f %8.1f | %9.0f %7.2f %6.3f | %7.3f %7.3f | %.0f\n",
          s, rep, rate, t / hz * 1e6 / n, (cu + cs) * 1e6 / n, wb / n, wr / n, fpi / n, st / n, cm / n, hb / n }'
    indb "$db" -F ' | ' -c "
      SELECT round((total_exec_time * 1000 / $jobs)::numeric, 2) AS us_per_job,
             round(calls::numeric / $jobs, 4) AS calls_per_job,
             round(wal_bytes::numeric / $jobs, 1) AS wal_per_job,
             round((shared_blks_hit + shared_blks_read)::numeric / $jobs, 2) AS buffers_per_job,
             left(regexp_replace(query, '\s+', ' ', 'g'), 110)
      FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db')
      ORDER BY total_exec_time DESC LIMIT $top" | sed 's/^/    /' >&2
  done
done
echo "pg µs, cli µs: CPU time per job of PostgreSQL and of the benchmark process; WAL B: WAL bytes per job;" >&2
echo "heap B: docket_jobs' size at the end of the run per job (docket only)" >&2
echo "statements: server µs per job, calls per job, WAL bytes per job, shared buffers (hit + read) per job" >&2
