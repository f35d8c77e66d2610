#!/bin/bash
# A/B of the crowd benchmark: alternate docket binaries, REPS rounds, each
# run against `docket serve` of that binary in its own process (so its CPU
# is the server's alone) on a database of that binary's own, and print per
# run: judgments/s, assign and submit p50/p99, and per judgment the server
# process's CPU µs, PostgreSQL's CPU µs (the cluster's backends, read from
# the postmaster's reaped-children times: use a cluster nobody else uses),
# statements and transactions (pg_stat_statements and pg_stat_database of
# that database), the take and judgment statements' µs, buffers and WAL
# records per call, and the WAL records and buffers per judgment of the
# outbox's marks (relay and webhook dispatcher). Medians are yours.
#
#   go build -o /tmp/docket-before ./cmd/docket   # on the old commit
#   go build -o /tmp/docket-after ./cmd/docket    # on the new one
#   BINS="/tmp/docket-before /tmp/docket-after" REPS=3 \
#     bench/crowd-ab.sh postgres://postgres@127.0.0.1:54340 --units 5000 --contributors 200
#
# The first argument is the cluster's URL without a database: each binary
# gets the database crowdab_<binary name> (made afresh), and the
# cluster needs shared_preload_libraries = 'pg_stat_statements'. Every run
# makes a pool of its own, so runs can follow each other on one database.
# TRACE_DIR, when set, gets each run's --trace (TRACE_DIR/<binary>-rep<i>.csv:
# when each take started, its latency and its submit's).
# SERVE_URL_PARAMS, e.g. "&pool_max_conns=8", is appended to the database
# URL of `docket serve` only (the bench's own set-up and checks do not
# use it): how to compare server-side pool settings.
set -eu
BASE=$1
shift
PGDATA=${PGDATA:-$(psql "$BASE/postgres?sslmode=disable" -Atc 'show data_directory')}
tick=$(getconf CLK_TCK)
pgcpu() { # µs of CPU of the cluster: the postmaster, its live backends and those it reaped
	local pid
	pid=$(head -1 "$PGDATA/postmaster.pid")
	{
		awk '{print $14 + $15 + $16 + $17}' "/proc/$pid/stat"
		awk -v p="$pid" '$4 == p {print $14 + $15}' /proc/[0-9]*/stat 2>/dev/null || true
	} | awk -v t="$tick" '{s += $1} END {print s * 1000000 / t}'
}
becpu() { # "pid cpu_µs" of each live client backend of the database $1 (the server's connections)
	local pid
	for pid in $(psql "$1" -Atc "SELECT pid FROM pg_stat_activity WHERE datname = current_database()
		AND backend_type = 'client backend' AND pid <> pg_backend_pid()"); do
		awk -v p="$pid" -v t="$tick" '{print p, ($14 + $15) * 1000000 / t}' "/proc/$pid/stat" 2>/dev/null || true
	done
}
counts() { # statements sent, foreign key checks, plan+exec µs, transactions of the database $1
	psql "$1" -Atc "SELECT sum(calls) FILTER (WHERE query NOT LIKE 'SELECT \$_ FROM ONLY %'),
		sum(calls) FILTER (WHERE query LIKE 'SELECT \$_ FROM ONLY %'), sum(total_plan_time + total_exec_time) * 1000,
		(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database())
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND query NOT LIKE '%pg_stat%'"
}
for b in $BINS; do
	db=crowdab_$(basename "$b" | tr -c 'a-zA-Z0-9_\n' _)
	psql "$BASE/postgres?sslmode=disable" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
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
		DOCKET_LISTEN=127.0.0.1:0 DOCKET_ADDR_FILE=$dir/addr DOCKET_DATABASE_URL=$url${SERVE_URL_PARAMS:-} DOCKET_NATS_DIR=$dir/nats \
			DOCKET_LOG_LEVEL=warn DOCKET_SHUTDOWN_TIMEOUT=10s "$b" serve >"$dir/serve.log" 2>&1 &
		spid=$!
		for _ in $(seq 1 600); do [ -s "$dir/addr" ] && break; sleep 0.1; done
		# every run after the first starts from vacuumed tables: the earlier
		# runs' dead rows (a hot pool leaves many in its partial indexes)
		# cost the next one. Not the first: vacuuming the fresh database's
		# empty tables records them as empty (reltuples 0), and the take's
		# cached plans, made at the run's start, then read the growing
		# docket_assignments and docket_pool_contributors sequentially until
		# autovacuum's first analyze (up to a minute; docs/benchmarks.md,
		# "Third round"). A table never vacuumed is planned as 10 pages.
		if [ "$i" -gt 1 ]; then psql "$url" -qc 'VACUUM ANALYZE'; fi
		psql "$url" -qAtc "SELECT pg_stat_statements_reset(); SELECT pg_stat_reset()" >/dev/null
		trace=()
		if [ -n "${TRACE_DIR:-}" ]; then trace=(--trace "$TRACE_DIR/$name-rep$i.csv"); fi
		"$b" bench --mode crowd --database-url "$url" --server "http://$(cat "$dir/addr")" "${trace[@]}" "$@" >"$dir/out" 2>"$dir/bench.log" &
		bpid=$!
		# the figures count from the end of the set-up (units, contributors, keys)
		until grep -q 'setup ' "$dir/bench.log" 2>/dev/null; do
			kill -0 "$bpid" 2>/dev/null || break
			sleep 0.05
		done
		c0=$(counts "$url")
		s0=$(awk -v t="$tick" '{print ($14+$15)*1000000/t}' "/proc/$spid/stat")
		p0=$(pgcpu)
		e0=$(becpu "$url")
		wait "$bpid" || { echo "$name rep$i FAILED"; cat "$dir/bench.log" "$dir/serve.log" >&2; kill "$spid"; exit 1; }
		out=$(cat "$dir/out")
		e1=$(becpu "$url")
		# the server's backends' CPU in the run: what each backend live at
		# the end used since the start (all of it if it connected since);
		# the cluster's figure above adds autovacuum, checkpoints, the WAL
		# writer and the bench's own connections, which move it by a third
		# from run to run on a busy machine
		be=$(printf '%s\n' "$e0" | awk -v e1="$e1" 'NF == 2 {c0[$1] = $2} END {n = split(e1, l, "\n"); for (i = 1; i <= n; i++) {split(l[i], f, " "); if (f[1] != "") s += f[2] - c0[f[1]]} print s + 0}')
		s1=$(awk -v t="$tick" '{print ($14+$15)*1000000/t}' "/proc/$spid/stat")
		kill "$spid"
		wait "$spid" || true
		sleep 1
		p1=$(pgcpu)
		c1=$(counts "$url")
		n=$(echo "$out" | sed -n 's/^docket_crowd_judgments=//p')
		# the take statement (every strategy's; not the "is a unit
		# available" check), and the group take's count of a batch: µs,
		# buffers and WAL records per take, under how many query ids the
		# take ran (more than one: it was re-planned), and batch counts
		# per take (0: no group take)
		take=$(psql "$url" -Atc "SELECT format('take_us=%s take_buffers=%s take_wal_records=%s take_queryids=%s take_batches=%s',
			round(sum(total_exec_time)::numeric * 1000 / sum(calls) FILTER (WHERE take)),
			round(sum(shared_blks_hit + shared_blks_read)::numeric / sum(calls) FILTER (WHERE take), 1),
			round(sum(wal_records)::numeric / sum(calls) FILTER (WHERE take), 1), count(*) FILTER (WHERE take),
			round(coalesce(sum(calls) FILTER (WHERE NOT take), 0)::numeric / sum(calls) FILTER (WHERE take), 3))
			FROM (SELECT *, query LIKE '%taken AS (%UPDATE docket_units%' AS take FROM pg_stat_statements
				WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND (query LIKE '%taken AS (%UPDATE docket_units%'
					OR query LIKE '%WITH n AS (%UPDATE docket_pool_counters pc SET active_assignments = pc.active_assignments + n.n%')) s")
		# the judgment statement (µs, buffers and WAL records per call) and
		# every statement that writes the outbox or its marks (WAL records
		# and buffers per judgment: the rows' inserts, the relay's and the
		# webhook dispatcher's updates)
		judge=$(psql "$url" -Atc "SELECT format('judge_us=%s judge_buffers=%s judge_wal_records=%s',
			round(sum(total_exec_time)::numeric * 1000 / sum(calls)), round(sum(shared_blks_hit + shared_blks_read)::numeric / sum(calls), 1),
			round(sum(wal_records)::numeric / sum(calls), 1))
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query LIKE '%UPDATE docket_assignments SET state%INSERT INTO docket_judgments%'")
		marks=$(psql "$url" -Atc "SELECT format('outbox_marks_wal_per_judgment=%s outbox_marks_buffers_per_judgment=%s',
			round(sum(wal_records)::numeric / $n, 2), round(sum(shared_blks_hit + shared_blks_read)::numeric / $n, 1))
			FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query LIKE '%UPDATE docket_outbox%'")
		take="$take $judge $marks"
		figs=$(echo "$out" | grep -E 'judgments_per_sec|offered_per_sec|client_cpu_us|_p50_ms|_p99_ms' | sed 's/^docket_crowd_//' | tr '\n' ' ')
		bad=$(echo "$out" | grep -c VIOLATED || true)
		awk -v name="$name" -v i="$i" -v figs="$figs" -v n="$n" -v s0="$s0" -v s1="$s1" -v p0="$p0" -v p1="$p1" \
			-v c0="$c0" -v c1="$c1" -v take="$take" -v bad="$bad" -v be="$be" 'BEGIN {
			split(c0, a, "|"); split(c1, b, "|")
			printf "%s rep%d %sserver_cpu_us_per_judgment=%.0f pg_cpu_us_per_judgment=%.0f pg_backend_cpu_us_per_judgment=%.0f statements_per_judgment=%.2f fk_checks_per_judgment=%.2f pg_plan_exec_us_per_judgment=%.0f xacts_per_judgment=%.2f %s violations=%d\n",
				name, i, figs, (s1-s0)/n, (p1-p0)/n, be/n, (b[1]-a[1])/n, (b[2]-a[2])/n, (b[3]-a[3])/n, (b[4]-a[4])/n, take, bad }'
		rm -rf "$dir"
	done
done
