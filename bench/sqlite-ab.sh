#!/bin/bash
# A/B of `docket bench` on SQLite: alternate docket binaries for REPS rounds,
# each run on a database file of that binary's own (made afresh by --reset),
# print every run's figures (the bench's docket_* lines, and cpu_s: the user
# + system CPU seconds of the bench and of any process it started, such as
# the crowd mode's `docket serve`), then each figure's median per binary
# and its ratio to the first binary's.
#
#   go build -o /tmp/docket-before ./cmd/docket   # on the old commit
#   go build -o /tmp/docket-after ./cmd/docket    # on the new one
#   BINS="/tmp/docket-before /tmp/docket-after" REPS=5 \
#     bench/sqlite-ab.sh --mode burn --jobs 100000
#
# Everything after the script's name goes to `docket bench`. DIR (default: a
# new temporary directory) holds the database files.
set -eu
: "${BINS:?BINS must name the docket binaries to alternate}"
REPS=${REPS:-5}
DIR=${DIR:-$(mktemp -d)}
results=$(mktemp)
for rep in $(seq 1 "$REPS"); do
	for bin in $BINS; do
		name=$(basename "$bin")
		db="$DIR/$name.db"
		rm -f "$db" "$db-wal" "$db-shm"
		log="$DIR/$name-rep$rep.log"
		start=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
		# A subshell, so its waited-for children's times are counted.
		( "$bin" bench --database-url "sqlite:$db" --reset "$@" >"$log" 2>&1 ) || {
			echo "run $rep of $name failed; its output:" >&2
			cat "$log" >&2
			exit 1
		}
		end=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
		cpu=$(awk -v a="$start" -v b="$end" -v t="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b - a) / t}')
		line="rep=$rep bin=$name $(grep -E '^docket_[a-z0-9_]+=' "$log" | tr '\n' ' ')cpu_s=$cpu"
		echo "$line"
		echo "$line" >>"$results"
	done
done
echo "medians (ratio to $(basename "${BINS%% *}")):"
awk '
{
	bin = ""
	for (i = 1; i <= NF; i++) {
		split($i, kv, "=")
		if (kv[1] == "bin") { bin = kv[2]; if (!(bin in seen)) { seen[bin] = 1; order[++nb] = bin } }
	}
	for (i = 1; i <= NF; i++) {
		split($i, kv, "=")
		if (kv[1] == "rep" || kv[1] == "bin") continue
		if (!(kv[1] in known)) { known[kv[1]] = 1; keys[++nk] = kv[1] }
		n[bin, kv[1]]++
		v[bin, kv[1], n[bin, kv[1]]] = kv[2]
	}
}
function median(b, k,    m, i, j, t, a) {
	m = n[b, k]
	for (i = 1; i <= m; i++) a[i] = v[b, k, i] + 0
	for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
	for (k = 1; k <= nk; k++) {
		line = sprintf("  %-40s", keys[k])
		base = median(order[1], keys[k])
		for (b = 1; b <= nb; b++) {
			m = median(order[b], keys[k])
			line = line sprintf("  %s %g", order[b], m)
			if (b > 1 && base != 0) line = line sprintf(" (%.2fx)", m / base)
		}
		print line
	}
}' "$results"
