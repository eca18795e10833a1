#!/usr/bin/env bash
# shellcheck disable=SC2317 # the clean-up runs from the EXIT trap
# shellcheck source-path=SCRIPTDIR
# bench-16cpu.sh: allot against the usual ways of sharing a machine, on a
# many-CPU machine with a pure cgroup v2 hierarchy, in under 8 minutes
# (the optional tcm, images and sting steps add about 2.5, 2 and 1.5;
# --only runs a part).
#
# Made for a borrowed machine that has this working tree, a stripped
# `allot` binary with `allot-lab` beside it (`allot bench launch` hands
# over to it), gcc (with OpenMP), python3 (numpy optional) and root, but
# no Rust toolchain and no network. Build here, carry target/allot-stripped
# and target/allot-lab (and target/v2-tests, optional) with the tree:
#
#   cargo build --release -p allot-lab && bash scripts/build-allot.sh   # allot static, as shipped
#   strip -o target/allot-stripped target/release/allot
#   strip -o target/allot-lab target/release/allot-lab
#   bash scripts/bench-16cpu.sh --build-tests target/v2-tests    # optional, needs cargo
#   bash scripts/bench-16cpu.sh --build-tcm target/tcm-kit       # optional, needs network
#   bash scripts/bench-16cpu.sh --build-images target/images-kit # optional, needs cargo
#   bash scripts/bench-16cpu.sh --build-sting target/sting-kit   # optional, needs cargo
#
# and run there, as root:
#
#   bash scripts/bench-16cpu.sh --allot target/allot-stripped --out bench-out/16cpu \
#        [--tests target/v2-tests] [--tcm target/tcm-kit] [--images target/images-kit] \
#        [--sting target/sting-kit/sting]
#
# What it measures (makespan = wall time from the start of a batch to the
# last program's exit; medians of --repeats runs, modes interleaved, ratios
# only between runs of this one invocation):
#
#   sweep    k = 2, 4, 8, 16 (those <= the CPUs) identical fine-grained
#            OpenMP programs (crates/workloads' stencil: tens of thousands of
#            parallel regions of a few microseconds, a barrier each), the
#            same total work at every k, started together:
#              split    each `taskset -c` to its own C/k CPUs, OMP_NUM_THREADS=C/k
#              allot    `allot run` against a broker already running
#              auto     `allot run` with no broker: the first program starts one
#              one      OMP_NUM_THREADS=1 each
#              dynamic  OMP_DYNAMIC=true
#              passive  OMP_WAIT_POLICY=passive
#              seq      one after the other, libgomp defaults
#   unequal  min(4, C) programs, one 4x longer: split, allot, one, dynamic,
#            passive, seq
#   arrival  min(4, C) programs started 1 s apart: split vs allot
#   outside  beside B processes outside any cell that each keep a CPU busy
#            (B = C/4 and C/2; on 2 CPUs 0, 1 and 2; --outside), k = 4, 8, 16
#            identical stencils and the unequal mix, in the unequal step's
#            ways; the busy processes and the ways without allot run in a
#            cgroup of the script's own weighing B threads (see steps.sh)
#   numpy    4 numpy programs multiplying 128x128 matrices: allot run vs
#            OPENBLAS_NUM_THREADS=1 each (skipped without numpy)
#   bind     4 programs with OMP_PROC_BIND=true under allot run: any deaths
#   tcm      (with --tcm) a oneTBB program beside an Intel-OpenMP program, and
#            oneTBB outside OpenMP inside: plain, split, the shim, allot's
#            TCM, Intel's TCM (scripts/bench-tcm.sh's experiment): tcm.txt;
#            what allot's manager gave the nested program: tcm-trace.txt
#   images   (with --images) Poli-C's image server (Figure 10): 4 server
#            processes, fixed OpenMP team sizes 1, 2, 4, ... C against
#            fair_cores and fair_numa through the broker and fair_cores
#            without it, at 40, 70 and 100 % of capacity: images.txt
#            (scripts/bench-image-servers.sh's experiment)
#   sting    (with --sting) Sting's three programs under every policy of
#            allot's runtime (the victim orders and overflow placement
#            among them), rayon and OpenMP: sting.txt
#   cells    activation and suspension of time-triggered cells of 1, 2, C/2
#            and C-1 CPUs (Tessellation's Table 1): cells.txt
#   noise    OS noise on a one-CPU partition against a shared CPU, beside
#            C-2 hogs (scripts/bench-noise.sh's experiment), and what the
#            kernel made of each cell's cpuset: noise.txt
#   memory   a cell's memory guarantee and limit in its own cgroup, and a
#            program past its limit killed inside its cell: memory.txt
#   launch   `allot bench launch --runs 100 --burst 8`, then spaced apart
#            (`--runs 30 --gap 300`), then beside busy loops on all CPUs
#            but one (`--hogs`), on cgroup2 and affinity where cgroup2
#            has a cpuset controller (else every backend available)
#   tests    the cgroup v2 live tests, from pre-built test binaries (--tests)
#   cleanup  the broker removes its cgroups when stopped
#
# Every run is printed as it ends; a summary table follows. Results go to
# --out: console.log, runs.csv, summary.txt, machine.txt, launch.txt,
# tests.txt, broker.log, timelines.txt, cells.txt, tcm.txt, tcm-trace.txt,
# images.txt, sting.txt, noise.txt, memory.txt, stuck.txt (what programs of allot's that still ran just
# before their time limit were doing; machine.txt also says whether the
# machine has resctrl). Exit status 0 unless something broke:
# a program died or gave a wrong answer, an allot or split run hit its time
# limit, a step failed, a test failed, or cgroups were left behind. A
# baseline (one, dynamic, passive, seq) hitting its limit is a result (shown
# as ">=") and its later repeats at that k are skipped. Steps that no longer
# fit the time budget are skipped with a note.
#
# Everything it makes (temporary directory, brokers, cgroups, processes)
# goes on exit, also on failure or Ctrl-C; it signals only processes it
# started. Brokers use private sockets and cgroup names (allot-b16-PID-*),
# never a system broker.
#
# Options:
#   --allot PATH         the allot binary (required)
#   --out DIR            results directory (required)
#   --quick              tiny parameters (a smoke test: under a minute on 2 CPUs)
#   --tests DIR          directory of test binaries to run (see --build-tests)
#   --tests-filter RE    test names to run from binaries other than cgroup2*
#                        [default: cgroup2|unified|v2|run::spawn]
#   --repeats N          repeats per mode [default: 3]
#   --target SECONDS     calibrated time of one batch's work alone on all CPUs
#                        [default: 2.0; --quick: 0.3]
#   --budget SECONDS     stop starting steps after this long [default: 440; --quick: 170]
#   --backend NAME       the brokers' backend [default: auto]
#   --build-tests DIR    (on the build machine, needs cargo) build the cgroup v2
#                        test binaries, strip them into DIR and exit
#   --build-tcm DIR      (on the build machine, needs network once) put oneTBB,
#                        Intel OpenMP, Intel's TCM and the TCM workloads into DIR
#                        (about 10 MiB) and exit
#   --tcm DIR            run the tcm step with the kit in DIR
#   --build-images DIR   (on the build machine, needs cargo) put the image
#                        server, liballot and the shim into DIR and exit
#   --images DIR         run the images step with the kit in DIR
#   --build-sting DIR    (on the build machine, needs cargo) put the Sting
#                        bench's binary into DIR/sting and exit
#   --sting PATH         run the sting step with that binary
#   --outside LIST       busy outside processes for the outside step
#                        (comma-separated counts, 0 for none) [default: C/4,C/2;
#                        0,1,2 on 2 CPUs]
#   --only LIST          run only these steps (comma-separated: launch,
#                        timeline, tests, bind, tcm, images, sting, cells, noise, memory,
#                        numpy, unequal, arrival, sweep, outside)
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---------------------------------------------------------------- options

