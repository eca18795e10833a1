#!/usr/bin/env bash
# shellcheck disable=SC2317 # the clean-up runs from the EXIT trap
# bench-16cpu.sh: allot against the usual ways of sharing a machine, on a
# many-CPU machine with a pure cgroup v2 hierarchy, in under 8 minutes.
#
# Made for a borrowed machine that has this working tree, a stripped
# `allot` binary with `allot-lab` beside it (`allot bench launch` hands
# over to it), gcc (with OpenMP), python3 (numpy optional) and root, but
# no Rust toolchain and no network. Build here, carry target/allot-stripped
# and target/allot-lab (and target/v2-tests, optional) with the tree:
#
#   cargo build --release -p allot-cli
#   strip -o target/allot-stripped target/release/allot
#   strip -o target/allot-lab target/release/allot-lab
#   bash scripts/bench-16cpu.sh --build-tests target/v2-tests    # optional, needs cargo
#
# and run there, as root:
#
#   bash scripts/bench-16cpu.sh --allot target/allot-stripped --out bench-out/16cpu \
#        [--tests target/v2-tests]
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
#   unequal  min(4, C) programs, one 4x longer: split vs allot
#   arrival  min(4, C) programs started 1 s apart: split vs allot
#   numpy    4 numpy programs multiplying 128x128 matrices: allot run vs
#            OPENBLAS_NUM_THREADS=1 each (skipped without numpy)
#   bind     4 programs with OMP_PROC_BIND=true under allot run: any deaths
#   launch   `allot bench launch --runs 100 --burst 8`, then spaced apart
#            (`--runs 30 --gap 300`), on cgroup2 and affinity where cgroup2
#            has a cpuset controller (else every backend available)
#   tests    the cgroup v2 live tests, from pre-built test binaries (--tests)
#   cleanup  the broker removes its cgroups when stopped
#
# Every run is printed as it ends; a summary table follows. Results (at most
# 8 files) go to --out: console.log, runs.csv, summary.txt, machine.txt,
# launch.txt, tests.txt, broker.log, timelines.txt. Exit status 0 unless something broke:
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
LIMIT_EXTRA=0 # seconds added to every batch's time limit

usage() {
  sed -n '3,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
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
      -h|--help) usage; exit 0 ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  if [[ -n $BUILD_TESTS ]]; then
    return
  fi
  [[ -n $ALLOT ]] || die "--allot PATH is required (see --help)"
  [[ -n $OUT ]] || die "--out DIR is required (see --help)"
  [[ -x $ALLOT && -f $ALLOT ]] || die "$ALLOT is not an executable file"
  [[ -x $(dirname "$ALLOT")/allot-lab ]] ||
    die "allot-lab must sit beside $ALLOT (strip -o $(dirname "$ALLOT")/allot-lab target/release/allot-lab)"
  [[ $REPEATS =~ ^[1-9][0-9]*$ ]] || die "--repeats: want a positive integer"
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
    left+=$(remove_cgroups "allot-test-*-$p")
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
  rm -f "$OUT"/{console.log,runs.csv,summary.txt,machine.txt,launch.txt,tests.txt,broker.log,timelines.txt}
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

# -------------------------------------------------------------- one batch

WL=stencil          # stencil | blas
declare -a SCALES=() # per program: stencil scale, or blas repeats
declare -a CMD=()
AUTO_N=0
AUTO_SOCK=""
DAEMON_BACKEND=""
AUTO_BACKEND=""
BLAS_SIZE=128

# CPUs of program $1 of $2 in a static split: consecutive, C/k each.
split_cpus() {
  local i=$1 k=$2 from to j list=""
  if ((k > NCPU)); then
    echo "${CPUS[i % NCPU]}"
    return
  fi
  from=$((i * NCPU / k))
  to=$(((i + 1) * NCPU / k))
  ((to > from)) || to=$((from + 1))
  for ((j = from; j < to; j++)); do list+=${list:+,}${CPUS[j]}; done
  echo "$list"
}

