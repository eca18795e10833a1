#!/usr/bin/env bash
# Time-triggered windows against what a user would try instead, on this
# machine: a periodic task (wake every 10 ms, run 3 ms) beside four
# CPU hogs in two best-effort cells, as plain CFS, nice -20, SCHED_FIFO,
# and an allot time-triggered cell (--period 10ms --budget 3ms), each
# waiting for its periods with clock_nanosleep and with allot's window
# wait (--wait-window: a timerfd a suspension cannot prolong, then a short
# spin); then a spinning cell under the same contract (activation,
# delivery error).
# Starts its own broker (cgroup v1, root), removes everything it made.
#
#   bash scripts/bench-windows.sh [SECONDS] [REPEATS]
set -euo pipefail
secs=${1:-3}
reps=${2:-3}
cd "$(dirname "$0")/.."
source scripts/lib/bench-broker.sh
bench_broker windows
spin='(while :; do :; done) & (while :; do :; done) & wait'
for h in a b; do
  setsid "$A" run --name "hog-$h" -- sh -c "$spin" </dev/null >/dev/null 2>&1 &
  bench_pids="$bench_pids $!"
done
sleep 1
probe="bench probe --seconds $secs"
row() { # label, then the command
  local label=$1; shift
  for r in $(seq "$reps"); do
    printf '%s\t%s\t' "$label" "$r"
    "$@" | python3 -c '
import json,sys
s=json.load(sys.stdin)
l,a,d=s["lateness"],s["activation"],s["delivery_error"]
print("lateness p50 %.1f p99 %.1f us | activation p50 %.1f p99 %.1f us (n %d) | delivery error p50 %.2f p99 %.2f %%" % (l["p50"],l["p99"],a["p50"],a["p99"],a["n"],d["p50"],d["p99"]))'
  done
}
echo "== periodic task (10 ms period, 3 ms of work) beside 4 hogs on $(nproc) CPUs =="
for wait in "" "--wait-window"; do
  tag=${wait:+ wait-window}
  row "plain CFS$tag" "$A" $probe --periodic 10000,3000 $wait
  row "nice -20$tag" nice -n -20 "$A" $probe --periodic 10000,3000 $wait
  row "SCHED_FIFO$tag" chrt -f 10 "$A" $probe --periodic 10000,3000 $wait
  row "allot 3ms/10ms$tag" "$A" run --name periodic --period 10ms --budget 3ms -- "$A" $probe --periodic 10000,3000 $wait
done
echo "== spinning cell, allot --period 10ms --budget 3ms =="
row "allot spinner" "$A" run --name spinner --period 10ms --budget 3ms -- "$A" $probe
echo "== broker =="
ps -o cputime=,etime= -p "$broker" | awk '{print "broker CPU time " $1 " over " $2}'
