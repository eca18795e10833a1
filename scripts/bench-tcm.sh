#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
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
rounds=$((150 * scale))
nested_rounds=$((80 * scale))
ncpu=$(nproc)
# shellcheck source=lib/tcm-ways.sh
source scripts/lib/tcm-ways.sh
tcm_ways "$bin" "$rounds" "$nested_rounds" "$ncpu" "$A run" "env TCM_ENABLE=1 LD_LIBRARY_PATH=$intel_tcm"
echo "== oneTBB $(basename "$(readlink -f "$rt/lib/libtbb.so.12")"), Intel OpenMP, $ncpu CPUs, $reps runs each, interleaved =="
for _ in $(seq "$reps"); do
  for k in "${TCM_ORDER[@]}"; do
    t0=$(date +%s.%N)
    timeout 300 bash -c "${TCM_HOW[$k]}" >/dev/null 2>"$dir/err" || { echo "$k failed:"; cat "$dir/err"; exit 1; }
    t1=$(date +%s.%N)
    echo "$k $(echo "$t1 - $t0" | bc)" >>"$dir/times"
    printf '.'
  done
done
echo
tcm_summary "$dir/times"
