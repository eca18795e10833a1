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
# thread): 40, 70 and 100 %. Prints, per rate and variant, the mean latency
# over all requests of all processes (and the worst process's 95th
# percentile), medians of ROUNDS rounds, variants interleaved; then, for
# the variants with require, the CPU time that idled while a request waited
# for cores, per request (from every request's arrival, start and end,
# `--trace`: what passing a freed core from one request to the next
# costs). Starts its own broker (cgroup v1, root) and removes everything it
# made. Builds the programs (release, as they ship) with the image server's
# bench harness when they are missing.
#
#   bash scripts/bench-image-servers.sh [K] [ROUNDS] [BURST]
set -euo pipefail
k=${1:-4}
rounds=${2:-3}
burst=${3:-3}
cd "$(dirname "$0")/.."
progs=target/tmp/image_server
src=crates/capi/benches/c/image_server.c
if [ ! -x "$progs/image_server" ] || [ ! -x "$progs/image_server_plain" ] ||
  [ "$src" -nt "$progs/image_server" ]; then
  echo "building the image server (cargo test --release -p allot-capi --bench image_server)" >&2
  cargo test --release -q -p allot-capi --bench image_server >/dev/null
fi
source scripts/lib/bench-broker.sh
source scripts/lib/image-servers.sh
bench_broker imageservers
# The programs as the shared part expects them: lib/ and shim/ beside them.
img_progs=$dir/progs
mkdir -p "$img_progs"
ln -s "$PWD/$progs/image_server" "$PWD/$progs/image_server_plain" "$PWD/$progs/shim" "$img_progs/"
ln -s "$PWD/$progs/prefix/lib" "$img_progs/lib"
img_dir=$dir img_k=$k img_burst=$burst img_socket=$ALLOT_SOCKET img_cpus=$(nproc)
img_measure 0.4,0.7,1.0 "$rounds" >"$dir/tables"
echo "== $(head -n 1 "$dir/tables") =="
tail -n +2 "$dir/tables"
