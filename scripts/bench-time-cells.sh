#!/usr/bin/env bash
# What running many time cells costs the broker: its CPU time (as % of one
# core) over SECONDS with no cell, with CELLS time-fraction cells, and with
# CELLS time-triggered cells (the window driver flips CELLS freezers twice
# every period), each cell a spinning process started with `allot run`.
# For the triggered cells it also sums what their windows delivered
# (`allot status --json`: periods, missed windows, mean error, opening
# latency). Time promises go on one CPU here (one stays for space cells),
# so the triggered cells share it at phases the planner spaces out.
# Starts its own broker (cgroup v1, root), removes everything it made.
#
#   bash scripts/bench-time-cells.sh [CELLS] [SECONDS]
set -euo pipefail
cells=${1:-100}
secs=${2:-10}
cd "$(dirname "$0")/.."
source scripts/lib/bench-broker.sh
bench_broker timecells

# CPU time of the broker's threads, ns (schedstat; threads persist).
cpu_ns() { cat /proc/"$broker"/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}'; }
measure() { # label
  local t0 t1
  t0=$(cpu_ns)
  sleep "$secs"
  t1=$(cpu_ns)
  python3 -c "print('%-34s broker %6.2f %% of one core over %s s' % ('$1', 100.0*($t1-$t0)/1e9/$secs, $secs))"
}
start_cells() { # allot run options...
  bench_pids=""
  for i in $(seq "$cells"); do
    "$A" run --name "tc-$i" "$@" -- sh -c 'while :; do :; done' </dev/null >/dev/null 2>>"$dir/run.log" &
    bench_pids="$bench_pids $!"
    # Each registration waits for the one before (admission is ordered).
    for _ in $(seq 100); do
      [ "$("$A" status --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["cells"]))')" -ge "$i" ] && break
      sleep 0.05
    done
  done
  local n
  n=$("$A" status --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["cells"]))')
  [ "$n" -eq "$cells" ] || { echo "only $n of $cells cells admitted:"; cat "$dir/run.log"; exit 1; }
}
stop_cells() {
  bench_kill_cells
  wait $bench_pids 2>/dev/null || true
  bench_pids=""
  for _ in $(seq 100); do
    [ "$("$A" status --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["cells"]))')" -eq 0 ] && return
    sleep 0.1
  done
  echo "cells did not end" >&2
  exit 1
}

echo "== broker cost on $(nproc) CPUs: $cells cells, $secs s each =="
measure "no cells"
frac=$(python3 -c "print('%.4f' % (0.5 / $cells))")
start_cells --fraction "$frac"
sleep 1
measure "$cells x --fraction $frac"
stop_cells
budget_us=500
start_cells --period 100ms --budget "${budget_us}us"
sleep 1
"$A" status --json > "$dir/before.json"
measure "$cells x --period 100ms --budget ${budget_us}us"
"$A" status --json > "$dir/after.json"
python3 - "$dir/before.json" "$dir/after.json" "$budget_us" <<'EOF'
import json, statistics, sys
before = {c["id"]: c.get("delivery") for c in json.load(open(sys.argv[1]))["cells"]}
after = json.load(open(sys.argv[2]))["cells"]
periods = missed = 0
errors, p50s, p99s = [], [], []
for c in after:
    d, b = c.get("delivery"), before.get(c["id"])
    if not d or not b:
        continue
    periods += d["periods"] - b["periods"]
    missed += d["missed"] - b["missed"]
    errors.append(d["mean_error"])
    p50s.append(d["open_latency_p50_us"])
    p99s.append(d["open_latency_p99_us"])
print("windows over the measurement: %d periods, %d missed (%.2f %%)" % (periods, missed, 100.0 * missed / max(periods, 1)))
print("per cell (median over %d cells): mean delivery error %.1f %%, opening latency p50 %.0f us, p99 %.0f us"
      % (len(errors), 100 * statistics.median(errors), statistics.median(p50s), statistics.median(p99s)))
EOF
stop_cells
