#!/usr/bin/env bash
# OS noise on a partition CPU against a shared one, on this machine: a
# thread spinning on the clock (allot bench noise) counts the gaps
# ("detours") in its readings, once in a one-CPU partition (allot run
# --partition 1) and once in an ordinary best-effort cell, both beside two
# CPU hogs in best-effort cells. Prints each run's JSON line and the
# medians. Starts its own broker (cgroup v1, root), removes everything
# it made. Interrupts and workqueues are not moved (that needs
# `isolate = true`, which changes the whole machine; not done here).
#
#   bash scripts/bench-noise.sh [SECONDS] [REPEATS]
set -euo pipefail
secs=${1:-10}
reps=${2:-3}
cd "$(dirname "$0")/.."
source scripts/lib/bench-broker.sh
bench_broker noise
bench_hogs 2
echo "== a spinning thread's detours over ${secs} s beside 2 CPU hogs on $(nproc) CPUs =="
: >"$dir/runs"
for r in $(seq "$reps"); do
  for kind in partition shared; do
    if [ "$kind" = partition ]; then opts="--partition 1"; else opts=""; fi
    # shellcheck disable=SC2086
    line=$("$A" run --name "noise-$kind" $opts -- "$A" bench noise --seconds "$secs")
    echo "$kind $line" | tee -a "$dir/runs"
  done
done
python3 - "$dir/runs" <<'PY'
import json, statistics, sys
runs = {}
for l in open(sys.argv[1]):
    kind, js = l.split(" ", 1)
    runs.setdefault(kind, []).append(json.loads(js))
print("%-10s %10s %12s %12s %12s %10s" % ("cpu", "detours", "lost", "max µs", "p99.9 µs", "p99 µs"))
for kind, rs in runs.items():
    m = lambda k: statistics.median(r[k] for r in rs)
    print("%-10s %10d %11.3f%% %12.1f %12.1f %10.1f" % (kind, m("detours"), 100 * m("lost"), m("max_us"), m("p999_us"), m("p99_us")))
PY