# Sets CMD to program $2 of $3 (scale $4) in mode $1.
build_cmd() {
  local mode=$1 i=$2 k=$3 scale=$4 prog cpus n
  if [[ $WL == blas ]]; then
    prog=("$PY" "$repo/scripts/workloads/blas.py" "$BLAS_SIZE" "$scale")
  else
    prog=("$OMP_BIN" stencil "$scale")
  fi
  case "$mode" in
    split)
      cpus=$(split_cpus "$i" "$k")
      n=$(($(tr -cd , <<<"$cpus" | wc -c) + 1))
      CMD=(env "OMP_NUM_THREADS=$n" "OPENBLAS_NUM_THREADS=$n" taskset -c "$cpus" "${prog[@]}") ;;
    allot)
      CMD=(env "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start --name "p$i" -- "${prog[@]}") ;;
    allot-bind)
      CMD=(env OMP_PROC_BIND=true "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start
        --name "bound$i" -- "${prog[@]}") ;;
    auto)
      CMD=(env "ALLOT_SOCKET=$AUTO_SOCK" "ALLOT_CGROUP_NAME=$tag-a$AUTO_N")
      [[ $BACKEND != auto ]] && CMD+=("ALLOT_BACKEND=$BACKEND")
      CMD+=("$ALLOT" run --name "p$i" -- "${prog[@]}") ;;
    one) CMD=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${prog[@]}") ;;
    blas1) CMD=(env OPENBLAS_NUM_THREADS=1 "${prog[@]}") ;;
    dynamic) CMD=(env OMP_DYNAMIC=true "${prog[@]}") ;;
    passive) CMD=(env OMP_WAIT_POLICY=passive "${prog[@]}") ;;
    plain|seq) CMD=("${prog[@]}") ;;
    *) die "unknown mode $mode" ;;
  esac
}

uses_daemon() { [[ $1 == allot || $1 == allot-bind ]]; }
uses_allot() { uses_daemon "$1" || [[ $1 == auto ]]; }

# A time-out of these modes means something is wrong, not a slow baseline.
must_finish() { [[ $1 == split || $1 == plain ]] || uses_allot "$1"; }

