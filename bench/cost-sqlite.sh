#!/usr/bin/env bash
# What a job costs on SQLite, per job: CPU of the benchmark process (the
# database is in it), bytes it wrote to the file system (WAL frames and
# checkpoints, from its rusage: block outputs × 512) and the pages of each
# docket_jobs index at the end. A burn of JOBS jobs on a new file per run;
# several binaries alternate, so a change is compared in one invocation.
# Bytes written are amounts, not rates: a loaded machine moves them little.
#
#   bench/cost-sqlite.sh                                   this tree, 50,000 jobs, 1 rep
#   BINARIES="/tmp/docket-before /tmp/docket-after" REPS=3 bench/cost-sqlite.sh
#
# Environment: BINARIES (docket binaries; default: built from this tree),
# JOBS (50000), REPS (1). Needs the sqlite3 shell (for the index pages).
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${JOBS:-50000}
reps=${REPS:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
binaries=${BINARIES:-}
if [ -z "$binaries" ]; then
  echo "building" >&2
  go build -o "$tmp/docket" ./cmd/docket
  binaries=$tmp/docket
fi

printf '%-28s %4s %8s | %7s %9s | %s\n' binary rep jobs/s "cpu µs" "written B" "index pages"
for rep in $(seq 1 "$reps"); do
  order=$binaries
  (( rep % 2 )) || order=$(echo "$binaries" | tr ' ' '\n' | tac | tr '\n' ' ')
  for b in $order; do
    rm -f "$tmp"/b.db*
    /usr/bin/time -o "$tmp/time" -f '%U %S %O' "$b" bench --mode burn --jobs "$jobs" \
      --database-url "sqlite:$tmp/b.db" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    read -r cu cs blocks <"$tmp/time"
    rate=$(grep -Eo 'docket_jobs_per_sec=[0-9.]+' "$tmp/out" | head -1 | cut -d= -f2)
    pages=$(sqlite3 "$tmp/b.db" "SELECT group_concat(name || '=' || n, ' ') FROM (SELECT name, count(*) AS n FROM dbstat
      WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = 'docket_jobs') GROUP BY name ORDER BY name)")
    awk -v b="$(basename "$b")" -v rep="$rep" -v n="$jobs" -v r="${rate:-0}" -v cu="$cu" -v cs="$cs" -v o="$blocks" -v p="$pages" \
      'BEGIN { printf "%-28s %4d %8.0f | %7.1f %9.0f | %s\n", b, rep, r, (cu + cs) * 1e6 / n, o * 512 / n, p }'
  done
done
