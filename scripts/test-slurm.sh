#!/usr/bin/env bash
# Live test of allot under Slurm (docs/slurm.md): a one-node cluster of
# this test's own processes (scripts/lib/slurm-cluster.sh: munged,
# slurmctld, slurmd, an allot broker, the SPANK plugin), jobs submitted
# with sbatch and srun, and checks that
#   - the step-to-cell mapping is right (a C unit test, then live: default,
#     --oversubscribe and --exclusive jobs);
#   - every task runs in its job's cell (`slurm-JOB`: the batch step and
#     the sruns inside it share it), `scontrol listpids` and `allot status`
#     agree on which step runs in which cell, and a cell ends with its job;
#   - a step gets `allot run`'s environment (grant page, shim);
#   - an oversubscribed job that ends hands its CPU to the one still
#     running;
#   - another user's job (nobody) gets a cell too;
#   - --allot=off and a broker that is down run the job plain, and it
#     succeeds.
# Needs root and Debian's slurmctld, slurmd, slurm-client, munge and
# libslurm-dev (scripts/deps.sh installs them). Removes everything it
# started, also when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  if [ -n "${ALLOT_STRICT_TESTS:-}" ]; then
    echo "test-slurm: needs root (slurmd starts job steps as their users)" >&2
    exit 1
  fi
  echo "test-slurm: skipped: needs root (CI runs it: ALLOT_STRICT_TESTS=1)"
  exit 0
fi
source scripts/lib/slurm-cluster.sh

fail() {
  echo "FAIL: $*" >&2
  echo "--- allot status" >&2; "$A" status >&2 || true
  echo "--- squeue" >&2; squeue >&2 || true
  for f in "$cluster"/slurmd.log "$cluster"/broker.log; do
    echo "--- $f" >&2; tail -n 25 "$f" >&2 || true
  done
  exit 1
}
ok() { echo "ok - $*"; }

echo "==> the step-to-cell mapping (slurm/test_step_spec.c)"
tmp_test=$(mktemp)
# the mapping needs only allot.h
gcc -O2 -Wall -Wextra -Werror -I slurm -I crates/capi/include -o "$tmp_test" slurm/test_step_spec.c
"$tmp_test"
rm -f "$tmp_test"

echo "==> a one-node cluster with the plugin"
slurm_cluster_start
"$A" daemon --check-config --config dist/slurm/allotd.toml --socket "$cluster/check.sock" >/dev/null ||
  fail "dist/slurm/allotd.toml does not pass --check-config"
ok "dist/slurm/allotd.toml passes allot daemon --check-config"

json() { "$A" status --json; }
# The spec of the cell named $1, as "min max weight exclusive", or nothing.
spec_of() {
  json | python3 -c '
import json, sys
for c in json.load(sys.stdin)["cells"]:
    if c["name"] == sys.argv[1]:
        s = c["spec"]
        print(s["min"], s["max"], s["weight"], int(s["exclusive"]))' "$1"
}
# The cells whose names start with "slurm-".
slurm_cells() {
  json | python3 -c '
import json, sys
print(" ".join(sorted(c["name"] for c in json.load(sys.stdin)["cells"] if c["name"].startswith("slurm-"))))'
}
# The name of the cell process $1 runs in (from its cpuset cgroup).
cell_of() {
  local id
  id=$(sed -n "s|^[0-9]*:cpuset:/$slurm_cg/cell-\([0-9]*\)$|\1|p" "/proc/$1/cgroup" 2>/dev/null)
  [ -n "$id" ] || { echo "-"; return; }
  json | python3 -c '
import json, sys
names = {c["id"]: c["name"] for c in json.load(sys.stdin)["cells"]}
print(names.get(int(sys.argv[1]), "-"))' "$id"
}
running() { [ "$(squeue -h -j "$1" -o %T 2>/dev/null)" = RUNNING ]; }
has_cell() { [ -n "$(spec_of "$1")" ]; }
submit() { sbatch --parsable -o "$cluster/jobs/%j.out" "$@"; }

