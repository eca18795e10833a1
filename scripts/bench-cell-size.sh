#!/usr/bin/env bash
# Activation and suspension of a whole cell by its size (Tessellation's
# Table 1): a time-triggered cell (--period 10ms --budget 3ms) of N CPUs
# runs N spinning threads (`allot bench probe --threads N`); each window
# the broker's window driver thaws the cell at the opening and freezes it
# at the close. Reported per size, in µs (the median over the runs of each
# run's p50 and p99):
#   activation (first)  the opening → the first thread running
#   activation (all)    the opening → every thread has run (the cell active)
#   suspension          the close → the last thread stopped (negative:
#                       stopped before the edge; the driver closes early
#                       by its timer lead)
#   suspension spread   the first thread stopped → the last one stopped
# Sizes default to 1, 2, half and all but one of this machine's CPUs: a
# time contract never covers the last CPU, which stays for space cells and
# the broker (as Tessellation kept core 0 for cell management). Starts its
# own broker (cgroup v1, root), removes everything it made.
#
#   bash scripts/bench-cell-size.sh [SECONDS] [REPEATS] [SIZES, e.g. 1,2,8,16]
set -euo pipefail
secs=${1:-3}
reps=${2:-3}
n=$(nproc)
sizes=${3:-$(printf '%s\n' 1 2 $((n / 2)) $((n - 1)) | awk -v n="$n" '$1 >= 1 && $1 < n' | sort -nu | paste -sd,)}
cd "$(dirname "$0")/.."
source scripts/lib/bench-broker.sh
bench_broker cellsize
out=$dir/rows
: >"$out"
echo "== time-triggered cells of each size, 3 ms every 10 ms, $reps runs of $secs s, $n CPUs =="
for size in ${sizes//,/ }; do
  for r in $(seq "$reps"); do
    "$A" run --name "size-$size" --cpus "$size" --period 10ms --budget 3ms -- \
      "$A" bench probe --threads "$size" --seconds "$secs" | sed "s/^/$size\t/" >>"$out"
    printf '.'
  done
done
echo
python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    size, js = line.split("\t", 1)
    rows.setdefault(int(size), []).append(json.loads(js))
def med(runs, key, q):
    v = [r[key][q] for r in runs if r[key]["n"] > 0]
    return statistics.median(v) if v else float("nan")
print("%5s  %22s  %22s  %22s  %22s  %s" % ("CPUs", "activation, first (µs)", "activation, all (µs)", "suspension (µs)", "suspension spread (µs)", "windows"))
for size in sorted(rows):
    runs = rows[size]
    n = sum(r["activation_all"]["n"] for r in runs)
    print("%5d  %10.1f p99 %7.1f  %10.1f p99 %7.1f  %10.1f p99 %7.1f  %10.1f p99 %7.1f  %d" % (
        size, med(runs, "activation", "p50"), med(runs, "activation", "p99"),
        med(runs, "activation_all", "p50"), med(runs, "activation_all", "p99"),
        med(runs, "suspension", "p50"), med(runs, "suspension", "p99"),
        med(runs, "suspension_spread", "p50"), med(runs, "suspension_spread", "p99"), n))
PY
