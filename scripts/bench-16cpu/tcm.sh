# shellcheck shell=bash
# Sourced by bench-16cpu.sh: oneTBB and Intel OpenMP sharing the machine
# (the experiment of scripts/bench-tcm.sh) on a machine without network,
# from a kit built here.
#
# build_tcm_kit DIR (on the build machine, after scripts/intel-runtimes.sh):
# copies libtbb.so.12 and libiomp5.so into DIR/lib, Intel's libtcm (and its
# hwloc) into DIR/intel-tcm, and builds scripts/tcm/*.{c,cpp} against them
# into DIR/bin with the run path $ORIGIN/../lib (about 10 MiB in all).
#
# step_tcm (on the machine, with --tcm DIR): a oneTBB program beside an
# Intel-OpenMP program, and oneTBB outside with OpenMP inside, each plain,
# split, one after the other (beside only), OMP_DYNAMIC, OpenMP serial
# inside (nested only), under the shim alone, under allot's TCM and under
# Intel's TCM; makespans, medians of min(--repeats, 3); tcm.txt; then
# what allot's manager decided for the nested program, tcm-trace.txt.

build_tcm_kit() {
  local dir=$1 rt
  rt=$(bash "$repo/scripts/intel-runtimes.sh" | tail -n 1)
  mkdir -p "$dir/lib" "$dir/intel-tcm" "$dir/bin"
  cp -L "$rt/lib/libtbb.so.12" "$rt/lib/libiomp5.so" "$dir/lib/"
  cp -L "$repo/target/intel-tcm/lib/libtcm.so.1" "$repo/target/intel-tcm/lib/libhwloc.so.15" "$dir/intel-tcm/"
  ln -sf libtcm.so.1 "$dir/intel-tcm/libtcm.so"
  local inc="-I$rt/include" lib="-L$dir/lib -Wl,-rpath,\$ORIGIN/../lib"
  # shellcheck disable=SC2086
  {
    g++ -O2 "$repo/scripts/tcm/tbb_work.cpp" $inc $lib -l:libtbb.so.12 -o "$dir/bin/tbb_work"
    gcc -O2 -fopenmp "$repo/scripts/tcm/omp_work.c" $lib -l:libiomp5.so -o "$dir/bin/omp_work"
    g++ -O2 -fopenmp "$repo/scripts/tcm/nested.cpp" $inc $lib -l:libtbb.so.12 -l:libiomp5.so \
      -o "$dir/bin/nested"
  }
  du -sh "$dir"
}

# One configuration's makespan in seconds (or "fail").
tcm_time() { # command
  local t0 t1
  t0=$EPOCHREALTIME
  if ! timeout -k 5 120 bash -c "$1" >/dev/null 2>>"$work/tcm.err"; then
    echo fail
    return
  fi
  t1=$EPOCHREALTIME
  awk "BEGIN { printf \"%.3f\", $t1 - $t0 }"
}

step_tcm() {
  local k b n reps r rounds nested_rounds
  [[ -n $TCM_KIT ]] || return 0
  say "== tcm: oneTBB and Intel OpenMP, plain, split, the shim, allot's TCM, Intel's TCM"
  if ! fits 150; then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  b=$TCM_KIT/bin
  n=$NCPU
  # About 1 s for each program alone on all CPUs (64 tasks of ~1 ms per
  # loop; 128 ms of work per nested loop); a tenth with --quick.
  rounds=$((16 * n))
  nested_rounds=$((8 * n))
  if ((QUICK)); then
    rounds=$((rounds / 10 + 1))
    nested_rounds=$((nested_rounds / 10 + 1))
  fi
  tcm_ways "$b" "$rounds" "$nested_rounds" "$n" \
    "env ALLOT_SOCKET=$daemon_sock $ALLOT run --no-start" \
    "env TCM_ENABLE=1 LD_LIBRARY_PATH=$TCM_KIT/intel-tcm"
  reps=$((REPEATS < 3 ? REPEATS : 3))
  : >"$OUT/tcm.txt"
  for ((r = 1; r <= reps; r++)); do
    for k in "${TCM_ORDER[@]}"; do
      fits 20 || break 2
      printf '%s %s\n' "$k" "$(tcm_time "${TCM_HOW[$k]}")" >>"$OUT/tcm.txt"
    done
  done
  [[ -s $work/tcm.err ]] && say "  (errors in tcm.txt)" && { echo "-- errors"; cat "$work/tcm.err"; } >>"$OUT/tcm.txt"
  grep -q ' fail$' "$OUT/tcm.txt" && fail "a TCM configuration failed (see tcm.txt)"
  say "$(tcm_summary "$OUT/tcm.txt")"
  tcm_trace
}

# What allot's manager decided for the nested program, permit by permit
# (ALLOT_SHIM_DEBUG=1: "permit P: asked MIN..MAX, got N of BUDGET", "permit
# P: active, got N", "thread registered" ...), for the division rules'
# fixtures (crates/capi/tests/c/tcm_divide.c, tcm_nested.c): the first 3000
# lines in tcm-trace.txt, how many threads the OpenMP teams (rigid permits,
# asked for or activated again) got, and how many workers the arena was
# given.
tcm_trace() {
  fits 20 || return 0
  say "== tcm: what allot's manager gave the nested program (tcm-trace.txt)"
  timeout -k 5 60 bash -c "ALLOT_SHIM_DEBUG=1 ${TCM_HOW[nested/allot-tcm]}" 2>&1 >/dev/null |
    grep -a 'allot-tcm' | head -n 3000 >"$OUT/tcm-trace.txt" || true
  say "  $(wc -l <"$OUT/tcm-trace.txt") lines; OpenMP teams got (threads: regions):" \
    "$(sed -n -e 's/.*(rigid)[^,]*, got \([0-9]*\) of.*/\1/p' -e 's/.*: active, got \([0-9]*\)$/\1/p' \
      "$OUT/tcm-trace.txt" | sort -n | uniq -c | awk '{printf "%s: %s  ", $2, $1}')"
  say "  the arena's workers (workers: times):" \
    "$(sed -n 's/.*asked 0\.\.[0-9]* with its caller, got \([0-9]*\) of.*/\1/p' "$OUT/tcm-trace.txt" |
      sort -n | uniq -c | awk '{printf "%s: %s  ", $2, $1}')"
}
