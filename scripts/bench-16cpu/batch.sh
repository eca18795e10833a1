# shellcheck shell=bash
# Part of scripts/bench-16cpu.sh (sourced by it; not run alone): one batch of programs, started together, timed and checked.
# Uses the globals and helpers the main script defines.

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
      CMD=(env OMP_PROC_BIND=true ALLOT_SHIM_DEBUG=1 "ALLOT_SOCKET=$daemon_sock" "$ALLOT" run --no-start
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
  # Beside outside work, a program without allot runs in the outside
  # work's cgroup, where the kernel weighs every thread alike.
  if [[ -n $OUTSIDE_CG ]] && ! uses_allot "$mode"; then
    # shellcheck disable=SC2016 # expanded by the inner shell
    CMD=(sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$OUTSIDE_CG" "${CMD[@]}")
  fi
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
# Describes the processes below the `timeout` pids given (after the
# batch's label) that still run: per thread its state, wait channel, CPU
# and allowed CPUs, its kernel stack where readable; per process its
# cgroup's cpuset and freeze state. Appends to stuck.txt.
describe_stuck() {
  local label=$1 top p t g
  shift
  {
    for top in "$@"; do
      for p in $(descendants "$top"); do
        [[ -r /proc/$p/status ]] || continue
        echo "== $label: pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-160)"
        g=/sys/fs/cgroup$(sed -n 's/^0:://p' "/proc/$p/cgroup" 2>/dev/null)
        for f in cpuset.cpus.effective cgroup.freeze cgroup.events cpu.max; do
          [[ -r $g/$f ]] && echo "  $g/$f: $(tr '\n' ' ' <"$g/$f")"
        done
        for t in /proc/"$p"/task/*; do
          echo "  tid ${t##*/}: $(awk '{ print "state", $3, "cpu", $39 }' "$t/stat" 2>/dev/null)" \
            "wchan $(cat "$t/wchan" 2>/dev/null)" \
            "allowed $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$t/status" 2>/dev/null)" \
            "ctxsw $(sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' "$t/status" 2>/dev/null)" \
            "syscall $(cat "$t/syscall" 2>/dev/null)"
          if [[ -r $t/stack ]]; then
            sed 's/^/      /' "$t/stack" 2>/dev/null | head -n 6
          fi
        done
      done
    done
    echo "== $label: the broker's view"
    timeout 3 "$ALLOT" status --socket "$daemon_sock" 2>&1
  } >>"$OUT/stuck.txt" 2>&1
}

# The pid $1 and every process below it.
descendants() {
  local c
  echo "$1"
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    descendants "$c"
  done
}

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
  # A program still running a moment before the limit is described (its
  # threads' states, wait channels and CPUs, its cell's cgroup) into
  # stuck.txt, so that a hang says where it hangs.
  local watcher=""
  if uses_allot "$mode" && [[ $pattern != seq ]]; then
    (
      sleep "$(calc "$limit - 1.5")"
      describe_stuck "$section $mode k=$k rep $rep" "${pid_of[@]}"
    ) &
    watcher=$!
  fi
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
  if [[ -n $watcher ]]; then
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
  fi
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
    elif uses_allot "$mode" && grep -v ': active: cell' "$dir/err.$i" | grep -q '^allot'; then
      note+="p$i: $(grep -v ': active: cell' "$dir/err.$i" | grep -m1 '^allot') "
    fi
  done
  if ((timed)) && uses_allot "$mode"; then
    for ((i = 0; i < k; i++)); do
      if ((rcs[i] == 124 || rcs[i] == 137)); then
        echo "== $label: program $i's last words"
        tail -n 15 "$dir/err.$i"
      fi
    done >>"$OUT/stuck.txt" 2>&1
  fi
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
