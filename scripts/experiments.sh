#!/usr/bin/env bash
# Regenerates the measurements behind docs/results.md: the co-tenancy
# experiment (`allot bench mix` at 1, 2, 4 and 8 concurrent jobs), each
# workload alone, the `allot run` comparison on fixed mixes (fine- and
# coarse-grained OpenMP programs, multithreaded compressors), unmodified
# numpy programs (OpenBLAS) against the careful user's alternatives, and the
# launch count for runtimes sized once (share, grant, maximum), and OpenMP
# mixes against one thread each, a static split and OMP_DYNAMIC. Writes CSV
# files, PNG plots and the machine description to docs/results/ (or the
# directory given), and prints the tables. Takes about 45 minutes on a
# 2-CPU machine (the BLAS parts another 35, the OpenMP alternatives another
# 25: plain co-runs of the stencil take minutes); run it on an otherwise
# idle machine.
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
cargo build --release -p allot-cli -p allot-lab # allot, and allot-lab, which runs the experiments
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

echo "== BLAS: four numpy programs, small calls and large ones, one left alone at the end"
py=/usr/bin/python3
n64=20000 n128=4000 nbig=25 nbig40=40 brepeats=7
[ "$quick" = 1 ] && n64=2000 n128=400 nbig=3 nbig40=4 brepeats=1
s64="cmd:s64=$py scripts/workloads/blas.py 64 $n64"
s128="cmd:s128=$py scripts/workloads/blas.py 128 $n128"
big="cmd:big=$py scripts/workloads/blas.py 1000 $nbig"
big40="cmd:big40=$py scripts/workloads/blas.py 1000 $nbig40"
"$allot" bench mix --repeats "$brepeats" --modes plain,seq,one,split,run \
  --mix "$s64,$s64,$s64,$s64" --mix "$s128,$s128,$s128,$s128" \
  --mix "$s128,$s128,$big,$big" --mix "$s128,$s128,$s128,$big40" --out "$work/blas"

echo "== the launch count of runtimes sized once: share, grant at launch, maximum (no shim)"
"$allot" bench mix --repeats "$brepeats" --modes one,run,run-grant,run-share,run-max \
  --mix "$s128,$s128,$s128,$s128" --mix "$s128,$s128,$s128,$big40" --out "$work/launch"

echo "== OpenMP mixes against what a careful user does without allot: one thread each, a static split, OMP_DYNAMIC"
"$allot" bench mix --repeats "$((repeats + 2))" --scale "$scale" --modes plain,one,split,dynamic,run \
  --mix stencil,stencil,stencil,stencil --mix stencil,stencil --mix pricing,pricing,pricing,pricing \
  --out "$work/alternatives"

for d in mix alone run blas launch alternatives; do
  mkdir -p "$out/$d"
  cp "$work/$d"/*.csv "$work/$d"/*.png "$work/$d"/machine.txt "$out/$d/"
  # Charts also come as SVG where the report writes one.
  for f in "$work/$d"/*.svg; do if [ -e "$f" ]; then cp "$f" "$out/$d/"; fi; done
done
echo "results in $out"
