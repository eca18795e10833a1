#!/usr/bin/env bash
# Poli-C's image-server case study as the paper ran it: several server
# processes (the paper's Apache processes) on one machine, their require
# blocks coordinated through the broker (the paper's policd), against the
# same processes with fixed OpenMP team sizes. K processes each serve RATE/K
# requests per second (exponential arrivals, BURST seconds, a seed of its
# own), every request blurring an image with OpenMP
# (crates/capi/benches/c/image_server.c):
#
#   fixed N            libgomp, N threads per request, in every process
#   fair_cores         allot_require(allot_fair_cores()) in each request, the
#                      processes coordinated through a broker of this run
#                      (the shim preloaded, so each team joins its block)
#   fair_cores alone   the same, each process without a broker (it divides
#                      the machine as if it were alone)
#
# Rates are fractions of the machine's capacity (CPUs ÷ one request on one
# thread). Prints, per rate and variant, the mean latency over all requests
# of all processes (and the worst process's 95th percentile), medians of
# ROUNDS rounds, variants interleaved; then, for the two `fair_cores`
# variants, the CPU time that idled while a request waited for cores, per
# request (from every request's arrival, start and end, `--trace`: what
# passing a freed core from one request to the next costs). Starts its own
# broker (cgroup v1, root) and removes everything it made. Builds the
# programs (release, as they ship) with the image server's bench harness
# when they are missing.
#
#   bash scripts/bench-image-servers.sh [K] [ROUNDS] [BURST]
set -euo pipefail
k=${1:-4}
rounds=${2:-3}
burst=${3:-3}
cd "$(dirname "$0")/.."
progs=target/tmp/image_server
if [ ! -x "$progs/image_server" ] || [ ! -x "$progs/image_server_plain" ]; then
  echo "building the image server (cargo test --release -p allot-capi --bench image_server)" >&2
  cargo test --release -q -p allot-capi --bench image_server >/dev/null
fi
shim=$(ls "$PWD"/$progs/shim/*.so | head -1)
lib=$PWD/$progs/prefix/lib
source scripts/lib/bench-broker.sh
bench_broker imageservers
cpus=$(nproc)
one=$("$progs/image_server_plain" calibrate | sed -n 's/.*service1_ms=\([0-9.]*\).*/\1/p')
capacity=$(python3 -c "print($cpus * 1000 / $one)")
echo "== $k image servers on $cpus CPUs: one request $one ms on one thread, capacity $(printf %.1f "$capacity") requests/s; $rounds rounds of $burst s =="

run_variant() { # variant rate_each seed_base → one line per process: "requests mean_ms p95_ms"
  local v=$1 rate=$2 seed=$3 i
  local pids=()
  for i in $(seq "$k"); do
    local opts=(--burst "$burst" --seed $((seed + i)) --trace "$dir/trace-$v-$i")
    case "$v" in
      fixed-*) "$progs/image_server_plain" fixed "${v#fixed-}" "$rate" "${opts[@]}" ;;
      fair) ALLOT_SOCKET=$ALLOT_SOCKET LD_PRELOAD=$shim LD_LIBRARY_PATH=$lib \
              "$progs/image_server" fair "$rate" "${opts[@]}" ;;
      alone) ALLOT_SOCKET=/nonexistent LD_PRELOAD=$shim LD_LIBRARY_PATH=$lib \
              "$progs/image_server" fair "$rate" "${opts[@]}" ;;
    esac >"$dir/out-$v-$i" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for i in $(seq "$k"); do
    sed -n 's/^result .*requests=\([0-9]*\) mean_ms=\([0-9.]*\) .*p95_ms=\([0-9.]*\).*/\1 \2 \3/p' "$dir/out-$v-$i"
  done
}

idle_while_waiting() { # variant → CPU ms idle while a request waited, per request
  python3 - "$cpus" "$dir"/trace-"$1"-* <<'PY'
import sys
# Every request's arrival, start and end on one time line: while a request
# waits, each idle CPU (CPUs minus the cores of the requests running) up to
# the number waiting is time a freed core was not yet passed on.
cpus, events, n = int(sys.argv[1]), [], 0
for path in sys.argv[2:]:
    for line in open(path):
        arrival, start, done, cores = line.split()[:4]
        n += 1
        events += [(float(arrival), 0, 1), (float(start), int(cores), -1),
                   (float(done), -int(cores), 0)]
events.sort()
busy = waiting = 0
idle = 0.0
last = events[0][0] if events else 0.0
for t, d_busy, d_wait in events:
    idle += min(max(0, cpus - busy), waiting) * (t - last)
    busy, waiting, last = busy + d_busy, waiting + d_wait, t
print(f"{idle * 1e3 / max(1, n):.3f}")
PY
}

variants=(fixed-1 fixed-2 fixed-4 fair alone)
: >"$dir/results"
for load in 0.4 0.7 1.0; do
  each=$(python3 -c "print($capacity * $load / $k)")
  for r in $(seq "$rounds"); do
    # The order of the variants rotates from round to round.
    for j in 0 1 2 3 4; do
      v=${variants[$(( (j + r) % 5 ))]}
      run_variant "$v" "$each" $((r * 100)) | while read -r n mean p95; do
        echo "$load $r $v $n $mean $p95" >>"$dir/results"
      done
      case "$v" in fair | alone) echo "$load $v $(idle_while_waiting "$v")" >>"$dir/idle" ;; esac
    done
  done
done
python3 - "$dir/results" "$capacity" "$dir/idle" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
cap = float(sys.argv[2])
by = collections.defaultdict(lambda: collections.defaultdict(list))
for load, r, v, n, mean, p95 in rows:
    by[(load, v)][r].append((int(n), float(mean), float(p95)))
names = {"fixed-1": "fixed 1", "fixed-2": "fixed 2", "fixed-4": "fixed 4",
         "fair": "fair_cores", "alone": "fair_cores alone"}
order = ["fixed-1", "fixed-2", "fixed-4", "fair", "alone"]
print("mean latency over every process's requests, ms (worst process's p95), median of rounds")
print("| load | rate (req/s) | " + " | ".join(names[v] for v in order) + " | fair ÷ best fixed |")
print("|---:|---:|" + "---:|" * (len(order) + 1))
for load in sorted({l for l, _ in by}, key=float):
    cells, means = [], {}
    for v in order:
        per_round = by[(load, v)].values()
        m = statistics.median(sum(n * x for n, x, _ in procs) / max(1, sum(n for n, _, _ in procs))
                              for procs in per_round)
        p = statistics.median(max(p for _, _, p in procs) for procs in per_round)
        means[v] = m
        cells.append(f"{m:.1f} ({p:.0f})")
    best = min(means[v] for v in order if v.startswith("fixed"))
    print(f"| {float(load) * 100:.0f} % | {cap * float(load):.1f} | " + " | ".join(cells)
          + f" | **{means['fair'] / best:.2f}** |")
idle = collections.defaultdict(list)
for line in open(sys.argv[3]):
    load, v, ms = line.split()
    idle[(load, v)].append(float(ms))
print()
print("CPU idle while a request waited, ms per request (median of rounds)")
print("| load | fair_cores | fair_cores alone |")
print("|---:|---:|---:|")
for load in sorted({l for l, _ in idle}, key=float):
    print(f"| {float(load) * 100:.0f} % | " + " | ".join(
        f"{statistics.median(idle[(load, v)]):.2f}" for v in ("fair", "alone")) + " |")
PY
