#!/usr/bin/env bash
# Four OpenMP jobs on one Slurm node (scripts/lib/slurm-cluster.sh), with
# and without allot's plugin: two fine-grained (`stencil`, a barrier every
# ~46 µs) and two coarse (`pricing`, ~63 ms regions), of two lengths each,
# all submitted at once. Reported: the batch's makespan on the node (first
# job start to last job end, as the jobs stamp them: Slurm's own start-up
# latency, the same for every setup, is left out, the gaps between queued
# jobs are not) and each class's mean job time, medians of REPEATS runs.
#
# Usage: scripts/bench-slurm.sh [REPEATS] [SCALE] [MIX]
#   (defaults 3, 1.0 and halves). MIX sets the jobs' lengths, in SCALE
#   units (1.0: about 3 s alone on 2 CPUs):
#   halves   stencil 0.5 and 1, pricing 0.5 and 1
#   tail     stencil 0.25 and 1.5, pricing 0.5 and 1: the long
#            fine-grained job runs alone at the end
#
# Setups (each job asks for the node's CPUs, -c N):
#   plain          --oversubscribe, libgomp defaults (a team of N each)
#   one-thread     --oversubscribe, OMP_NUM_THREADS=1 (one thread a job)
#   dynamic        --oversubscribe, OMP_DYNAMIC=true (libgomp sizes teams
#                  by the load average)
#   queued         no --oversubscribe: Slurm runs one job at a time with
#                  the whole node (Slurm's own static allocation)
#   allot          --oversubscribe with the plugin: each job an allot cell
#                  (best effort, weight N), the shim caps each OpenMP team
#                  to its cell's grant, and a job that ends hands its CPUs
#                  to the ones still running
# Needs root and Debian's Slurm packages (scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
scale=${2:-1.0}
mix=${3:-halves}
case "$repeats" in '' | *[!0-9]* | 0) echo "usage: $0 [REPEATS>0] [SCALE] [halves|tail]" >&2; exit 2 ;; esac
python3 -c "import sys; s=float(sys.argv[1]); sys.exit(not 0 < s <= 100)" "$scale" 2>/dev/null ||
  { echo "$0: SCALE must be a number in (0, 100]" >&2; exit 2; }
case "$mix" in
  halves) lengths="0.5 1 0.5 1" ;;
  tail) lengths="0.25 1.5 0.5 1" ;;
  *) echo "$0: MIX must be halves or tail" >&2; exit 2 ;;
esac

export SLURM_ALLOT_PROFILE=release
source scripts/lib/slurm-cluster.sh
slurm_cluster_start

n=$(nproc)
wl="$cluster/workloads"
echo "building the workloads into $wl" >&2
"$A" workload stencil --variant omp --scale 0.01 --build-dir "$wl" >/dev/null
"$A" workload pricing --variant omp --scale 0.01 --build-dir "$wl" >/dev/null

set -- $lengths
at() { python3 -c "print(round($scale * $1, 4))"; }
jobs=("stencil $(at "$1")" "stencil $(at "$2")" "pricing $(at "$3")" "pricing $(at "$4")")

# One batch: submits the four jobs, waits for them, prints
# "makespan fine_mean coarse_mean" in seconds.
batch() { # SETUP
  local setup=$1 share=(--oversubscribe) env="" j k s ids=()
  case "$setup" in
    plain) ;;
    one-thread) env="OMP_NUM_THREADS=1" ;;
    dynamic) env="OMP_DYNAMIC=true" ;;
    queued) share=() ;;
    allot) ;;
  esac
  if [ "$setup" = allot ]; then slurm_plugin_on; else slurm_plugin_off; fi
  rm -f "$cluster"/jobs/*.out
  for j in "${jobs[@]}"; do
    set -- $j
    k=$1
    s=$2
    ids+=("$(sbatch --parsable -c "$n" "${share[@]}" -o "$cluster/jobs/%j.out" \
      --wrap "echo start \$(date +%s.%N); $env '$A' workload $k --variant omp --scale $s --build-dir '$wl'; echo end \$(date +%s.%N)")")
  done
  while [ -n "$(squeue -h -o %i 2>/dev/null)" ]; do sleep 0.1; done
  python3 - "$cluster/jobs" "${ids[@]}" <<'EOF'
import re, statistics, sys
d, ids = sys.argv[1], sys.argv[2:]
fine, coarse, starts, ends = [], [], [], []
for i in ids:
    text = open(f"{d}/{i}.out").read()
    m = re.search(r"workload=(\w+) .*seconds=([0-9.]+)", text)
    s = re.search(r"^start ([0-9.]+)", text, re.M)
    e = re.search(r"^end ([0-9.]+)", text, re.M)
    if not (m and s and e):
        sys.exit(f"job {i} printed no result line:\n{text}")
    (fine if m.group(1) == "stencil" else coarse).append(float(m.group(2)))
    starts.append(float(s.group(1)))
    ends.append(float(e.group(1)))
print(f"{max(ends) - min(starts):.2f} {statistics.mean(fine):.2f} {statistics.mean(coarse):.2f}")
EOF
}

setups=(plain one-thread dynamic queued allot)
results=$(mktemp)
for r in $(seq "$repeats"); do
  for setup in "${setups[@]}"; do
    line=$(batch "$setup")
    echo "run $r $setup: makespan, fine mean, coarse mean (s): $line" >&2
    echo "$setup $line" >>"$results"
  done
done

echo
echo "Four OpenMP jobs (-c $n each) on a $n-CPU Slurm node: ${jobs[*]}; medians of $repeats runs"
python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    setup, *vals = line.split()
    rows.setdefault(setup, []).append([float(v) for v in vals])
base = {}
print("| setup | batch makespan | fine-grained job, mean | coarse job, mean | makespan vs allot |")
print("|---|---|---|---|---|")
med = {s: [statistics.median(col) for col in zip(*v)] for s, v in rows.items()}
a = med["allot"][0]
for s, (mk, fi, co) in med.items():
    print(f"| {s} | {mk:.1f} s | {fi:.1f} s | {co:.1f} s | {mk / a:.2f}x |")
EOF
rm -f "$results"
