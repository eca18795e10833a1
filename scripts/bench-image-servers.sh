#!/usr/bin/env bash
# Poli-C's image-server case study as the paper ran it: several server
# processes (the paper's Apache processes) on one machine, their require
# blocks coordinated through the broker (the paper's policd), against the
# same processes with fixed OpenMP team sizes. K processes each serve RATE/K
# requests per second, every request blurring an image with OpenMP; the
# variants (fixed N for N = 1, 2, 4, ... up to the CPUs and at least 4,
# fair_cores and fair_numa through the broker, fair_cores without one) and
# what is measured are described in scripts/lib/image-servers.sh, which the
# images step of scripts/bench-16cpu.sh shares.
#
# Rates are fractions of the machine's capacity (CPUs ÷ one request on one
# thread): 40, 70 and 100 % unless --loads says otherwise. Prints, per
# rate and variant, the mean latency over all requests of all processes
# (and the worst process's 95th percentile), medians of ROUNDS rounds,
# variants interleaved, with each round's ratio to that round's best
# fixed size; then, for the variants with require, the CPU time that
# idled while a request waited for cores, per request (from every
# request's arrival, start and end, `--trace`: what passing a freed core
# from one request to the next costs); then each variant's wait, service
# time and team size per request. Starts its own broker (cgroup v1, root)
# and removes everything it made. Builds the programs (release, as they
# ship) with the image server's bench harness when they are missing.
#
#   bash scripts/bench-image-servers.sh [OPTIONS] [K] [ROUNDS] [BURST]
#
#   K        server processes [4]
#   ROUNDS   rounds per load, variants interleaved [3]
#   BURST    seconds of requests per run [3]
#   --loads LIST     fractions of capacity, comma-separated [0.4,0.7,1.0]
#                    (past 1.0: overload, every way's queue grows)
#   --variants LIST  the variants to run, comma-separated (fixed-N, fair,
#                    numa, alone) [all]
set -euo pipefail
loads=0.4,0.7,1.0
only=""
positional=()
while (($# > 0)); do
  case "$1" in
    --loads) loads=${2:?--loads needs a list, like 0.7,1.3}; shift 2 ;;
    --variants) only=${2:?--variants needs a list, like fixed-4,fair}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench-image-servers: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
k=${positional[0]:-4}
rounds=${positional[1]:-3}
burst=${positional[2]:-3}
[[ $loads =~ ^[0-9.]+(,[0-9.]+)*$ ]] || { echo "bench-image-servers: --loads: want fractions like 0.4,1.0" >&2; exit 2; }
[[ -z $only || $only =~ ^(fixed-[1-9][0-9]*|fair|numa|alone)(,(fixed-[1-9][0-9]*|fair|numa|alone))*$ ]] ||
  { echo "bench-image-servers: --variants: want fixed-N, fair, numa or alone, comma-separated" >&2; exit 2; }
[[ $k =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ && $burst =~ ^[0-9]*\.?[0-9]+$ ]] ||
  { echo "bench-image-servers: K and ROUNDS want positive integers, BURST seconds (see --help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
source scripts/lib/image-servers.sh
progs=target/tmp/image_server
src=crates/capi/benches/c/image_server.c
if [ ! -x "$progs/image_server" ] || [ ! -x "$progs/image_server_plain" ] ||
  [ "$src" -nt "$progs/image_server" ]; then
  echo "building the image server (cargo test --release -p allot-capi --bench image_server)" >&2
  img_build .
fi
source scripts/lib/bench-broker.sh
bench_broker imageservers
# The programs as the shared part expects them: lib/ and shim/ beside them.
img_progs=$dir/progs
mkdir -p "$img_progs"
ln -s "$PWD/$progs/image_server" "$PWD/$progs/image_server_plain" "$PWD/$progs/shim" "$img_progs/"
ln -s "$PWD/$progs/prefix/lib" "$img_progs/lib"
img_dir=$dir img_k=$k img_burst=$burst img_socket=$ALLOT_SOCKET img_cpus=$(nproc) img_only=${only//,/ }
img_measure "$loads" "$rounds" >"$dir/tables"
echo "== $(head -n 1 "$dir/tables") =="
tail -n +2 "$dir/tables"
