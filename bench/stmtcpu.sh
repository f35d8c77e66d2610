#!/usr/bin/env bash
# Backend CPU per execution of SQL statements, alternated in one session:
# each statement is PREPAREd, then run N times in a row, REPS times over,
# and the backend's CPU time (/proc/PID/schedstat, nanoseconds: not wall
# time, so a loaded machine moves it much less) is read around every run
# of N. Prints the microseconds per execution of every run, their median
# and minimum. The server must be on this machine.
#
#   STMTCPU_PG=postgres://postgres@127.0.0.1:54342/db N=30 REPS=5 bench/stmtcpu.sh \
#     "long|SELECT json_agg(t) FROM (SELECT id, job_type FROM docket_jobs LIMIT 2000) t" \
#     "ids|SELECT json_agg(id) FROM (SELECT id FROM docket_jobs LIMIT 2000) t"
#
# A statement that writes runs N × REPS times: write into a scratch table.
set -euo pipefail
pg=${STMTCPU_PG:?set STMTCPU_PG to the database URL}
n=${N:-30}
reps=${REPS:-5}
(( $# )) || { echo "usage: bench/stmtcpu.sh 'name|SQL' ..." >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
names=()
{
  for q in "$@"; do
    names+=("${q%%|*}")
    echo "PREPARE ${q%%|*} AS ${q#*|};"
  done
  echo "\\o $dir/pid"
  echo "SELECT pg_backend_pid();"
  echo "\\o /dev/null"
  for name in "${names[@]}"; do echo "EXECUTE $name;"; done # plans and caches warm
  for _ in $(seq "$reps"); do
    for name in "${names[@]}"; do
      echo "\\! echo $name \$(cut -d' ' -f1 /proc/\$(cat $dir/pid)/schedstat) >>$dir/cpu"
      for _ in $(seq "$n"); do echo "EXECUTE $name;"; done
      echo "\\! echo $name \$(cut -d' ' -f1 /proc/\$(cat $dir/pid)/schedstat) >>$dir/cpu"
    done
  done
} >"$dir/script.sql"
psql "$pg" -qAtX -v ON_ERROR_STOP=1 -f "$dir/script.sql"
awk -v n="$n" '
  NR % 2 == 1 { name = $1; t0 = $2; next }
  { us = ($2 - t0) / 1000 / n; runs[name] = runs[name] sprintf(" %.0f", us); v[name, ++k[name]] = us
    if (!(name in seen)) { seen[name] = 1; order[++m] = name } }
  END {
    for (i = 1; i <= m; i++) {
      name = order[i]; c = k[name]
      for (a = 1; a <= c; a++) s[a] = v[name, a]
      for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++) if (s[b] < s[a]) { x = s[a]; s[a] = s[b]; s[b] = x }
      med = c % 2 ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
      printf "%-12s µs per execution:%s  median %.0f  min %.0f\n", name, runs[name], med, s[1]
    }
  }' "$dir/cpu"
