# shellcheck shell=bash
# Part of scripts/bench-16cpu.sh (sourced by it; not run alone): the summary table and the failures list.
# Uses the globals and helpers the main script defines.

# ------------------------------------------------------------------ summary

summarize() {
  local sweep_modes=${SWEEP_MODES[*]} outside_modes=${OUTSIDE_MODES[*]}
  {
    echo
    echo "== summary ($(elapsed) s; $NCPU CPUs; broker backend: $DAEMON_BACKEND," \
      "autostarted: ${AUTO_BACKEND:-?}; batch work: stencil $S, $T_ALONE s alone)"
    echo "makespans in seconds, median of the repeats [n]; '>=': a repeat hit the time limit"
    echo "(a ratio marked '<=' or '>=' is a bound, '~' has both sides bounded)"
    echo "ratio: median / median of allot (above 1: allot was faster)"
    awk -F, -v sweep="$sweep_modes" -v outside="$outside_modes" '
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
        table("unequal", outside, "unequal: one program 4x longer than the others")
        table("arrival", "split allot", "arrival: programs started 1 s apart")
        table("numpy", "blas1 allot", "numpy: 128x128 products; blas1 = OPENBLAS_NUM_THREADS=1 each")
        table("bind", "allot-bind", "bind: OMP_PROC_BIND=true under allot run")
        for (b = 0; b <= 1024; b++) {
          table("busy" b, outside, "outside: k identical programs beside " b " busy process(es) outside any cell")
          table("unequal-busy" b, outside, "outside: one program 4x longer, beside " b " busy process(es) outside any cell")
          table("numpy-busy" b, "blas1 allot", "outside: numpy programs (blas1 = OPENBLAS_NUM_THREADS=1 each), beside " b " busy process(es)")
        }
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