record() { # section k mode rep makespan status load limit jobs note
  local note=${10//,/;}
  printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" \
    "${note//$'\n'/ }" >>"$OUT/runs.csv"
}

# run_batch SECTION MODE K REP LIMIT PATTERN: starts K programs (SCALES[i]
# each) in MODE, together, one after the other (seq) or 1 s apart
# (arrival); checks their exits and answers; records and prints the
# makespan. PATTERN defaults to together.
run_batch() {
  local section=$1 mode=$2 k=$3 rep=$4 limit=$5 pattern=${6:-together}
  local key="$section:$mode:$k" dir i t0 t1 rc line ans sec status note="" jobs=""
  local load1 died=0 timed=0 wrong=0 label
  label=$(printf '%-8s k=%-2s rep %s/%s %-10s' "$section" "$k" "$rep" "$REPEATS" "$mode")
  if [[ -n ${CENSORED[$key]:-} ]]; then
    record "$section" "$k" "$mode" "$rep" "" skip "" "$limit" "" "timed out in an earlier repeat"
    say "$label  skipped (hit the ${limit} s limit in an earlier repeat)"
    return
  fi
  if ! fits "$limit"; then
    skipped_for_time=$((skipped_for_time + 1))
    record "$section" "$k" "$mode" "$rep" "" skip "" "$limit" "" "time budget"
    say "$label  skipped (time budget)"
    return
  fi
  if uses_daemon "$mode" && ! daemon_alive; then
    fail "$label: the broker is gone"
    record "$section" "$k" "$mode" "$rep" "" FAIL "" "$limit" "" "broker gone"
    return
  fi
  if [[ $mode == auto ]]; then
    AUTO_N=$((AUTO_N + 1))
    AUTO_SOCK=$work/auto/$AUTO_N/allot.sock
    AUTO_SOCKS+=("$AUTO_SOCK")
  fi
  dir=$work/batch/$section-$mode-$k-$rep
  mkdir -p "$dir"
  read -r load1 _ </proc/loadavg
  PIDS=()
  local -a rcs=() pid_of=()
  local left_us
  t0=${EPOCHREALTIME/./}
  for ((i = 0; i < k; i++)); do
    if [[ $pattern == arrival ]] && ((i > 0)); then
      left_us=$((t0 + i * 1000000 - ${EPOCHREALTIME/./}))
      if ((left_us > 0)); then
        sleep "$(secs "$left_us")"
      fi
    fi
    build_cmd "$mode" "$i" "$k" "${SCALES[i]}"
    left_us=$((t0 + limit * 1000000 - ${EPOCHREALTIME/./}))
    if ((left_us < 100000)); then
      # The batch's time is up before this program's turn (seq): it
      # counts as stopped at the limit.
      rcs[i]=124
      : >"$dir/out.$i"
      : >"$dir/err.$i"
      continue
    fi
    timeout -k 2 "$(secs "$left_us")" "${CMD[@]}" >"$dir/out.$i" 2>"$dir/err.$i" </dev/null &
    pid_of[i]=$!
    PIDS+=("$!")
    if [[ $pattern == seq ]]; then
      rc=0
      wait "${pid_of[i]}" || rc=$?
      rcs[i]=$rc
      forget_pid "${pid_of[i]}"
    fi
  done
  for ((i = 0; i < k; i++)); do
    if [[ -z ${rcs[i]:-} ]]; then
      rc=0
      wait "${pid_of[i]}" || rc=$?
      rcs[i]=$rc
      forget_pid "${pid_of[i]}"
    fi
  done
  t1=${EPOCHREALTIME/./}
  PIDS=()
  if [[ $mode == auto ]]; then
    [[ -z $AUTO_BACKEND ]] && AUTO_BACKEND=$(broker_field "$AUTO_SOCK" backend)
    stop_auto_broker "$AUTO_SOCK"
  fi

  for ((i = 0; i < k; i++)); do
    line=""
    read -r line <"$dir/out.$i" || true
    ans="" sec="?"
    [[ $line =~ answer=([^[:space:]]+) ]] && ans=${BASH_REMATCH[1]}
    [[ $line =~ seconds=([^[:space:]]+) ]] && sec=${BASH_REMATCH[1]}
    jobs+=${jobs:+;}$sec
    rc=${rcs[i]}
    if ((rc == 124 || rc == 137)); then
      timed=$((timed + 1))
    elif ((rc != 0)); then
      died=$((died + 1))
      note+="p$i exit $rc: $(awk 'NF && n < 2 { printf "%s ", $0; n++ }' "$dir/err.$i") "
    elif [[ -z $ans ]]; then
      died=$((died + 1))
      note+="p$i printed no answer "
    else
      local rkey="$WL:${SCALES[i]}"
      if [[ -z ${REF[$rkey]:-} ]]; then
        REF[$rkey]=$ans
      elif [[ ${REF[$rkey]} != "$ans" ]]; then
        wrong=$((wrong + 1))
        note+="p$i answer $ans, expected ${REF[$rkey]} "
      fi
    fi
    if uses_allot "$mode" && grep -q 'unconfined' "$dir/err.$i"; then
      died=$((died + 1))
      note+="p$i ran unconfined: $(grep -m1 unconfined "$dir/err.$i") "
    elif uses_allot "$mode" && grep -q '^allot' "$dir/err.$i"; then
      note+="p$i: $(grep -m1 '^allot' "$dir/err.$i") "
    fi
  done
  if ((died || wrong)); then
    status=FAIL
  elif ((timed)); then
    status=timeout
    CENSORED[$key]=1
    note+="$timed of $k stopped at the ${limit} s limit "
  else
    status=ok
  fi
  record "$section" "$k" "$mode" "$rep" "$(secs $((t1 - t0)))" "$status" "$load1" "$limit" "$jobs" "$note"
  say "$label $(printf '%8s' "$(secs $((t1 - t0)))") s  $status  (load $load1)${note:+  $note}"
  if [[ $status == FAIL ]] || { [[ $status == timeout ]] && must_finish "$mode"; }; then
    fail "$section k=$k $mode rep $rep: $status (load $load1) ${note}"
  fi
  if uses_daemon "$mode" && ! wait_idle "$daemon_sock"; then
    fail "$section k=$k $mode rep $rep: the broker kept cells 10 s after the batch"
  fi
}

# ---------------------------------------------------------------- the steps

S=""        # stencil scale of one batch's work (calibrated)
T_ALONE=0   # seconds that work takes alone on all CPUs
BLAS_N=""   # repeats of one numpy program

calibrate() {
  local probe out secs_probe="" t try
  probe=$( ((QUICK)) && echo 0.02 || echo 0.2)
  "$OMP_BIN" stencil "$probe" >/dev/null # warm-up
  # The fastest of five, spaced out: a busy neighbour can make a run many
  # times slower, never faster.
  for _ in 1 2 3 4 5; do
    sleep 0.2
    out=$(timeout 60 "$OMP_BIN" stencil "$probe") || { fail "the stencil does not run"; exit 1; }
    [[ $out =~ seconds=([^[:space:]]+) ]] || { fail "the stencil printed '$out'"; exit 1; }
    t=${BASH_REMATCH[1]}
    if [[ -z $secs_probe ]] || awk "BEGIN { exit !($t < $secs_probe) }"; then
      secs_probe=$t
    fi
  done
  S=$(calc "s = $probe * $TARGET / $secs_probe; s < 0.0002 ? 0.0002 : (s > 1000 ? 1000 : s)")
  say "calibration: stencil $probe took $secs_probe s alone; a batch's work is stencil $S" \
    "(about ${TARGET} s alone on $NCPU CPUs)"
  # The batch's work alone, with the time it really takes; rescaled (at
  # most twice) when a disturbed probe put it far from the target.
  for try in 1 2 3; do
    SCALES=("$S")
    run_batch alone plain 1 "$try" "$(ceil "10 * $TARGET + 5")"
    T_ALONE=$(awk -F, '$1 == "alone" && $6 == "ok" { print $5 }' "$OUT/runs.csv" | tail -n 1)
    if [[ -z $T_ALONE ]]; then
      fail "the calibrated stencil did not run alone"
      exit 1
    fi
    if ((try == 3)) || awk "BEGIN { r = $T_ALONE / $TARGET; exit !(r > 0.5 && r < 2) }"; then
      break
    fi
    S=$(calc "s = $S * $TARGET / $T_ALONE; s < 0.0002 ? 0.0002 : (s > 1000 ? 1000 : s)")
    say "calibration: $T_ALONE s is far from ${TARGET} s; the batch's work is now stencil $S"
  done
  if awk "BEGIN { r = $T_ALONE / $TARGET; exit !(r <= 0.5 || r >= 2) }"; then
    NOTES+=("calibration missed: a batch's work takes $T_ALONE s alone (target $TARGET s); is the machine busy?")
  fi
  echo "calibration: stencil scale $S per batch, $T_ALONE s alone on $NCPU CPUs" >>"$OUT/machine.txt"
}

# A batch's time limit, seconds: a*T + b (+ LIMIT_EXTRA), rounded up.
limit_of() { ceil "$1 * $T_ALONE + $2 + $LIMIT_EXTRA"; }

# One `allot bench launch ARGS...` under a time limit of $1 seconds, its
# output printed and appended to launch.txt.
bench_launch() {
  local lim=$1 rc=0 part
  shift
  say "== launch: allot bench launch $*"
  if ! fits "$lim"; then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  part=$work/launch.part
  # sh records the bench's pid (its brokers' cgroups are named after it).
  # shellcheck disable=SC2016 # $$ is the inner shell's
  timeout -k 5 "$lim" sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$work/launch.pid" \
    "$ALLOT" bench launch "$@" </dev/null >"$part" 2>&1 || rc=$?
  if [[ -s $work/launch.pid ]]; then
    HELPER_PIDS+=("$(cat "$work/launch.pid")")
  fi
  cat "$part"
  {
    echo "==> allot bench launch $*"
    cat "$part"
  } >>"$OUT/launch.txt"
  if ((rc != 0)); then
    fail "allot bench launch $* exited $rc"
  fi
}

# What `allot run` adds to a start and an exit: back to back with bursts,
# then spaced apart (where a cgroup move would wait for the kernel; on v2
# the program is created inside its cell instead).
step_launch() {
  local backends=()
  if v2_has_cpuset; then
    backends=(--backends "cgroup2,affinity")
  fi
  if ((QUICK)); then
    bench_launch 60 --runs 20 "${backends[@]}" --burst 4 --burst-rounds 3
    bench_launch 30 --runs 5 --gap 100 "${backends[@]}"
  else
    bench_launch 90 --runs 100 "${backends[@]}" --burst 8 --burst-rounds 10
    bench_launch 60 --runs 30 --gap 300 "${backends[@]}"
  fi
}

step_tests() {
  local bin name names=() args=() rc all=0 lim=60 out
  say "== tests: cgroup v2 live tests"
  if [[ -z $TESTS ]]; then
    say "no --tests DIR given: skipped (build them with --build-tests on the build machine)"
    echo "skipped: no --tests DIR" >"$OUT/tests.txt"
    return
  fi
  : >"$OUT/tests.txt"
  for bin in "$TESTS"/*; do
    [[ -f $bin && -x $bin ]] || continue
    name=$(basename "$bin")
    if [[ $name == cgroup2* ]]; then
      names=()
    else
      mapfile -t names < <(timeout 30 "$bin" --list --format terse 2>/dev/null |
        sed -n 's/: test$//p' | grep -E "$TESTS_FILTER" || true)
      if ((${#names[@]} == 0)); then
        say "$name: no test matches /$TESTS_FILTER/, skipped"
        continue
      fi
    fi
    if ! fits "$lim"; then
      skipped_for_time=$((skipped_for_time + 1))
      say "$name: skipped (time budget)"
      continue
    fi
    all=$((all + 1))
    args=(--test-threads=1)
    if ((${#names[@]} > 0)); then
      args+=(--exact "${names[@]}")
    fi
    rc=0
    # shellcheck disable=SC2016 # $$ is the inner shell's (the test's pid)
    out=$(cd "$work/tmp" && ALLOT_STRICT_TESTS=1 timeout -k 5 "$lim" \
      sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$work/test.pid" \
      "$bin" "${args[@]}" 2>&1 </dev/null) || rc=$?
    [[ -s $work/test.pid ]] && HELPER_PIDS+=("$(cat "$work/test.pid")")
    {
      echo "==> $name ${names[*]:-(all tests)}"
      printf '%s\n' "$out"
      echo "exit $rc"
    } >>"$OUT/tests.txt"
    say "$name: $(grep -E '^test result' <<<"$out" | tail -n 1 || true) (exit $rc)"
    grep -E '^test .* FAILED$|^skipped:' <<<"$out" || true
    if ((rc != 0)); then
      fail "test binary $name exited $rc (see tests.txt)"
    fi
  done
  ((all > 0)) || say "no test binary in $TESTS"
}

step_bind() {
  local k=4 rep lim i
  say "== bind: $k programs with OMP_PROC_BIND=true under allot run"
  lim=$(limit_of 5 3)
  SCALES=()
  for ((i = 0; i < k; i++)); do SCALES+=("$(calc "$S / $k")"); done
  for ((rep = 1; rep <= REPEATS; rep++)); do
    run_batch bind allot-bind "$k" "$rep" "$lim"
  done
}

# Where the time goes: k programs started together under `allot run
# --timeline` (the broker's steps per cell: admission, cgroup and cpuset
# writes with what each took, grants, joins, exits; and each run's own),
# saved whole to timelines.txt; the cpuset and join costs are summarized.
step_timeline() {
  local k=4 lim i pids=() out
  ((k > NCPU)) && k=$NCPU
  say "== timeline: $k programs started together under allot run --timeline"
  lim=$(limit_of 2 3)
  if ! fits "$lim"; then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  for ((i = 0; i < k; i++)); do
    timeout -k 5 "$lim" env "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start --timeline \
      --name "t$i" -- "$OMP_BIN" stencil "$(calc "$S / $k")" \
      </dev/null >/dev/null 2>"$work/timeline.$i" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[i]}" || fail "timeline program $i exited $?"
    cat "$work/timeline.$i" >>"$OUT/timelines.txt"
  done
  out=$(cat "$work"/timeline.*)
  say "$(grep -E 'program started' <<<"$out" | awk '{ print "  program started at " $1 " ms" }')"
  say "$(grep -E '\[broker\] (cpuset|joined).* ms\)$' <<<"$out" |
    sed -E 's/.*\[broker\] ([a-z]+).*\(([0-9.]+) ms\).*/\1 \2/' |
    awk '{ n[$1]++; t[$1] += $2; if ($2 > m[$1]) m[$1] = $2 }
      END { for (s in n) printf "  %s: %d steps, mean %.3f ms, max %.3f ms\n", s, n[s], t[s] / n[s], m[s] }')"
}

step_numpy() {
  local k=4 rep out per mode lim i
  say "== numpy: $k programs multiplying ${BLAS_SIZE}x${BLAS_SIZE} matrices"
  if [[ -z $PY ]]; then
    say "no python3 with numpy here: skipped"
    record numpy "$k" - - "" skip "" "" "" "no numpy"
    return
  fi
  out=$(OPENBLAS_NUM_THREADS=1 timeout 60 "$PY" "$repo/scripts/workloads/blas.py" "$BLAS_SIZE" 200) ||
    { fail "scripts/workloads/blas.py does not run"; return; }
  [[ $out =~ seconds=([^[:space:]]+) ]] && per=${BASH_REMATCH[1]}
  BLAS_N=$(awk "BEGIN { n = int(($TARGET * 0.75) / ($per / 200)); print (n < 10) ? 10 : n }")
  say "numpy: 200 products took $per s on one thread; each program does $BLAS_N"
  lim=$(ceil "$TARGET * 3 * ($k > $NCPU ? $k / $NCPU : 1) + 5 + $LIMIT_EXTRA")
  WL=blas
  SCALES=()
  for ((i = 0; i < k; i++)); do SCALES+=("$BLAS_N"); done
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for mode in $( ((rep % 2)) && echo "blas1 allot" || echo "allot blas1"); do
      run_batch numpy "$mode" "$k" "$rep" "$lim"
    done
  done
  WL=stencil
}

step_unequal() {
  local k rep mode lim short i
  k=$((NCPU < 4 ? NCPU : 4))
  ((k >= 2)) || { say "unequal: needs 2 CPUs, skipped"; return; }
  short=$(calc "$S / ($k + 3)")
  say "== unequal: $k programs, one 4x longer (stencil $(calc "4 * $short") and $((k - 1)) x $short)"
  SCALES=("$(calc "4 * $short")")
  for ((i = 1; i < k; i++)); do SCALES+=("$short"); done
  lim=$(limit_of 5 3)
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for mode in $( ((rep % 2)) && echo "split allot" || echo "allot split"); do
      run_batch unequal "$mode" "$k" "$rep" "$lim"
    done
  done
}

step_arrival() {
  local k rep mode lim i
  k=$((NCPU < 4 ? NCPU : 4))
  ((k >= 2)) || { say "arrival: needs 2 CPUs, skipped"; return; }
  say "== arrival: $k programs (stencil $(calc "$S / 2") each) started 1 s apart"
  SCALES=()
  for ((i = 0; i < k; i++)); do SCALES+=("$(calc "$S / 2")"); done
  lim=$(limit_of 5 "$k + 3")
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for mode in $( ((rep % 2)) && echo "split allot" || echo "allot split"); do
      run_batch arrival "$mode" "$k" "$rep" "$lim" arrival
    done
  done
}

SWEEP_MODES=(split allot auto one dynamic passive seq)

step_sweep() {
  local ks=() k rep m j mode lim i
  for k in 2 4 8 16; do
    if ((k <= NCPU)); then
      ks+=("$k")
    fi
  done
  if ((${#ks[@]} == 0)); then
    say "sweep: needs 2 CPUs, skipped"
    return
  fi
  say "== sweep: k identical stencil programs (stencil $S / k each) at k = ${ks[*]}"
  for k in "${ks[@]}"; do
    SCALES=()
    for ((i = 0; i < k; i++)); do SCALES+=("$(calc "$S / $k")"); done
    for ((rep = 1; rep <= REPEATS; rep++)); do
      # Modes interleaved, starting one further each repeat.
      for ((j = 0; j < ${#SWEEP_MODES[@]}; j++)); do
        m=$(((j + rep - 1) % ${#SWEEP_MODES[@]}))
        mode=${SWEEP_MODES[m]}
        case "$mode" in
          one) lim=$(ceil "1.5 * $T_ALONE * $NCPU / $k + 3 + $LIMIT_EXTRA") ;;
          seq) lim=$(limit_of 3 "$k * 0.2 + 3") ;;
          *) lim=$(limit_of 5 3) ;;
        esac
        if [[ $mode == seq ]]; then
          run_batch sweep "$mode" "$k" "$rep" "$lim" seq
        else
          run_batch sweep "$mode" "$k" "$rep" "$lim"
        fi
      done
    done
  done
}

# The broker stopped with no cell must remove every cgroup it made.
step_stop_broker() {
  local left
  say "== cleanup: stopping the broker"
  stop_pid "$daemon_pid" 5
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
  left=$(remove_cgroups "$tag-*")
  if [[ -n $left ]]; then
    fail "cgroups left behind by the brokers (removed now): $left"
    record cleanup - broker - "" FAIL "" "" "" "left: $left"
  else
    say "the brokers left no cgroup behind"
    record cleanup - broker - "" ok "" "" "" ""
  fi
}

# ------------------------------------------------------------------ summary

summarize() {
  local sweep_modes=${SWEEP_MODES[*]}
  {
    echo
    echo "== summary ($(elapsed) s; $NCPU CPUs; broker backend: $DAEMON_BACKEND," \
      "autostarted: ${AUTO_BACKEND:-?}; batch work: stencil $S, $T_ALONE s alone)"
    echo "makespans in seconds, median of the repeats [n]; '>=': a repeat hit the time limit"
    echo "(a ratio marked '<=' or '>=' is a bound, '~' has both sides bounded)"
    echo "ratio: median / median of allot (above 1: allot was faster)"
    awk -F, -v sweep="$sweep_modes" '
      function median(list,   v, n, i, j, x) {
        n = split(list, v, " ")
        for (i = 2; i <= n; i++) {
          x = v[i] + 0
          for (j = i - 1; j >= 1 && v[j] + 0 > x; j--) v[j + 1] = v[j]
          v[j + 1] = x
        }
        return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      }
      function cell(key) {
        if (!(key in vals)) return sprintf("%12s", "-")
        return sprintf("%12s", (cens[key] ? ">=" : "") sprintf("%.2f", median(vals[key])) " [" cnt[key] "]")
      }
      function ratio(key, base,   mark) {
        if (!(key in vals) || !(base in vals)) return sprintf("%9s", "-")
        # A censored median is a lower bound: so is a ratio over it, and
        # one under it is an upper bound.
        mark = cens[key] ? (cens[base] ? "~" : ">=") : (cens[base] ? "<=" : "")
        return sprintf("%9s", mark sprintf("%.2f", median(vals[key]) / median(vals[base])))
      }
      function table(sec, modes, title,   m, nm, i, k, line, ratios) {
        if (!(sec in secs)) return
        nm = split(modes, m, " ")
        ratios = (" " modes " " ~ / allot /) && nm > 1
        print ""
        print title
        line = sprintf("%4s", "k")
        for (i = 1; i <= nm; i++) line = line sprintf("%12s", m[i])
        if (ratios) {
          line = line "  | ratio:"
          for (i = 1; i <= nm; i++) if (m[i] != "allot") line = line sprintf("%9s", m[i])
        }
        print line
        for (k = 1; k <= 1024; k++) {
          if (!((sec, k) in ks)) continue
          line = sprintf("%4d", k)
          for (i = 1; i <= nm; i++) line = line cell(sec SUBSEP k SUBSEP m[i])
          if (ratios) {
            line = line "  |       "
            for (i = 1; i <= nm; i++)
              if (m[i] != "allot") line = line ratio(sec SUBSEP k SUBSEP m[i], sec SUBSEP k SUBSEP "allot")
          }
          print line
        }
      }
      NR == 1 { next }
      $6 == "ok" || $6 == "timeout" {
        key = $1 SUBSEP $2 SUBSEP $3
        vals[key] = vals[key] " " $5
        cnt[key]++
        if ($6 == "timeout") cens[key] = 1
        secs[$1] = 1
        ks[$1, $2] = 1
      }
      $6 == "FAIL" { bad[$1] = bad[$1] + 1 }
      END {
        table("sweep", sweep, "sweep: k identical fine-grained OpenMP programs started together (medians | ratios to allot)")
        table("unequal", "split allot", "unequal: one program 4x longer than the others")
        table("arrival", "split allot", "arrival: programs started 1 s apart")
        table("numpy", "blas1 allot", "numpy: 128x128 products; blas1 = OPENBLAS_NUM_THREADS=1 each")
        table("bind", "allot-bind", "bind: OMP_PROC_BIND=true under allot run")
        print ""
        for (s in bad) print "failed runs in " s ": " bad[s]
      }' "$OUT/runs.csv"
    if [[ -s $OUT/launch.txt ]]; then
      echo
      echo "launch (allot bench launch, ms):"
      grep -E '^(==>|backend|cgroup2|cgroup1|affinity) ' "$OUT/launch.txt" || true
    fi
    if [[ -s $OUT/tests.txt ]]; then
      echo
      echo "tests:"
      grep -E '^==>|^test result|^exit|^skipped' "$OUT/tests.txt" || true
    fi
    echo
    if ((${#NOTES[@]} > 0)); then
      printf 'NOTE: %s\n' "${NOTES[@]}"
    fi
    if ((skipped_for_time)); then
      echo "NOTE: $skipped_for_time step(s) skipped to stay within the ${BUDGET} s budget"
    fi
    if ((failures)); then
      echo "FAILURES ($failures):"
      sed 's/^/  /' "$work/failures"
    else
      echo "no failures"
    fi
  } | tee "$OUT/summary.txt"
}

main() {
  parse_args "$@"
  if [[ -n $BUILD_TESTS ]]; then
    build_tests "$BUILD_TESTS"
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
  step_launch
  step_timeline
  step_tests
  step_bind
  step_numpy
  step_unequal
  step_arrival
  step_sweep
  step_stop_broker
  summarize
  say "results in $OUT ($(elapsed) s)"
  ((failures == 0)) || exit 1
}

# On one line, so that bash reads nothing after main returns.
main "$@"; exit