ALLOT=""
OUT=""
QUICK=0
TESTS=""
TESTS_FILTER='cgroup2|unified|v2|run::spawn'
REPEATS=3
TARGET=""
BUDGET=""
BACKEND=auto
BUILD_TESTS=""
BUILD_TCM=""
TCM_KIT=""
BUILD_IMAGES=""
IMAGES_KIT=""
BUILD_STING=""
STING=""
ONLY=""
OUTSIDE=""
LIMIT_EXTRA=0 # seconds added to every batch's time limit

usage() {
  sed -n '4,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() {
  echo "bench-16cpu: $*" >&2
  exit 2
}

parse_args() {
  while (($# > 0)); do
    case "$1" in
      --allot) ALLOT=${2:?--allot needs a path}; shift 2 ;;
      --out) OUT=${2:?--out needs a directory}; shift 2 ;;
      --quick) QUICK=1; shift ;;
      --tests) TESTS=${2:?--tests needs a directory}; shift 2 ;;
      --tests-filter) TESTS_FILTER=${2:?}; shift 2 ;;
      --repeats) REPEATS=${2:?}; shift 2 ;;
      --target) TARGET=${2:?}; shift 2 ;;
      --budget) BUDGET=${2:?}; shift 2 ;;
      --backend) BACKEND=${2:?}; shift 2 ;;
      --build-tests) BUILD_TESTS=${2:?--build-tests needs a directory}; shift 2 ;;
      --build-tcm) BUILD_TCM=${2:?--build-tcm needs a directory}; shift 2 ;;
      --tcm) TCM_KIT=${2:?--tcm needs a directory}; shift 2 ;;
      --build-images) BUILD_IMAGES=${2:?--build-images needs a directory}; shift 2 ;;
      --images) IMAGES_KIT=${2:?--images needs a directory}; shift 2 ;;
      --build-sting) BUILD_STING=${2:?--build-sting needs a directory}; shift 2 ;;
      --sting) STING=${2:?--sting needs the bench binary}; shift 2 ;;
      --only) ONLY=",${2:?--only needs a list of steps},"; shift 2 ;;
      --outside) OUTSIDE=${2:?--outside needs a list of counts}; shift 2 ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  if [[ -n $BUILD_TESTS || -n $BUILD_TCM || -n $BUILD_IMAGES || -n $BUILD_STING ]]; then
    return
  fi
  if [[ -n $TCM_KIT ]]; then
    [[ -x $TCM_KIT/bin/nested ]] || die "--tcm: $TCM_KIT has no bin/nested (build it with --build-tcm)"
    TCM_KIT=$(cd "$TCM_KIT" && pwd)
  fi
  if [[ -n $IMAGES_KIT ]]; then
    [[ -x $IMAGES_KIT/image_server && -f $IMAGES_KIT/lib/liballot.so.0 ]] ||
      die "--images: $IMAGES_KIT has no image_server and lib/liballot.so.0 (build it with --build-images)"
    IMAGES_KIT=$(cd "$IMAGES_KIT" && pwd)
  fi
  if [[ -n $STING ]]; then
    [[ -x $STING && -f $STING ]] || die "--sting: $STING is not an executable (build it with --build-sting)"
    STING=$(cd "$(dirname "$STING")" && pwd)/$(basename "$STING")
  fi
  [[ -n $ALLOT ]] || die "--allot PATH is required (see --help)"
  [[ -n $OUT ]] || die "--out DIR is required (see --help)"
  [[ -x $ALLOT && -f $ALLOT ]] || die "$ALLOT is not an executable file"
  [[ -x $(dirname "$ALLOT")/allot-lab ]] ||
    die "allot-lab must sit beside $ALLOT (strip -o $(dirname "$ALLOT")/allot-lab target/release/allot-lab)"
  [[ $REPEATS =~ ^[1-9][0-9]*$ ]] || die "--repeats: want a positive integer"
  [[ -z $OUTSIDE || $OUTSIDE =~ ^[0-9]+(,[0-9]+)*$ ]] ||
    die "--outside: want comma-separated counts, like 0,1,2 (0: none, quiet)"
  ALLOT=$(cd "$(dirname "$ALLOT")" && pwd)/$(basename "$ALLOT")
  if [[ -n $TESTS ]]; then
    [[ -d $TESTS ]] || die "--tests: $TESTS is not a directory"
    TESTS=$(cd "$TESTS" && pwd)
  fi
  if ((QUICK)); then
    # Tiny batches on a small, possibly shared machine: a program that
    # loses a CPU to someone else's work at every barrier takes many
    # times its time, which is a result there, not a hang.
    LIMIT_EXTRA=7
    TARGET=${TARGET:-0.3}
    BUDGET=${BUDGET:-170}
  else
    TARGET=${TARGET:-2.0}
    BUDGET=${BUDGET:-440}
  fi
  [[ $BUDGET =~ ^[1-9][0-9]*$ ]] || die "--budget: want whole seconds"
  [[ $TARGET =~ ^[0-9]*\.?[0-9]+$ ]] || die "--target: want seconds"
}

