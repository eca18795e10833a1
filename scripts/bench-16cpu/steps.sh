# shellcheck shell=bash
# Part of scripts/bench-16cpu.sh (sourced by it; not run alone): the measured steps (launch, timeline, tests, bind, numpy, unequal, arrival, sweep, outside, stop).
# Uses the globals and helpers the main script defines.

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
# the program is created inside its cell instead), then beside busy loops
# on every CPU but one (where the kernel may place the new program on a
# busy CPU; docs/benchmarks.md, "A launch beside a busy CPU").
step_launch() {
  local backends=() hogs=$((NCPU > 1 ? NCPU - 1 : 1))
  if v2_has_cpuset; then
    backends=(--backends "cgroup2,affinity")
  fi
  if ((QUICK)); then
    bench_launch 60 --runs 20 "${backends[@]}" --burst 4 --burst-rounds 3
    bench_launch 30 --runs 5 --gap 100 "${backends[@]}"
    bench_launch 30 --runs 20 --hogs "$hogs" "${backends[@]}"
  else
    bench_launch 90 --runs 100 "${backends[@]}" --burst 8 --burst-rounds 10
    bench_launch 60 --runs 30 --gap 300 "${backends[@]}"
    bench_launch 60 --runs 100 --hogs "$hogs" "${backends[@]}"
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

# Activation and suspension by cell size (Tessellation's Table 1; the
# same as scripts/bench-cell-size.sh): a time-triggered cell of N CPUs (3 ms
# every 10 ms) runs N spinning threads for 2 s; the probe's JSON goes to
# cells.txt, one line per size, and the medians to the console.
step_cells() {
  local n lim out
  say "== cells: time-triggered cells of 1, 2, half and all but one CPU (activation, suspension)"
  lim=$((5 + 4 * 3))
  if ! fits "$lim"; then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  for n in $(printf '%s\n' 1 2 $((NCPU / 2)) $((NCPU - 1)) | awk -v c="$NCPU" '$1 >= 1 && $1 < c' | sort -nu); do
    if ! out=$(timeout -k 5 10 env "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start --name "size-$n" \
      --cpus "$n" --period 10ms --budget 3ms -- "$ALLOT" bench probe --threads "$n" --seconds 2 </dev/null 2>>"$work/cells.err"); then
      say "  $n CPUs: the probe failed (see cells.txt)"
      cat "$work/cells.err" >>"$OUT/cells.txt"
      continue
    fi
    printf '%s\t%s\n' "$n" "$out" >>"$OUT/cells.txt"
    say "$(printf '%s' "$out" | python3 -c '
import json, sys
s = json.load(sys.stdin)
a, b, c, d = s["activation"], s["activation_all"], s["suspension"], s["suspension_spread"]
print("  %s CPUs: activation first %.1f / all %.1f us (p99 %.1f), suspension %.1f us (p99 %.1f), spread %.1f us, %d windows" % (sys.argv[1], a["p50"], b["p50"], b["p99"], c["p50"], c["p99"], d["p50"], b["n"]))' "$n")"
  done
  # The window driver's scheduling class, and why the kernel refused the
  # real-time one if it did (the broker's log says).
  local driver
  driver=$(grep -h "window driver started" "$work/daemon.log" 2>/dev/null | tail -1)
  if [[ -n $driver ]]; then
    say "  ${driver#*info: }"
    printf 'driver\t%s\n' "${driver#*info: }" >>"$OUT/cells.txt"
  fi
}

# OS noise on a partition CPU against a shared one (scripts/bench-noise.sh's
# experiment), beside C-2 CPU hogs in best-effort cells: a thread spinning
# on the clock counts the gaps in its readings (`allot bench noise`), once
# in a one-CPU partition (`allot run --partition 1`: on cgroup v2 a cpuset
# partition, `cpuset.cpus.partition`, where the kernel has it) and once in
# an ordinary cell; noise.txt has each run's JSON.
step_noise() {
  local secs=5 i kind opts line
  ((QUICK)) && secs=1
  say "== noise: a spinning thread's detours over $secs s, in a partition and shared, beside $((NCPU - 2)) hogs"
  if ! fits $((2 * secs + 10)); then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  for ((i = 0; i < NCPU - 2; i++)); do
    setsid env "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start --name "hog-$i" -- \
      sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
    PIDS+=($!)
  done
  sleep 1
  : >"$OUT/noise.txt"
  for kind in partition shared; do
    opts=()
    [[ $kind == partition ]] && opts=(--partition 1)
    # The program first says what the kernel made of its cgroup's cpuset
    # (on cgroup v2: the partition state), on stderr, into noise.txt.
    if ! line=$(timeout -k 5 $((secs + 20)) env "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start \
      --name "noise-$kind" "${opts[@]}" -- sh -c "$CGROUP_SAYS"' >&2; exec "$0" bench noise --seconds "$1"' \
      "$ALLOT" "$secs" 2>>"$OUT/noise.txt"); then
      fail "the $kind noise run failed (see noise.txt)"
      continue
    fi
    printf '%s %s\n' "$kind" "$line" >>"$OUT/noise.txt"
    say "$(printf '%s' "$line" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("  %-9s %8d detours, %6.2f %% lost, longest %.1f us, p99.9 %.1f us, p99 %.1f us" % (sys.argv[1], r["detours"], 100 * r["lost"], r["max_us"], r["p999_us"], r["p99_us"]))' "$kind")"
  done
  kill_batch
}

# A shell line that prints the cpuset and memory files of the cgroup v2
# group it runs in (nothing on a v1-only machine).
# shellcheck disable=SC2016 # expanded by the cell's shell
CGROUP_SAYS='g=/sys/fs/cgroup$(sed -n "s/^0:://p" /proc/self/cgroup); for f in cpuset.cpus.effective cpuset.cpus.partition cpuset.cpus.exclusive memory.min memory.max; do [ -r "$g/$f" ] && echo "$g/$f: $(cat "$g/$f")"; done'

# Memory capacity per cell on this machine's backend: a cell asking for a
# guarantee and a limit shows them in its own cgroup's files, and a program
# that outgrows its limit is killed inside its cell (the broker logs it)
# while the shell beside it in the same cell lives on: memory.txt.
step_memory() {
  local out rc
  say "== memory: a cell's guarantee and limit, and a program past its limit"
  if ! fits 30; then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  : >"$OUT/memory.txt"
  out=$(timeout -k 5 20 env "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start --name mem-files \
    --memory-min 64M --memory-max 256M -- sh -c "$CGROUP_SAYS" 2>&1) || true
  printf '%s\n' "$out" >>"$OUT/memory.txt"
  if [[ $out == *"memory.min: 67108864"* && $out == *"memory.max: 268435456"* ]]; then
    say "  the cell's cgroup has memory.min 64M and memory.max 256M"
  elif [[ $DAEMON_BACKEND == cgroup2 ]]; then
    fail "memory: the cell's cgroup does not show its guarantee and limit (memory.txt)"
  else
    say "  $DAEMON_BACKEND backend: no cgroup v2 memory files to show"
  fi
  rc=0
  out=$(timeout -k 5 30 env "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start --name mem-hog \
    --memory-max 64M -- sh -c 'python3 -c "b = b\"x\" * (512 << 20); print(\"survived\")"; echo "python exit $?"; sleep 2' 2>&1) || rc=$?
  printf 'hog (exit %s): %s\n' "$rc" "$out" >>"$OUT/memory.txt"
  grep -i "out of memory" "$work/daemon.log" >>"$OUT/memory.txt" 2>/dev/null || true
  if [[ $out == *"python exit 137"* ]]; then
    say "  a 512M program in a 64M cell was killed in its cell; its shell lived on" \
      "($(grep -ci "out of memory" "$work/daemon.log" 2>/dev/null || echo 0) broker log lines)"
  elif [[ $DAEMON_BACKEND == cgroup2 ]]; then
    fail "memory: a 512M program in a 64M cell was not killed (memory.txt): $out"
  else
    say "  $DAEMON_BACKEND backend: $(printf '%s' "$out" | tail -n 1)"
  fi
}

# Sets BLAS_N, the products one numpy program does (about 3/4 of the
# target's time on one thread), once; returns 1 without numpy or when
# the workload does not run.
calibrate_blas() {
  local out per
  [[ -n $PY ]] || return 1
  [[ -n $BLAS_N ]] && return 0
  out=$(OPENBLAS_NUM_THREADS=1 timeout 60 "$PY" "$repo/scripts/workloads/blas.py" "$BLAS_SIZE" 200) ||
    { fail "scripts/workloads/blas.py does not run"; return 1; }
  [[ $out =~ seconds=([^[:space:]]+) ]] && per=${BASH_REMATCH[1]}
  BLAS_N=$(awk "BEGIN { n = int(($TARGET * 0.75) / ($per / 200)); print (n < 10) ? 10 : n }")
  say "numpy: 200 products took $per s on one thread; each program does $BLAS_N"
}

# k numpy programs in section $1 (modes alternating each repeat), with
# the time limit for numpy batches scaled by $2.
run_numpy() {
  local section=$1 slow=$2 k=4 rep mode lim i
  lim=$(ceil "$slow * $TARGET * 3 * ($k > $NCPU ? $k / $NCPU : 1) + 5 + $LIMIT_EXTRA")
  WL=blas
  SCALES=()
  for ((i = 0; i < k; i++)); do SCALES+=("$BLAS_N"); done
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for mode in $( ((rep % 2)) && echo "blas1 allot" || echo "allot blas1"); do
      run_batch "$section" "$mode" "$k" "$rep" "$lim"
    done
  done
  WL=stencil
}

step_numpy() {
  say "== numpy: 4 programs multiplying ${BLAS_SIZE}x${BLAS_SIZE} matrices"
  if [[ -z $PY ]]; then
    say "no python3 with numpy here: skipped"
    record numpy 4 - - "" skip "" "" "" "no numpy"
    return
  fi
  calibrate_blas || return
  run_numpy numpy 1
}

step_unequal() {
  local k short i
  k=$((NCPU < 4 ? NCPU : 4))
  ((k >= 2)) || { say "unequal: needs 2 CPUs, skipped"; return; }
  short=$(calc "$S / ($k + 3)")
  say "== unequal: $k programs, one 4x longer (stencil $(calc "4 * $short") and $((k - 1)) x $short)"
  SCALES=("$(calc "4 * $short")")
  for ((i = 1; i < k; i++)); do SCALES+=("$short"); done
  run_modes unequal "$k" 1 "${OUTSIDE_MODES[@]}"
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
# The ways compared beside work outside allot (the sweep's, but `auto`,
# which differs from `allot` only in who starts the broker).
OUTSIDE_MODES=(split allot one dynamic passive seq)

# Runs every mode of $@ (after the section, k and how much slower than
# quiet the batch may be) for each repeat, interleaved and starting one
# further each repeat, with the time limit each kind of mode needs: one
# thread each runs the largest program (SCALES) on one CPU, or on
# C/k of one when there are more programs than CPUs.
run_modes() {
  local section=$1 k=$2 slow=$3 rep j m mode lim x largest=0
  shift 3
  local modes=("$@")
  for x in "${SCALES[@]}"; do
    largest=$(calc "($x > $largest ? $x : $largest)")
  done
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for ((j = 0; j < ${#modes[@]}; j++)); do
      m=$(((j + rep - 1) % ${#modes[@]}))
      mode=${modes[m]}
      case "$mode" in
        one) lim=$(ceil "$slow * 1.5 * $T_ALONE * $NCPU * $largest / $S * ($k > $NCPU ? $k / $NCPU : 1) + 3 + $LIMIT_EXTRA") ;;
        seq) lim=$(ceil "$slow * 3 * $T_ALONE + $k * 0.2 + 3 + $LIMIT_EXTRA") ;;
        *) lim=$(ceil "$slow * 5 * $T_ALONE + 3 + $LIMIT_EXTRA") ;;
      esac
      if [[ $mode == seq ]]; then
        run_batch "$section" "$mode" "$k" "$rep" "$lim" seq
      else
        run_batch "$section" "$mode" "$k" "$rep" "$lim"
      fi
    done
  done
}

step_sweep() {
  local ks=() k i
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
    run_modes sweep "$k" 1 "${SWEEP_MODES[@]}"
  done
}

# Work outside allot: $1 processes that each keep a CPU busy (`while :;
# do :; done`, as a browser tab or another user's job would), started by
# this script in no cell (OUTSIDE_PIDS, each in a process group of its own).
#
# They run in a cgroup of this script's own (OUTSIDE_CG, in the cpu
# hierarchy beside allot's directory) weighing $1 threads, and so do the
# programs of every way without allot while they run: there the kernel
# weighs every thread alike, as the comparison means (outside any cgroup,
# a kernel with autogroup on would weigh each terminal session's
# processes together as one). Without a cpu controller to make it in,
# they run where this script runs (noted).
declare -a OUTSIDE_PIDS=()
OUTSIDE_CG=""
start_outside() {
  local i mnt="" name=$tag-outside-$1 joined
  OUTSIDE_CG=""
  (($1 > 0)) || return 0
  mnt=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)
  if [[ -n $mnt ]] && mkdir "$mnt/$name" 2>/dev/null; then
    OUTSIDE_CG=$mnt/$name
    echo $(($1 * 1024)) >"$OUTSIDE_CG/cpu.shares"
  elif v2_has_cpu && mkdir "$(cgroup2_root)/$name" 2>/dev/null; then
    OUTSIDE_CG=$(cgroup2_root)/$name
    echo $(($1 * 100 > 10000 ? 10000 : $1 * 100)) >"$OUTSIDE_CG/cpu.weight"
  else
    NOTES+=("outside $1: no cpu cgroup for the busy processes; they and the ways without allot ran where the script runs")
  fi
  for ((i = 0; i < $1; i++)); do
    if [[ -n $OUTSIDE_CG ]]; then
      # shellcheck disable=SC2016 # expanded by the inner shell
      setsid sh -c 'echo $$ >"$1/cgroup.procs" && while :; do :; done' sh "$OUTSIDE_CG" \
        </dev/null >/dev/null 2>&1 &
    else
      setsid sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
    fi
    OUTSIDE_PIDS+=($!)
  done
  sleep 0.5
  if [[ -n $OUTSIDE_CG ]]; then
    joined=$(wc -l <"$OUTSIDE_CG/cgroup.procs")
    if ((joined != $1)); then
      fail "outside $1: $joined of $1 busy processes run in $OUTSIDE_CG"
    fi
  fi
}

stop_outside() {
  local p i
  for p in "${OUTSIDE_PIDS[@]}"; do
    kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  OUTSIDE_PIDS=()
  if [[ -n $OUTSIDE_CG ]]; then
    # A process killed a moment ago may still be leaving it.
    for ((i = 0; i < 50; i++)); do
      rmdir "$OUTSIDE_CG" 2>/dev/null && break
      sleep 0.1
    done
    [[ -d $OUTSIDE_CG ]] && NOTES+=("could not remove $OUTSIDE_CG yet; the clean-up tries again")
    OUTSIDE_CG=""
  fi
}

# The counts of busy outside processes the outside step runs beside
# (--outside, else C/4 and C/2; on 2 CPUs none, one and two: the sweep
# has no k = 4 there, so the quiet comparison comes with them).
outside_counts() {
  if [[ -n $OUTSIDE ]]; then
    tr ',' '\n' <<<"$OUTSIDE"
  elif ((NCPU <= 2)); then
    printf '0\n1\n2\n'
  else
    printf '%s\n' $((NCPU / 4)) $((NCPU / 2)) | awk '$1 >= 1' | sort -nu
  fi
}

# A machine is never allot's alone: k identical stencils (k = 4, 8, 16 of
# those <= C, and 4 on a machine of fewer CPUs), then min(4, C) programs
# of which one is 4x longer, each in every way of OUTSIDE_MODES, then
# four numpy programs (allot run against OPENBLAS_NUM_THREADS=1; where
# python3 has numpy), all beside B busy processes outside any cell.
# Sections busyB, unequal-busyB and numpy-busyB.
step_outside() {
  local ks=() k b i short
  for k in 4 8 16; do
    if ((k <= NCPU || k == 4)); then
      ks+=("$k")
    fi
  done
  for b in $(outside_counts); do
    say "== outside: beside $b busy process(es) outside any cell: k = ${ks[*]} identical stencils," \
      "then one 4x longer than the others"
    start_outside "$b"
    for k in "${ks[@]}"; do
      SCALES=()
      for ((i = 0; i < k; i++)); do SCALES+=("$(calc "$S / $k")"); done
      run_modes "busy$b" "$k" "$(calc "1 + $b / $NCPU")" "${OUTSIDE_MODES[@]}"
    done
    k=$((NCPU < 4 ? NCPU : 4))
    ((k < 2)) && k=2
    short=$(calc "$S / ($k + 3)")
    SCALES=("$(calc "4 * $short")")
    for ((i = 1; i < k; i++)); do SCALES+=("$short"); done
    run_modes "unequal-busy$b" "$k" "$(calc "1 + $b / $NCPU")" "${OUTSIDE_MODES[@]}"
    if calibrate_blas; then
      run_numpy "numpy-busy$b" "$(calc "1 + $b / $NCPU")"
    fi
    stop_outside
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
