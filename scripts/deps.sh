#!/usr/bin/env bash
# Installs the Debian packages allot's build, tests and benchmarks use.
# Run as root (CI does); as a user it only lists what is missing.
set -euo pipefail

packages=(
  build-essential make gcc g++ libgomp1  # C toolchain, OpenMP runtime (workloads, shim, liballot tests); g++ builds libFuzzer
  clang libomp-dev                    # LLVM OpenMP (the shim's libomp tests)
  pkg-config                          # the C ABI test builds against allot.pc
  python3 util-linux procps           # live tests: threaded test programs, setpriv, ps
  xz-utils zstd pigz                  # the compressor benchmark
)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages (install them as root): ${missing[*]}" >&2
  exit 0
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${missing[@]}"
