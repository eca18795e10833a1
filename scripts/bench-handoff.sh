#!/usr/bin/env bash
# How long a CPU given back by a `require` in one process takes to reach a
# `require` waiting for it in another, through a broker of this run
# (crates/capi/benches/c/handoff.c): the cost of passing a freed core from
# one request to the next, which the image servers pay at saturation
# (docs/benchmarks.md, "Passing a freed core on"). Builds allot and
# liballot (release), starts its own broker (cgroup v1, root) and removes
# everything it made. Prints each round's percentiles and the median of
# the rounds' medians.
#
#   bash scripts/bench-handoff.sh [ROUNDS] [N]     (3 rounds of 60)
set -euo pipefail
rounds=${1:-3}
n=${2:-60}
[[ $rounds =~ ^[1-9][0-9]*$ && $n =~ ^[1-9][0-9]*$ ]] ||
  { echo "usage: bash scripts/bench-handoff.sh [ROUNDS] [N] (whole numbers from 1)" >&2; exit 2; }
cd "$(dirname "$0")/.."
source scripts/lib/bench-broker.sh
bench_broker handoff
bash scripts/install-liballot.sh "$dir/prefix" >/dev/null
gcc -std=c11 -O2 -Wall -Wextra -Werror -I"$dir/prefix/include" crates/capi/benches/c/handoff.c \
  -o "$dir/handoff" -L"$dir/prefix/lib" -lallot -Wl,-rpath,"$dir/prefix/lib"
echo "== $n hand-overs a round, $rounds rounds, on $(nproc) CPUs =="
: >"$dir/p50"
for r in $(seq "$rounds"); do
  line=$(timeout 120 "$dir/handoff" "$n")
  echo "$line"
  sed -n 's/.* p50_us=\([0-9]*\) .*/\1/p' <<<"$line" >>"$dir/p50"
done
echo "median of the rounds' medians: $(sort -n "$dir/p50" | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}') us"
