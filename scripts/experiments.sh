#!/usr/bin/env bash
# Regenerates the measurements behind docs/results.md: the co-tenancy
# experiment (`allot bench mix` at 1, 2, 4 and 8 concurrent jobs), each
# workload alone, and the `allot run` comparison on fixed mixes (fine- and
# coarse-grained OpenMP programs, multithreaded compressors). Writes CSV
# files, PNG plots and the machine description to docs/results/ (or the
# directory given), and prints the tables. Takes about 45 minutes on a
# 2-CPU machine; run it on an otherwise idle machine.
#
#   bash scripts/experiments.sh [OUT_DIR] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."

out=docs/results
quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) out=$a ;;
  esac
done

scale=0.5 repeats=3 mixes=3
[ "$quick" = 1 ] && scale=0.05 repeats=1 mixes=1

bash scripts/deps.sh
cargo build --release --bin allot
allot=$PWD/target/release/allot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Input for the compressors: compressible text, the same bytes every time.
python3 - "$work/input" "$quick" <<'PY'
import random, sys
path, quick = sys.argv[1], sys.argv[2] == "1"
rng = random.Random(7)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
         for _ in range(5000)]
size = (2 if quick else 24) << 20
with open(path, "w") as f:
    n = 0
    while n < size:
        line = " ".join(rng.choice(words) for _ in range(12)) + "\n"
        f.write(line)
        n += len(line)
PY

echo "== co-tenancy: random mixes at 1, 2, 4, 8 concurrent jobs"
"$allot" bench mix --jobs 1,2,4,8 --mixes "$mixes" --repeats "$repeats" --scale "$scale" \
  --modes plain,seq,run,runtime --seed 1 --out "$work/mix"

echo "== one job alone: every workload, plain against allot run and allot's runtime"
"$allot" bench mix --repeats "$repeats" --scale "$scale" --modes plain,run,runtime \
  --mix pricing --mix stencil --mix pipeline --mix anneal --mix cluster --out "$work/alone"

echo "== allot run: fixed mixes"
xz="cmd:xz=xz -T0 -6 -c $work/input > /dev/null"
zstd="cmd:zstd=zstd -T0 -15 -c $work/input > /dev/null"
"$allot" bench mix --repeats "$repeats" --scale "$scale" --modes plain,seq,run,run-grant \
  --mix stencil,stencil --mix stencil,stencil,stencil,stencil \
  --mix pricing,pricing --mix pricing,pricing,pricing,pricing \
  --mix "$xz,$zstd" --out "$work/run"

for d in mix alone run; do
  mkdir -p "$out/$d"
  cp "$work/$d"/*.csv "$work/$d"/*.png "$work/$d"/machine.txt "$out/$d/"
done
echo "results in $out"