echo "==> a step runs in its cell with allot run's environment"
out=$(srun -c 1 sh -c 'echo "cell=$ALLOT_CELL fd=$ALLOT_GRANT_FD omp=$OMP_NUM_THREADS preload=$LD_PRELOAD"; echo "tcm=$TCM_ENABLE ld=$LD_LIBRARY_PATH"; sed -n "s/^[0-9]*:cpuset://p" /proc/self/cgroup; [ -e "/proc/self/fd/$ALLOT_GRANT_FD" ] && echo page-open; [ -n "$ALLOT_TCM_FD" ] && [ -e "/proc/self/fd/$ALLOT_TCM_FD" ] && echo table-open')
echo "$out"
cell=$(echo "$out" | sed -n 's/^cell=\([0-9][0-9]*\) .*/\1/p')
[ -n "$cell" ] || fail "the step had no ALLOT_CELL"
echo "$out" | grep -qx "/$slurm_cg/cell-$cell" || fail "the step's task was not in cell $cell's cpuset"
echo "$out" | grep -q "preload=$cluster/lib/allot/liballot_shim.so" || fail "no shim preloaded"
echo "$out" | grep -qx page-open || fail "the grant page descriptor was not inherited"
echo "$out" | grep -q "^tcm=1 ld=$cluster/lib/allot/tcm" || fail "no thread composability manager for the step"
echo "$out" | grep -qx table-open || fail "the permit table descriptor was not inherited"
grep -q "allot: [0-9]*.0 runs in cell $cell (slurm-[0-9]*:" "$cluster/slurmd.log" || fail "slurmd's log does not say which cell"
ok "srun step in cell $cell, page inherited, shim preloaded, TCM offered"
out=$(srun -n 2 -c 1 sh -c 'echo "task $SLURM_PROCID cell=$ALLOT_CELL $(sed -n "s/^[0-9]*:cpuset://p" /proc/self/cgroup)"' | sort)
echo "$out"
[ "$(echo "$out" | wc -l)" -eq 2 ] || fail "srun -n 2 ran $(echo "$out" | wc -l) tasks"
cells=$(echo "$out" | sed -n 's/^task [01] cell=\([0-9]*\) .*/\1/p' | sort -u)
[ "$(echo "$cells" | wc -l)" -eq 1 ] && [ -n "$cells" ] || fail "the two tasks of one step are in cells '$cells'"
[ "$(echo "$out" | grep -c "/$slurm_cg/cell-$cells\$")" -eq 2 ] || fail "not both tasks are in cell $cells's cpuset"
ok "both tasks of srun -n 2 in one cell ($cells)"

echo "==> the job's request becomes its cell's spec; its steps share the cell; Slurm and allot agree"
dflt=$(submit -c 1 --wrap 'srun sleep 60')
over=$(submit -c 1 --wrap 'sleep 60')
slurm_wait_for 20 "both jobs running" sh -c "[ \"\$(squeue -h -t R | wc -l)\" -eq 2 ]"
slurm_wait_for 20 "step $dflt.0 joining its job's cell" grep -q "allot: $dflt.0 runs in its job's cell" "$cluster/slurmd.log"
slurm_wait_for 20 "the cell of job $over" has_cell "slurm-$over"
[ "$(spec_of "slurm-$dflt")" = "1 0 1 0" ] || fail "default job: spec $(spec_of "slurm-$dflt"), want min 1 max 0 weight 1"
[ "$(spec_of "slurm-$over")" = "1 0 1 0" ] || fail "default job: spec $(spec_of "slurm-$over"), want min 1 max 0 weight 1"
[ "$(slurm_cells)" = "slurm-$dflt slurm-$over" ] || fail "cells $(slurm_cells), want one per job"
ok "jobs of their own CPUs: guaranteed them (min 1, weight 1), may borrow idle ones; step $dflt.0 in its job's cell"
checked=0
for j in $dflt $over; do
  while read -r pid _ step _; do
    [ -d "/proc/$pid" ] || continue
    got=$(cell_of "$pid")
    [ "$got" = "slurm-$j" ] || fail "pid $pid of step $j.$step (scontrol listpids) is in cell $got, not slurm-$j"
    checked=$((checked + 1))
  done < <(scontrol listpids "$j" | tail -n +2)
done
[ "$checked" -ge 3 ] || fail "scontrol listpids listed $checked processes, expected at least 3"
ok "$checked processes: scontrol listpids and allot status agree on every step's cell"
scancel "$dflt" "$over"
slurm_wait_for 15 "the cells ending with their jobs" sh -c "[ -z \"\$('$A' status --json | grep -o '\"slurm-[0-9]*\"')\" ]"
slurm_wait_for 15 "the epilog removing the jobs' tickets" sh -c "[ ! -e '$cluster/tickets/job-$dflt' ] && [ ! -e '$cluster/tickets/job-$over' ]"
ok "cells end with their jobs; the epilog removes the tickets"

excl=$(submit --exclusive --wrap 'sleep 60')
slurm_wait_for 20 "the exclusive job's cell" has_cell "slurm-$excl"
n=$(nproc)
[ "$(spec_of "slurm-$excl")" = "$n $n $n 1" ] || fail "exclusive job: spec $(spec_of "slurm-$excl"), want $n $n $n 1"
ok "--exclusive: an exclusive cell of the node's $n CPUs"
scancel "$excl"
slurm_wait_for 15 "the exclusive cell ending" sh -c "! '$A' status --json | grep -q '\"slurm-$excl\"'"

echo "==> a job that ends hands its CPUs to the one still running"
short=$(submit -c 2 --oversubscribe --wrap 'timeout 4 sh -c "while :; do :; done"; true')
long=$(submit -c 2 --oversubscribe --wrap 'timeout 60 sh -c "while :; do :; done"; true')
slurm_wait_for 20 "both busy jobs' cells" sh -c \
  "'$A' status --json | grep -q '\"slurm-$short\"' && '$A' status --json | grep -q '\"slurm-$long\"'"
