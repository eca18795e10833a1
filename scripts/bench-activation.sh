#!/usr/bin/env bash
# Message-triggered activation on this machine: a program that receives on
# a channel, run as a message-triggered cell (allot run --message-idle
# 100ms: suspended and holding no CPU between messages) and, for
# comparison, as an ordinary best-effort cell that is always there; both
# beside two CPU hogs. `allot channel ping` sends COUNT timestamps EVERY ms
# apart (long enough for the cell to fall asleep between them); the
# receiver prints, per message, the µs from its sending to its receipt:
# for the message-triggered cell, doorbell → broker → thaw → the program's
# first instruction after its wait. Prints the median, p90 and p99.
# Starts its own broker (cgroup v1, root), removes everything it made.
#
#   bash scripts/bench-activation.sh [COUNT] [EVERY_MS]
set -euo pipefail
count=${1:-50}
every=${2:-300}
cd "$(dirname "$0")/.."
source scripts/lib/bench-broker.sh
bench_broker activation
bench_hogs 2
run() { # label, allot run options
  # shellcheck disable=SC2086
  "$A" run --name "recv-$1" $2 --channel "act-$1:recv" -- \
    "$A" channel recv "act-$1" --inherited --latency --count "$count" >"$dir/$1" &
  local r=$!
  sleep 1.5
  "$A" channel ping "act-$1" --count "$count" --every "$every"
  wait "$r"
}
echo "== send → seen by the receiving program, $count messages ${every} ms apart, beside 2 CPU hogs on $(nproc) CPUs =="
run triggered "--message-idle 100ms"
run always ""
python3 - "$dir" <<'PY'
import statistics, sys
d = sys.argv[1]
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]
for label, what in (("triggered", "message-triggered (asleep between messages)"),
                    ("always", "best-effort, always there")):
    v = [float(l) for l in open(d + "/" + label) if l.strip()]
    print("%-46s n=%3d  median %8.1f µs  p90 %8.1f µs  p99 %8.1f µs" %
          (what, len(v), statistics.median(v), q(v, 0.9), q(v, 0.99)))
PY
