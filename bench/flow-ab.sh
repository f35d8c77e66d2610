#!/bin/sh
# A/B of the workflow benchmark: alternate docket binaries on one database,
# REPS rounds, and print each run's steps/s and step-to-step p50/p99, so
# that before and after share the machine's load (medians are yours).
#
#   go build -o /tmp/docket-before ./cmd/docket   # on the old commit
#   go build -o /tmp/docket-after ./cmd/docket    # on the new one
#   BINS="/tmp/docket-before /tmp/docket-after" REPS=3 \
#     bench/flow-ab.sh "$DB" --mode workflow --runs 2000 --shape chain
#
# Every run resets the database (--reset): use a database of its own.
set -eu
DB=$1
shift
for i in $(seq 1 "${REPS:-3}"); do
	for b in $BINS; do
		out=$("$b" bench --database-url "$DB" --reset "$@" 2>/dev/null |
			grep -E 'steps_per_sec|latency_p50|latency_p99' | tr '\n' ' ')
		echo "$(basename "$b") rep$i $out"
	done
done