# ------------------------------------------------ building the test binaries

# On the build machine: the test binaries holding the live cgroup v2 paths,
# found through cargo's JSON messages, stripped into DIR under stable names.
build_tests() {
  local dir=$1 json
  command -v cargo >/dev/null || die "--build-tests needs cargo"
  mkdir -p "$dir"
  json=$(mktemp)
  # shellcheck disable=SC2064 # the name is fixed now
  trap "rm -f '$json'" EXIT
  (
    cd "$repo"
    cargo test --release -p allot-enforce --no-run --message-format=json
    cargo test --release -p allot-cli --bin allot --no-run --message-format=json
  ) >"$json"
  python3 - "$json" "$dir" <<'PY'
import json, subprocess, sys
messages, out = sys.argv[1], sys.argv[2]
# cargo target name -> name in DIR
wanted = {"cgroup2": "cgroup2", "allot_enforce": "allot_enforce-unit", "allot": "allot-cli-unit"}
found = {}
for line in open(messages):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m["profile"]["test"] or m["target"]["name"] not in wanted:
        continue
    found[wanted[m["target"]["name"]]] = m["executable"]
for name, exe in sorted(found.items()):
    subprocess.run(["strip", "-o", f"{out}/{name}", exe], check=True)
    print(f"{out}/{name}  <-  {exe}")
missing = set(wanted.values()) - set(found)
if missing:
    sys.exit(f"not built: {', '.join(sorted(missing))}")
PY
  du -sh "$dir"
}