# Cell $1's grant as "CPUs team taken": how many CPUs it may run on, its
# team (the grant's threads) and how many of its CPUs the broker leaves
# to work outside every cell (the team is that much smaller). Outside
# work is the machine's, not the test's, so the team is judged as the
# broker sized it: its CPUs less what it leaves.
grant_of() {
  json | python3 -c '
import json, sys
for c in json.load(sys.stdin)["cells"]:
    if c["name"] == sys.argv[1]:
        o = c.get("outside") or {}
        print(len([x for r in c["cpus"].split(",") if r for x in range(int(r.split("-")[0]), int(r.split("-")[-1]) + 1)]), c["threads"], o.get("taken", 0))' "$1"
}
# Whether cell $1 runs on $2 CPUs with the team the broker sizes for them.
sized() {
  local cpus team taken
  read -r cpus team taken < <(grant_of "$1")
  [ "${cpus:-0}" = "$2" ] && [ "$team" = $((cpus - taken > 1 ? cpus - taken : 1)) ]
}
[ "$(spec_of "slurm-$long")" = "0 0 $n 0" ] || fail "oversubscribed job: spec $(spec_of "slurm-$long"), want min 0 max 0 weight $n"
ok "--oversubscribe: best effort, weight $n"
sleep 1.5
both=$(grant_of "slurm-$long")
sized "slurm-$long" $((n / 2)) || fail "while both run, $long has (CPUs team taken) $both, want $((n / 2)) CPUs"
slurm_wait_for 20 "the short job ending" sh -c "! squeue -h -j $short | grep -q ."
deadline=$((SECONDS + 5))
until sized "slurm-$long" "$n"; do
  ((SECONDS < deadline)) ||
    fail "5 s after job $short ended, job $long has (CPUs team taken) $(grant_of "slurm-$long"), want $n CPUs"
  sleep 0.1
done
ok "job $long: (CPUs team taken) $both beside job $short, $(grant_of "slurm-$long") once it ended"
scancel "$long"

echo "==> another user's job gets a cell too"
nob=$(setpriv --reuid=nobody --regid=nogroup --clear-groups \
  sbatch --parsable --chdir="$cluster/jobs" -o "$cluster/jobs/%j.out" \
  --wrap 'echo "uid=$(id -u) cell=$ALLOT_CELL"; sed -n "s/^[0-9]*:cpuset://p" /proc/self/cgroup')
slurm_wait_for 30 "nobody's job finishing" sh -c "! squeue -h -j $nob | grep -q . && [ -s '$cluster/jobs/$nob.out' ]"
cat "$cluster/jobs/$nob.out"
grep -q "^uid=$(id -u nobody) cell=[0-9]" "$cluster/jobs/$nob.out" || fail "nobody's job had no cell"
grep -q "^/$slurm_cg/cell-" "$cluster/jobs/$nob.out" || fail "nobody's job ran outside allot's cells"
ok "a job of nobody ran in a cell"

echo "==> --allot=off and a broker that is down: the job runs plain and succeeds"
out=$(srun --allot=off sh -c 'echo "cell=${ALLOT_CELL:-none}"')
[ "$out" = "cell=none" ] || fail "--allot=off: $out"
ok "--allot=off: no cell"
kill "$slurm_broker"
wait "$slurm_broker" 2>/dev/null || true
slurm_broker=""
out=$(srun -c 1 sh -c 'echo "plain cell=${ALLOT_CELL:-none}"')
[ "$out" = "plain cell=none" ] || fail "without a broker: $out"
grep -q "runs without allot" "$cluster/slurmd.log" || fail "slurmd's log does not say why the step ran plain"
ok "without a broker the step ran plain; slurmd's log: $(grep 'the step runs without allot' "$cluster/slurmd.log" | tail -1 | sed 's/.*error: //')"

echo "==> with Slurm's own cgroups (task/cgroup on v1): Slurm keeps memory, allot the CPUs"
slurm_cluster_stop
SLURM_TASK=cgroup1 slurm_cluster_start
# The task reads its own cgroups (Slurm removes a step's when it ends).
out=$(srun --mem=200 -c 1 sh -c '
  echo "cell=$ALLOT_CELL"; cat /proc/self/cgroup
  d=/sys/fs/cgroup/memory$(sed -n "s/^[0-9]*:memory://p" /proc/self/cgroup)
  while [ "$d" != /sys/fs/cgroup/memory ]; do echo "limit $(cat "$d/memory.limit_in_bytes") $d"; d=$(dirname "$d"); done')
echo "$out" | grep -E "cell=|:memory:|:cpuset:|^limit"
mem=$(echo "$out" | sed -n 's/^[0-9]*:memory://p')
case "$mem" in /slurm*) ;; *) fail "the task is not in Slurm's memory cgroup: $mem" ;; esac
echo "$out" | grep -q "^[0-9]*:cpuset:/$slurm_cg/cell-" || fail "the task is not in allot's cpuset cell"
limit=$(echo "$out" | sed -n "s|^limit $((200 * 1024 * 1024)) /sys/fs/cgroup/memory||p" | head -1)
[ -n "$limit" ] || fail "no cgroup above the task holds Slurm's 200 MiB limit"
ok "the task ran in allot's cell and under Slurm's 200 MiB limit ($limit)"

echo "==> all Slurm checks passed"
