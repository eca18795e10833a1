#!/usr/bin/env bash
# Builds the Python package as one wheel for every CPython from 3.9 on
# Linux x86-64 with glibc 2.17 or later: the stable ABI (abi3) and the
# manylinux2014 platform tag. maturin links with zig against glibc 2.17,
# so no manylinux container is needed; both come from PyPI into a private
# environment under target/tools/wheel (nothing is installed system-wide).
# Checks the wheel's tags and the newest glibc symbol its library uses,
# then prints the wheel's path on the last line.
#
#   bash scripts/build-wheel.sh [OUT_DIR]     (default target/wheels)
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-target/wheels}
tools=target/tools/wheel
MATURIN=1.16.0
ZIG=0.17.1
if ! "$tools/bin/maturin" --version 2>/dev/null | grep -qx "maturin $MATURIN" \
  || ! "$tools/bin/python" -m ziglang version 2>/dev/null | grep -qx "$ZIG"; then
  echo "installing maturin $MATURIN and ziglang $ZIG from PyPI into $tools" >&2
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check "maturin==$MATURIN" "ziglang==$ZIG"
fi

mkdir -p "$out"
rm -f "$out"/allot-*.whl
PATH="$PWD/$tools/bin:$PATH" maturin build --quiet --release --zig \
  --compatibility manylinux2014 --manifest-path python/Cargo.toml -o "$out" >&2

wheel=$(ls "$out"/allot-*.whl)
case "$(basename "$wheel")" in
  allot-*-cp39-abi3-manylinux2014_x86_64*.whl) ;;
  *) echo "error: $wheel is not tagged cp39-abi3-manylinux2014_x86_64" >&2; exit 1 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m zipfile -e "$wheel" "$tmp"
lib=$(find "$tmp" -name '_allot*.so')
newest=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
if [ "$(printf '%s\n2.17\n' "$newest" | sort -V | tail -1)" != "2.17" ]; then
  echo "error: $lib needs glibc $newest, above manylinux2014's 2.17" >&2
  exit 1
fi
echo "the wheel's library needs glibc $newest at most (manylinux2014: 2.17)" >&2
echo "$wheel"
