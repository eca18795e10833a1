#!/usr/bin/env bash
# Coverage-guided fuzzing of allot's decoders on the stable toolchain.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]   # each target for SECONDS (default 60)
#   bash scripts/fuzz.sh --seeds                 # rewrite the seed corpus in fuzz/corpus
#
# Targets: wire (request/reply decoder), page (grant page reader), journal
# (replay), config (the broker's TOML). libFuzzer comes from the
# libfuzzer-sys crate; the instrumentation is the set of -C flags cargo-fuzz
# passes, which stable rustc accepts (only the sanitizers need nightly, and
# the targets are safe Rust: a panic is the failure).
#
# New inputs go to target/fuzz/corpus/<target> (the committed seeds in
# fuzz/corpus/<target> are read, never written). A crash stops the run with
# a non-zero exit and leaves the input in target/fuzz/artifacts/<target>/;
# reproduce with target/fuzz/<triple>/release/<target> <file>, then add it
# as a regression test beside the decoder.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v c++ >/dev/null 2>&1 || { echo "error: libFuzzer needs a C++ compiler (apt-get install g++)" >&2; exit 1; }

triple=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=target/fuzz
flags=(
  -Cpasses=sancov-module
  -Cllvm-args=-sanitizer-coverage-level=4
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
  -Cllvm-args=-sanitizer-coverage-pc-table
  -Cllvm-args=-sanitizer-coverage-trace-compares
  --cfg fuzzing
  -Cdebug-assertions
  -Coverflow-checks
)
export RUSTFLAGS="${flags[*]}"

if [ "${1:-}" = "--seeds" ]; then
  # The generator needs no instrumentation.
  RUSTFLAGS="" cargo run -q --manifest-path fuzz/Cargo.toml --release --bin seeds
  exit 0
fi

secs=${1:-60}
shift || true
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(wire page journal config)

echo "building fuzz targets (${targets[*]}) for $triple"
cargo build -q --manifest-path fuzz/Cargo.toml --release --target "$triple" \
  $(printf -- '--bin %s ' "${targets[@]}")

status=0
for t in "${targets[@]}"; do
  work=target/fuzz/corpus/$t
  art=target/fuzz/artifacts/$t/
  mkdir -p "$work" "$art"
  echo "fuzzing $t for ${secs}s"
  if ! "target/fuzz/$triple/release/$t" -max_total_time="$secs" -print_final_stats=1 \
      -artifact_prefix="$art" "$work" "fuzz/corpus/$t" >"target/fuzz/$t.log" 2>&1; then
    echo "error: fuzz target $t failed; the input is in $art (log: target/fuzz/$t.log)" >&2
    tail -n 40 "target/fuzz/$t.log" >&2
    status=1
    continue
  fi
  grep -E "^stat::(number_of_executed_units|new_units_added)|cov: " "target/fuzz/$t.log" | tail -n 3 | sed "s/^/  $t: /"
done
exit $status