# ------------------------------------------------------------ state, cleanup

work=""              # private temporary directory (removed on exit)
tag="allot-b16-$$"   # prefix of every cgroup name our brokers use
failures=0
skipped_for_time=0
declare -a PIDS=()        # `timeout` processes of the running batch (group leaders)
declare -a HELPER_PIDS=() # pids of bench launch / test binaries, for their cgroup names
declare -a AUTO_SOCKS=()  # sockets of brokers our programs started
declare -A REF=()         # reference answer per workload and scale
declare -A CENSORED=()    # section:mode:k that hit their time limit once
declare -a NOTES=()       # warnings for the summary
daemon_pid=""
daemon_sock=""
tee_pid=""
start_us=${EPOCHREALTIME/./}
deadline_us=0

say() { printf '%s\n' "$*"; }

fail() {
  failures=$((failures + 1))
  say "FAILED: $*"
  printf '%s\n' "$*" >>"$work/failures"
}

# Microseconds as seconds with 3 decimals.
secs() { printf '%d.%03d' $(($1 / 1000000)) $(($1 % 1000000 / 1000)); }

# Floating-point arithmetic.
calc() { awk "BEGIN { printf \"%.6g\", $1 }"; }
ceil() { awk "BEGIN { x = $1; printf \"%d\", (x == int(x)) ? x : int(x) + 1 }"; }

elapsed() { secs $((${EPOCHREALTIME/./} - start_us)); }

# Whether a step taking up to $1 seconds still fits the budget.
fits() {
  local need_us
  need_us=$(awk "BEGIN { printf \"%d\", ($1 + 5) * 1000000 }")
  ((${EPOCHREALTIME/./} + need_us <= deadline_us))
}

