#!/usr/bin/env bash
# oneTBB and Intel OpenMP sharing the machine, with and without allot's
# Thread Composability Manager (crates/capi/TCM.md). Two experiments:
#
#   beside  a oneTBB program and an Intel-OpenMP program start together;
#           the makespan is until both finished;
#   nested  one program: oneTBB loops outside, an OpenMP region in each
#           item.
#
# Each runs plain (every runtime takes every CPU), the ways a careful
# user shares without allot (a static CPU split with matching thread
# counts, one after the other, OMP_DYNAMIC; OMP_NUM_THREADS=1 inside for
# nested), under `allot run` with the OpenMP shim only (--no-tcm), under
# `allot run` with allot's TCM, and with Intel's own TCM (tcmlib, which
# divides one process's CPUs). Median of REPS runs; the ratio is to the
# best of the ways without allot. The runtimes come from PyPI
# (scripts/intel-runtimes.sh). Starts its own broker (cgroup v1, root).
#
#   bash scripts/bench-tcm.sh [REPS] [SCALE]
#
# SCALE multiplies the work (1: about 3 s for each program alone on 2 CPUs).
set -euo pipefail
reps=${1:-3}
scale=${2:-1}
cd "$(dirname "$0")/.."
rt=$(bash scripts/intel-runtimes.sh | tail -n 1)
intel_tcm=$PWD/target/intel-tcm/lib
source scripts/lib/bench-broker.sh
bench_broker tcm
bin=$dir/bin
mkdir -p "$bin"
inc="-I$rt/include"
lib="-L$rt/lib -Wl,-rpath,$rt/lib"
# shellcheck disable=SC2086
{
  g++ -O2 scripts/tcm/tbb_work.cpp $inc $lib -l:libtbb.so.12 -o "$bin/tbb_work"
  gcc -O2 -fopenmp scripts/tcm/omp_work.c $lib -l:libiomp5.so -o "$bin/omp_work"
  g++ -O2 -fopenmp scripts/tcm/nested.cpp $inc $lib -l:libtbb.so.12 -l:libiomp5.so -o "$bin/nested"
}
tbb_rounds=$((150 * scale))
omp_rounds=$((150 * scale))
nested_rounds=$((80 * scale))
ncpu=$(nproc)
half=$((ncpu / 2))
[ "$half" -ge 1 ] || half=1

beside() { # the two programs, started together, in a shell of their own
  echo "$bin/tbb_work $tbb_rounds & $bin/omp_work $omp_rounds & wait"
}
declare -A how
how[beside/plain]="sh -c '$(beside)'"
how[beside/static-split]="sh -c 'taskset -c 0-$((half - 1)) $bin/tbb_work $tbb_rounds & OMP_NUM_THREADS=$((ncpu - half)) taskset -c $half-$((ncpu - 1)) $bin/omp_work $omp_rounds & wait'"
how[beside/one-after-the-other]="sh -c '$bin/tbb_work $tbb_rounds; $bin/omp_work $omp_rounds'"
how[beside/omp-dynamic]="OMP_DYNAMIC=true sh -c '$(beside)'"
how[beside/allot-shim]="$A run --no-tcm -- sh -c '$(beside)'"
how[beside/allot-tcm]="$A run -- sh -c '$(beside)'"
how[beside/intel-tcm]="TCM_ENABLE=1 LD_LIBRARY_PATH=$intel_tcm sh -c '$(beside)'"
how[nested/plain]="$bin/nested $nested_rounds"
how[nested/omp-1-inside]="OMP_NUM_THREADS=1 $bin/nested $nested_rounds"
how[nested/omp-dynamic]="OMP_DYNAMIC=true $bin/nested $nested_rounds"
how[nested/allot-shim]="$A run --no-tcm -- $bin/nested $nested_rounds"
how[nested/allot-tcm]="$A run -- $bin/nested $nested_rounds"
how[nested/intel-tcm]="TCM_ENABLE=1 LD_LIBRARY_PATH=$intel_tcm $bin/nested $nested_rounds"

order=(beside/plain beside/static-split beside/one-after-the-other beside/omp-dynamic
  beside/allot-shim beside/allot-tcm beside/intel-tcm
  nested/plain nested/omp-1-inside nested/omp-dynamic nested/allot-shim nested/allot-tcm
  nested/intel-tcm)
echo "== oneTBB $(basename "$(readlink -f "$rt/lib/libtbb.so.12")"), Intel OpenMP, $ncpu CPUs, $reps runs each, interleaved =="
for r in $(seq "$reps"); do
  for k in "${order[@]}"; do
    t0=$(date +%s.%N)
    timeout 300 bash -c "${how[$k]}" >/dev/null 2>"$dir/err" || { echo "$k failed:"; cat "$dir/err"; exit 1; }
    t1=$(date +%s.%N)
    echo "$k $(echo "$t1 - $t0" | bc)" >>"$dir/times"
    printf '.'
  done
done
echo
python3 - "$dir/times" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    k, t = line.split()
    times.setdefault(k, []).append(float(t))
without = {"beside": ["plain", "static-split", "one-after-the-other", "omp-dynamic"],
           "nested": ["plain", "omp-1-inside", "omp-dynamic"]}
for exp in ("beside", "nested"):
    med = {k.split("/")[1]: statistics.median(v) for k, v in times.items() if k.startswith(exp + "/")}
    best_name = min(without[exp], key=lambda n: med[n])
    best = med[best_name]
    print(f"-- {exp}: makespan, median of {len(times[exp + '/plain'])} (ratio to the best without allot, {best_name})")
    for name, m in med.items():
        print(f"   {name:22s} {m:7.2f} s   {m / best:5.2f}x")
PY
