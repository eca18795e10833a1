# shellcheck shell=bash
# Sourced by bench-16cpu.sh: Sting's evaluation (crates/runtime/benches/
# sting.rs: abisort, queens and knapsack under every policy of allot's
# runtime, against rayon and OpenMP builds of the same algorithms) on a
# machine without a Rust toolchain.
#
# build_sting DIR (on the build machine): the bench's binary, built
# release and stripped into DIR/sting.
#
# step_sting (on the machine, with --sting PATH): the binary with full
# sizes, min(--repeats, 3) timed runs per configuration (a warm-up each
# first), the OpenMP build compiled there from the tree's sting.c; the
# table goes to sting.txt: the victim orders (`victims=nearest`,
# `most-loaded`) and overflow placement against `local-lifo` and rayon
# are its rows.

build_sting() {
  local dir=$1 exe
  command -v cargo >/dev/null || die "--build-sting needs cargo"
  mkdir -p "$dir"
  exe=$(cd "$repo" && cargo bench -p allot-runtime --bench sting --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "sting":
        print(m["executable"])')
  [[ -n $exe ]] || die "cargo built no sting bench (cargo bench -p allot-runtime --bench sting --no-run)"
  strip -o "$dir/sting" "$exe"
  du -sh "$dir/sting"
}

step_sting() {
  local runs secs
  [[ -n $STING ]] || return 0
  runs=$((REPEATS < 3 ? REPEATS : 3))
  ((QUICK)) && runs=1
  # About 18 configurations x 3 programs x (runs + 1), the sequential
  # ones the longest (a quarter to half a second each at full size).
  secs=$((3 * 18 * (runs + 1) / 2 + 30))
  ((QUICK)) && secs=60
  say "== sting: abisort, queens and knapsack under every runtime policy, rayon and OpenMP (about $secs s)"
  if ! fits "$secs"; then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  local mode=(--bench)
  ((QUICK)) && mode=(--quick)
  mkdir -p "$work/sting"
  if ! ALLOT_STING_RUNS=$runs ALLOT_STING_SOURCE=$repo/crates/runtime/benches/sting/sting.c \
    ALLOT_STING_TMP=$work/sting timeout -k 5 $((secs * 3)) "$STING" "${mode[@]}" \
    >"$OUT/sting.txt" 2>"$work/sting.err"; then
    fail "the Sting programs failed (see sting.txt)"
    cat "$work/sting.err" >>"$OUT/sting.txt"
    return
  fi
  cat "$work/sting.err" >>"$OUT/sting.txt"
  sed 's/^/  /' "$OUT/sting.txt" | while IFS= read -r line; do say "$line"; done
}