# Whether /proc/PID runs a command line containing $2 (a path of ours).
runs_ours() {
  local cmdline
  [[ -r /proc/$1/cmdline ]] || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
  [[ $cmdline == *"$2"* ]]
}

# Sends TERM to pid $1, then KILL if it is still there after ${2:-5} s.
stop_pid() {
  local pid=$1 wait_s=${2:-5} i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < wait_s * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# Kills the running batch: every `timeout` we started and its process group.
kill_batch() {
  local p
  for p in "${PIDS[@]}"; do
    kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
  done
  if ((${#PIDS[@]} > 0)); then
    sleep 1
    for p in "${PIDS[@]}"; do
      kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
      wait "$p" 2>/dev/null || true
    done
  fi
  PIDS=()
}

# Drops pid $1 (waited for) from PIDS, so that nothing signals it again.
forget_pid() {
  local p keep=()
  for p in "${PIDS[@]}"; do
    if [[ $p != "$1" ]]; then
      keep+=("$p")
    fi
  done
  PIDS=("${keep[@]}")
}

# The status document of the broker on socket $1 (empty if none answers).
broker_json() {
  timeout 5 "$ALLOT" status --socket "$1" --json 2>/dev/null || true
}

# The pid of the broker answering on socket $1 (none: returns 1).
broker_pid() {
  local doc
  doc=$(broker_json "$1")
  [[ $doc =~ \"pid\":\ *([0-9]+) ]] || return 1
  echo "${BASH_REMATCH[1]}"
}

# Stops the broker a program of ours started on socket $1.
stop_auto_broker() {
  local pid
  pid=$(broker_pid "$1") || return 0
  if runs_ours "$pid" "$1"; then
    stop_pid "$pid" 5
  fi
}

# Removes cgroup directories named $1 (a glob) in every hierarchy; prints
# what was there.
remove_cgroups() {
  local pattern=$1 d left=""
  shopt -s nullglob
  # shellcheck disable=SC2231 # the pattern is a glob
  for d in /sys/fs/cgroup/$pattern /sys/fs/cgroup/*/$pattern; do
    [[ -d $d ]] || continue
    left+=" $d"
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  shopt -u nullglob
  printf '%s' "${left# }"
}

# On exit, whatever the path: $1 is the command that ran last.
cleanup() {
  local rc=$? s p left d i
  trap - EXIT
  trap '' INT TERM PIPE
  set +e
  if ((rc != 0 && rc != 130 && rc != 143 && failures == 0)); then
    say "bench-16cpu: stopped by an unexpected error (exit $rc) in: $1"
  fi
  kill_batch
  stop_outside
  for s in "${AUTO_SOCKS[@]}"; do
    stop_auto_broker "$s"
  done
  if [[ -n $daemon_pid ]]; then
    stop_pid "$daemon_pid" 5
    wait "$daemon_pid" 2>/dev/null
    daemon_pid=""
  fi
  # Brokers of ours that no socket answered for (started, never came up).
  if [[ -n $work ]]; then
    for d in /proc/[0-9]*; do
      p=${d#/proc/}
      [[ $p == "$$" ]] && continue
      if runs_ours "$p" "$work/" && runs_ours "$p" " daemon "; then
        stop_pid "$p" 3
      fi
    done
  fi
  left=$(remove_cgroups "$tag-*")
  for p in "${HELPER_PIDS[@]}"; do
    left+=$(remove_cgroups "allot-bench-$p")$(remove_cgroups "allot-bench-$p-*")
    # Test cgroups: allot-test-TAG-PID-N (testkit's unique), allot-test-PID-N
    # (a test's broker).
    left+=$(remove_cgroups "allot-test-*-$p-*")$(remove_cgroups "allot-test-$p-*")
  done
  if [[ -n $left ]]; then
    say "cleanup: removed cgroups left behind: $left"
  fi
  if [[ -n $work && -d $work ]]; then
    if [[ -n $OUT && -d $OUT ]]; then
      collect_broker_logs >"$OUT/broker.log" 2>/dev/null
    fi
    rm -rf "$work"
  fi
  if [[ -n $tee_pid ]]; then
    # tee ends when the last copy of its pipe closes; bash may still hold
    # one (an exit inside a redirected function), so wait only a little.
    exec >&- 2>&-
    for ((i = 0; i < 20; i++)); do
      kill -0 "$tee_pid" 2>/dev/null || break
      sleep 0.05
    done
  fi
  exit "$rc"
}

collect_broker_logs() {
  local f
  shopt -s nullglob
  for f in "$work/daemon.log" "$work"/auto/*/broker.log; do
    printf '==> %s\n' "${f#"$work"/}"
    cat "$f"
  done
  shopt -u nullglob
}

setup() {
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  rm -f "$OUT"/{console.log,runs.csv,summary.txt,machine.txt,launch.txt,tests.txt,broker.log,timelines.txt,cells.txt,tcm.txt,tcm-trace.txt,noise.txt,memory.txt,stuck.txt}
  work=$(mktemp -d /tmp/allot-b16.XXXXXX)
  chmod 700 "$work"
  mkdir -p "$work"/{bin,batch,tmp,xdg,auto}
  chmod 700 "$work"/xdg "$work"/auto
  : >"$work/failures"
  trap 'cleanup "$BASH_COMMAND"' EXIT
  trap 'say "interrupted"; exit 130' INT
  trap 'say "terminated"; exit 143' TERM
  # tee ignores INT and TERM (a Ctrl-C reaches the whole process group), so
  # that it still prints what the clean-up says.
  exec > >(trap '' INT TERM; exec tee -a "$OUT/console.log") 2>&1
  tee_pid=$!
  deadline_us=$((start_us + BUDGET * 1000000))

  # Nothing from the caller's environment leaks into any mode: every
  # baseline runs with the runtimes' defaults plus what the mode sets.
  unset OMP_NUM_THREADS OMP_DYNAMIC OMP_WAIT_POLICY OMP_PROC_BIND OMP_PLACES \
    OMP_THREAD_LIMIT OMP_MAX_ACTIVE_LEVELS GOMP_SPINCOUNT GOMP_CPU_AFFINITY \
    OPENBLAS_NUM_THREADS MKL_NUM_THREADS BLIS_NUM_THREADS RAYON_NUM_THREADS \
    GOMAXPROCS NUMBA_NUM_THREADS NUMEXPR_MAX_THREADS LD_PRELOAD MAKEFLAGS \
    CARGO_MAKEFLAGS ALLOT_SOCKET ALLOT_CELL ALLOT_GRANT_FD ALLOT_BACKEND \
    ALLOT_CGROUP_NAME ALLOT_STRICT_TESTS ALLOT_LOG ALLOT_SHIM_DEBUG
  # Whatever allot would put in the user's runtime directory goes into ours.
  export XDG_RUNTIME_DIR=$work/xdg TMPDIR=$work/tmp

  echo "section,k,mode,rep,makespan_s,status,load1,limit_s,job_seconds,note" >"$OUT/runs.csv"
}

# ------------------------------------------------------------------ machine

declare -a CPUS=()
NCPU=0
PY=""

read_cpus() {
  local list range a b i
  list=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  IFS=, read -r -a range <<<"$list"
  for a in "${range[@]}"; do
    if [[ $a == *-* ]]; then
      b=${a#*-}
      a=${a%-*}
      for ((i = a; i <= b; i++)); do CPUS+=("$i"); done
    else
      CPUS+=("$a")
    fi
  done
  NCPU=${#CPUS[@]}
}

# A python3 that imports numpy (numpy's BLAS is what the mix measures).
find_python() {
  local p
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import numpy' 2>/dev/null; then
      PY=$(command -v "$p")
      return
    fi
  done
}

cgroup2_root() {
  awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts
}

v2_has_cpuset() {
  local root
  root=$(cgroup2_root)
  [[ -n $root ]] && grep -qw cpuset "$root/cgroup.controllers" 2>/dev/null
}

# Whether the cgroup2 root hands the cpu controller to its children.
v2_has_cpu() {
  local root
  root=$(cgroup2_root)
  [[ -n $root ]] && grep -qw cpu "$root/cgroup.subtree_control" 2>/dev/null
}

describe_machine() {
  local root
  root=$(cgroup2_root)
  {
    echo "== bench-16cpu.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "args: --target $TARGET --budget $BUDGET --repeats $REPEATS --backend $BACKEND quick=$QUICK"
    echo "revision: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)" \
      "$(git -C "$repo" status --porcelain 2>/dev/null | wc -l) changed files"
    echo "allot: $("$ALLOT" --version) ($ALLOT)"
    echo "kernel: $(uname -a)"
    echo "allowed CPUs: ${CPUS[*]} ($NCPU)"
    echo "load: $(cat /proc/loadavg)"
    echo "== lscpu"
    lscpu 2>/dev/null || true
    echo "== memory"
    head -n 3 /proc/meminfo
    echo "== cgroups"
    grep cgroup /proc/mounts || true
    echo "this process: $(tr '\n' ' ' </proc/self/cgroup)"
    if [[ -n $root ]]; then
      echo "cgroup2 root $root: controllers: $(cat "$root/cgroup.controllers" 2>/dev/null)"
      echo "  subtree_control: $(cat "$root/cgroup.subtree_control" 2>/dev/null)"
    fi
    echo "== resctrl (cache and memory bandwidth allocation; read, never mounted)"
    echo "in /proc/filesystems: $(grep -qw resctrl /proc/filesystems 2>/dev/null && echo yes || echo no)"
    echo "CPU flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(rdt_a|cat_l3|cat_l2|cdp_l3|mba|cqm_llc|cqm_occup_llc|cqm_mbm_total|cqm_mbm_local)$' | tr '\n' ' ')"
    grep resctrl /proc/mounts || echo "not mounted"
    if [[ -d /sys/fs/resctrl/info ]]; then
      (cd /sys/fs/resctrl/info && grep -r . . 2>/dev/null | head -n 40)
    fi
    echo "== allot topology"
    timeout 10 "$ALLOT" topology 2>&1 || true
    echo "== compilers and runtimes"
    gcc --version | sed -n 1p
    echo "python: ${PY:-none with numpy} $( [[ -n $PY ]] && "$PY" --version 2>&1)"
    if [[ -n $PY ]]; then
      "$PY" -c 'import numpy; print("numpy", numpy.__version__); numpy.show_config()' 2>&1 || true
    fi
  } >"$OUT/machine.txt" 2>&1
  say "machine: $NCPU CPUs, $(uname -r), cgroup2 at ${root:-none}" \
    "(cpuset there: $(v2_has_cpuset && echo yes || echo no)); details in machine.txt"
}

# --------------------------------------------------------------- workloads

OMP_BIN=""

compile_workload() {
  local src=$repo/crates/workloads/c
  OMP_BIN=$work/bin/omp-workload
  say "compiling the OpenMP workloads (crates/workloads/c, as allot-omp-workload)"
  if ! timeout 120 gcc -std=c11 -O2 -fopenmp -o "$OMP_BIN" "$src/driver_omp.c" \
    "$src"/{pricing,stencil,pipeline,anneal,cluster}.c -lm; then
    fail "gcc could not build the OpenMP workloads"
    exit 1
  fi
}

# ------------------------------------------------------------------ brokers

start_daemon() {
  local i backend=()
  daemon_sock=$work/daemon/allot.sock
  mkdir -p "$work/daemon"
  chmod 700 "$work/daemon"
  [[ $BACKEND != auto ]] && backend=(--backend "$BACKEND")
  # Exclusive cells are kernel cpuset partitions where the backend makes
  # them (cgroup v2; the broker's default). The interrupt mover
  # (`isolate`) stays off: it would change the machine's own settings.
  setsid "$ALLOT" daemon --socket "$daemon_sock" --cgroup-name "$tag-d" "${backend[@]}" \
    </dev/null >>"$work/daemon.log" 2>&1 &
  daemon_pid=$!
  for ((i = 0; i < 200; i++)); do
    if timeout 5 "$ALLOT" status --socket "$daemon_sock" >/dev/null 2>&1; then
      break
    fi
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
      fail "the broker exited at start: $(tail -n 3 "$work/daemon.log")"
      exit 1
    fi
    sleep 0.05
  done
  DAEMON_BACKEND=$(broker_field "$daemon_sock" backend)
  if [[ -z $DAEMON_BACKEND ]]; then
    fail "the broker did not answer on $daemon_sock: $(tail -n 3 "$work/daemon.log")"
    exit 1
  fi
  say "broker: pid $daemon_pid, $DAEMON_BACKEND backend, socket $daemon_sock"
  timeout 5 "$ALLOT" status --socket "$daemon_sock" >>"$OUT/machine.txt" 2>&1 || true
  if v2_has_cpuset && [[ $DAEMON_BACKEND != cgroup2 ]]; then
    fail "cgroup2 has a cpuset controller here, but the broker picked $DAEMON_BACKEND"
  fi
}

# The first string field named $2 of the status document of the broker
# on $1 (empty if none).
broker_field() {
  local doc re="\"$2\": *\"([^\"]*)\""
  doc=$(broker_json "$1")
  if [[ $doc =~ $re ]]; then
    echo "${BASH_REMATCH[1]}"
  fi
}

# Waits until the broker on $1 has no cell (the last batch's cells ended).
wait_idle() {
  local i doc
  for ((i = 0; i < 100; i++)); do
    doc=$(timeout 5 "$ALLOT" status --socket "$1" --json 2>/dev/null) || true
    if [[ $doc == *'"cells": []'* ]]; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

daemon_alive() {
  kill -0 "$daemon_pid" 2>/dev/null
}

# The batch runner, the steps and the summary, in files of their own beside
# this script.
here_16=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench-16cpu/batch.sh
source "$here_16/bench-16cpu/batch.sh"
# shellcheck source=bench-16cpu/steps.sh
source "$here_16/bench-16cpu/steps.sh"
# shellcheck source=bench-16cpu/summary.sh
source "$here_16/bench-16cpu/summary.sh"
# shellcheck source=bench-16cpu/tcm.sh
source "$here_16/bench-16cpu/tcm.sh"
# shellcheck source=lib/tcm-ways.sh
source "$here_16/lib/tcm-ways.sh"
# shellcheck source=bench-16cpu/images.sh
source "$here_16/bench-16cpu/images.sh"
# shellcheck source=lib/image-servers.sh
source "$here_16/lib/image-servers.sh"
# shellcheck source=bench-16cpu/sting.sh
source "$here_16/bench-16cpu/sting.sh"

main() {
  parse_args "$@"
  if [[ -n $BUILD_TESTS ]]; then
    build_tests "$BUILD_TESTS"
    exit 0
  fi
  if [[ -n $BUILD_TCM ]]; then
    build_tcm_kit "$BUILD_TCM"
    exit 0
  fi
  if [[ -n $BUILD_IMAGES ]]; then
    build_images_kit "$BUILD_IMAGES"
    exit 0
  fi
  if [[ -n $BUILD_STING ]]; then
    build_sting "$BUILD_STING"
    exit 0
  fi
  ((EUID == 0)) || say "note: not root; cgroup backends and the live tests need root"
  setup
  read_cpus
  find_python
  describe_machine
  compile_workload
  start_daemon
  calibrate
  local step
  for step in launch timeline tests bind tcm images sting cells noise memory numpy unequal arrival sweep outside; do
    if [[ -z $ONLY || $ONLY == *",$step,"* ]]; then
      "step_$step"
    fi
  done
  step_stop_broker
  summarize
  say "results in $OUT ($(elapsed) s)"
  ((failures == 0)) || exit 1
}

# On one line, so that bash reads nothing after main returns.
main "$@"; exit
