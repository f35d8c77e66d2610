#!/bin/bash
# A/B of the crowd benchmark: alternate docket binaries, REPS rounds, each
# run against `docket serve` of that binary in its own process (so its CPU
# is the server's alone) on a database of that binary's own, and print per
# run: judgments/s, assign and submit p50/p99, and per judgment the server
# process's CPU µs, PostgreSQL's CPU µs (the cluster's backends, read from
# the postmaster's reaped-children times: use a cluster nobody else uses),
# statements and transactions (pg_stat_statements and pg_stat_database of
# that database). Medians are yours.
#
#   go build -o /tmp/docket-before ./cmd/docket   # on the old commit
#   go build -o /tmp/docket-after ./cmd/docket    # on the new one
#   BINS="/tmp/docket-before /tmp/docket-after" REPS=3 \
#     bench/crowd-ab.sh postgres://postgres@127.0.0.1:54340 --units 5000 --contributors 200
#
# The first argument is the cluster's URL without a database: each binary
# gets the database crowdab_<binary name> (created if missing), and the
# cluster needs shared_preload_libraries = 'pg_stat_statements'. Every run
# makes a pool of its own, so runs can follow each other on one database.
set -eu
BASE=$1
shift
PGDATA=${PGDATA:-$(psql "$BASE/postgres?sslmode=disable" -Atc 'show data_directory')}
tick=$(getconf CLK_TCK)
pgcpu() { # µs of CPU of the cluster: the postmaster and its reaped backends
	local pid
	pid=$(head -1 "$PGDATA/postmaster.pid")
	awk -v t="$tick" '{print ($14+$15+$16+$17)*1000000/t}' "/proc/$pid/stat"
}
for b in $BINS; do
	db=crowdab_$(basename "$b" | tr -c 'a-zA-Z0-9_\n' _)
	psql "$BASE/postgres?sslmode=disable" -Atc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 ||
		psql "$BASE/postgres?sslmode=disable" -qc "CREATE DATABASE $db"
	psql "$BASE/$db?sslmode=disable" -qc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements'
done
for i in $(seq 1 "${REPS:-3}"); do
	for b in $BINS; do
		name=$(basename "$b")
		db=crowdab_$(echo "$name" | tr -c 'a-zA-Z0-9_\n' _)
		url="$BASE/$db?sslmode=disable"
		dir=$(mktemp -d)
		# migrate and set up with this binary first, so the counts below are the run's
		"$b" migrate up --database-url "$url" >/dev/null
		DOCKET_LISTEN=127.0.0.1:0 DOCKET_ADDR_FILE=$dir/addr DOCKET_DATABASE_URL=$url DOCKET_NATS_DIR=$dir/nats \
			DOCKET_LOG_LEVEL=warn DOCKET_SHUTDOWN_TIMEOUT=10s "$b" serve >"$dir/serve.log" 2>&1 &
		spid=$!
		for _ in $(seq 1 600); do [ -s "$dir/addr" ] && break; sleep 0.1; done
		psql "$url" -qAtc "SELECT pg_stat_statements_reset(); SELECT pg_stat_reset()" >/dev/null
		x0=$(psql "$url" -Atc "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
		s0=$(awk -v t="$tick" '{print ($14+$15)*1000000/t}' "/proc/$spid/stat")
		p0=$(pgcpu)
		out=$("$b" bench --mode crowd --database-url "$url" --server "http://$(cat "$dir/addr")" "$@" 2>"$dir/bench.log") ||
			{ echo "$name rep$i FAILED"; cat "$dir/bench.log" "$dir/serve.log" >&2; kill "$spid"; exit 1; }
		s1=$(awk -v t="$tick" '{print ($14+$15)*1000000/t}' "/proc/$spid/stat")
		kill "$spid"
		wait "$spid" || true
		sleep 1
		p1=$(pgcpu)
		x1=$(psql "$url" -Atc "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
		st=$(psql "$url" -Atc "SELECT sum(calls) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query NOT LIKE '%pg_stat%' AND query NOT LIKE 'SELECT $1 FROM ONLY %'")
		n=$(echo "$out" | sed -n 's/^docket_crowd_judgments=//p')
		figs=$(echo "$out" | grep -E 'judgments_per_sec|_p50_ms|_p99_ms' | sed 's/^docket_crowd_//' | tr '\n' ' ')
		bad=$(echo "$out" | grep -c VIOLATED || true)
		awk -v name="$name" -v i="$i" -v figs="$figs" -v n="$n" -v s="$((${s1%.*} - ${s0%.*}))" -v p="$((${p1%.*} - ${p0%.*}))" \
			-v st="$st" -v x="$((x1 - x0))" -v bad="$bad" 'BEGIN {
			printf "%s rep%d %sserver_cpu_us_per_judgment=%.0f pg_cpu_us_per_judgment=%.0f statements_per_judgment=%.2f xacts_per_judgment=%.2f violations=%d\n",
				name, i, figs, s/n, p/n, st/n, x/n, bad }'
		rm -rf "$dir"
	done
done
