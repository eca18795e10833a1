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
# ROUNDS rounds, variants interleaved. Starts its own broker (cgroup v1,
# root) and removes everything it made. Builds the programs with the image
# server's bench harness when they are missing.
#
#   bash scripts/bench-image-servers.sh [K] [ROUNDS] [BURST]
set -euo pipefail
k=${1:-4}
rounds=${2:-3}
burst=${3:-3}
cd "$(dirname "$0")/.."
progs=target/tmp/image_server
if [ ! -x "$progs/image_server" ] || [ ! -x "$progs/image_server_plain" ]; then
  echo "building the image server (cargo test -p allot-capi --bench image_server)" >&2
  cargo test -q -p allot-capi --bench image_server >/dev/null
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
    case "$v" in
      fixed-*) "$progs/image_server_plain" fixed "${v#fixed-}" "$rate" --burst "$burst" --seed $((seed + i)) ;;
      fair) ALLOT_SOCKET=$ALLOT_SOCKET LD_PRELOAD=$shim LD_LIBRARY_PATH=$lib \
              "$progs/image_server" fair "$rate" --burst "$burst" --seed $((seed + i)) ;;
      alone) ALLOT_SOCKET=/nonexistent LD_PRELOAD=$shim LD_LIBRARY_PATH=$lib \
              "$progs/image_server" fair "$rate" --burst "$burst" --seed $((seed + i)) ;;
    esac >"$dir/out-$v-$i" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for i in $(seq "$k"); do
    sed -n 's/^result .*requests=\([0-9]*\) mean_ms=\([0-9.]*\) .*p95_ms=\([0-9.]*\).*/\1 \2 \3/p' "$dir/out-$v-$i"
  done
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
    done
  done
done
python3 - "$dir/results" "$capacity" <<'PY'
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
PY
