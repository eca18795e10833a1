# shellcheck shell=bash
# The TCM experiment's ways of running oneTBB and Intel OpenMP, one table
# for scripts/bench-tcm.sh and the tcm step of scripts/bench-16cpu.sh.
#
#   tcm_ways BIN ROUNDS NESTED_ROUNDS NCPU RUN ITCM
#
# BIN holds the workloads (tbb_work, omp_work, nested, from scripts/tcm);
# RUN is how `allot run` is called (its options and `--` follow); ITCM is
# the prefix that turns Intel's TCM on. Fills TCM_HOW (way -> command line
# for `bash -c`) and TCM_ORDER (the ways, in the order they run).
#
# beside: a oneTBB program and an Intel-OpenMP program start together;
# nested: oneTBB loops outside, an OpenMP region in each item; a loop has
# half as many items as the machine has CPUs (8 on 16, 1 on 2), so half
# of oneTBB's threads have no item and an uncoordinated program runs
# NCPU/2 full OpenMP teams.
# shellcheck disable=SC2034 # TCM_HOW and TCM_ORDER are the caller's
tcm_ways() {
  local b=$1 rounds=$2 nested=$3 n=$4 run=$5 itcm=$6
  local half=$((n / 2))
  ((half >= 1)) || half=1
  nested="$nested $half"
  local beside="$b/tbb_work $rounds & $b/omp_work $rounds & wait"
  declare -gA TCM_HOW=(
    [beside/plain]="sh -c '$beside'"
    [beside/static-split]="sh -c 'taskset -c 0-$((half - 1)) $b/tbb_work $rounds & OMP_NUM_THREADS=$((n - half)) taskset -c $half-$((n - 1)) $b/omp_work $rounds & wait'"
    [beside/one-after-the-other]="sh -c '$b/tbb_work $rounds; $b/omp_work $rounds'"
    [beside/omp-dynamic]="OMP_DYNAMIC=true sh -c '$beside'"
    [beside/allot-shim]="$run --no-tcm -- sh -c '$beside'"
    [beside/allot-tcm]="$run -- sh -c '$beside'"
    [beside/intel-tcm]="$itcm sh -c '$beside'"
    [nested/plain]="$b/nested $nested"
    [nested/omp-1-inside]="OMP_NUM_THREADS=1 $b/nested $nested"
    [nested/omp-dynamic]="OMP_DYNAMIC=true $b/nested $nested"
    [nested/allot-shim]="$run --no-tcm -- $b/nested $nested"
    [nested/allot-tcm]="$run -- $b/nested $nested"
    [nested/intel-tcm]="$itcm $b/nested $nested"
  )
  TCM_ORDER=(beside/plain beside/static-split beside/one-after-the-other beside/omp-dynamic
    beside/allot-shim beside/allot-tcm beside/intel-tcm
    nested/plain nested/omp-1-inside nested/omp-dynamic nested/allot-shim nested/allot-tcm
    nested/intel-tcm)
}

# Prints the medians of FILE's "WAY SECONDS" lines (others are skipped)
# and each one's ratio to the best way without allot.
tcm_summary() {
  python3 - "$1" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) != 2 or "/" not in parts[0]:
        continue
    try:
        times.setdefault(parts[0], []).append(float(parts[1]))
    except ValueError:
        continue
without = {"beside": ["plain", "static-split", "one-after-the-other", "omp-dynamic"],
           "nested": ["plain", "omp-1-inside", "omp-dynamic"]}
for exp in ("beside", "nested"):
    med = {k.split("/")[1]: statistics.median(v) for k, v in times.items() if k.startswith(exp + "/")}
    base = [n for n in without[exp] if n in med]
    if not base:
        continue
    best = min(base, key=lambda n: med[n])
    runs = len(times.get(exp + "/plain", []))
    print(f"  {exp}: makespan, median of {runs} (ratio to the best without allot, {best})")
    for name, m in med.items():
        print(f"    {name:22s} {m:7.2f} s  {m / med[best]:5.2f}x")
PY
}
