#!/usr/bin/env bash
# A request server with a latency goal beside three CPU-bound batch jobs,
# on this machine, under three divisions of its CPUs:
#   fair share      the broker's default policy, the server one cell of four
#   goals           allot daemon --policy goals, the server with --goal
#   static split    fair share, the server given one CPU of its own by hand
#                   (--min 1 --exclusive), what a careful user would do
# The server (allot bench serve) takes RATE requests a second at random,
# each SERVICE_US of CPU, and records every latency on its report page.
# For each run: the server's p50/p99 latency over the second half of the
# run (the first half lets the goals policy size it), and the batch jobs'
# CPU and the goal's verdict from the broker's status near the end.
# Starts its own brokers (cgroup v1, root), removes everything it made.
#
#   bash scripts/bench-goals.sh [SECONDS] [REPEATS] [RATE] [SERVICE_US] [P99]
set -euo pipefail
secs=${1:-20}
reps=${2:-3}
rate=${3:-300}
service=${4:-2000}
bound=${5:-20ms}
cd "$(dirname "$0")/.."

variant() { # label, daemon options, server options
  (
    source scripts/lib/bench-broker.sh
    # shellcheck disable=SC2086
    bench_broker "goals-$1" $2
    for i in 1 2 3; do
      setsid "$A" run --name "batch-$i" -- sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
      bench_pids="$bench_pids $!"
    done
    sleep 1
    # shellcheck disable=SC2086
    "$A" run --name server $3 -- "$A" bench serve --rate "$rate" --service-us "$service" \
      --seconds "$secs" --warmup $((secs / 2)) >"$dir/serve.json" &
    local server=$!
    sleep $((secs - 2))
    "$A" status --json >"$dir/status.json"
    wait "$server"
    python3 - "$1" "$dir" <<'PY'
import json, sys
label, d = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/serve.json"))
st = json.load(open(d + "/status.json"))
cells = {c["name"]: c for c in st["cells"]}
batch = sum((cells[n].get("perf") or {}).get("cpu_used") or 0 for n in cells if n.startswith("batch"))
srv = cells.get("server", {})
perf = srv.get("perf") or {}
print("%-13s server p50 %7.1f ms  p99 %8.1f ms  (%d requests, %d queued at the end) | "
      "server held %s CPUs, goal met: %s | batch jobs used %.2f CPUs"
      % (label, s["p50_us"] / 1e3, s["p99_us"] / 1e3, s["requests"], s["backlog"],
         perf.get("cpus"), perf.get("goal_met"), batch))
PY
  )
}

echo "== a server ($rate requests/s, ${service} us each, p99 goal $bound) beside 3 CPU hogs on $(nproc) CPUs, ${secs} s per run =="
for r in $(seq "$reps"); do
  variant "fair share" "" "--goal p99=$bound"
  variant "goals" "--policy goals" "--goal p99=$bound"
  variant "static split" "" "--min 1 --exclusive"
done 2>&1 | grep -v 'Killed  *setsid'
