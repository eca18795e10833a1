#!/usr/bin/env bash
# Builds the `allot` binary as a static executable (static-pie: glibc,
# libgcc and libm linked in; its addresses are still randomised), the way
# the package ships it.
#
# Why: `allot run` starts once for every program it launches, and a
# dynamically linked Rust binary pays the loader at every start (three
# libraries mapped and relocated, every imported symbol bound before
# `main`, libgcc's CPU probe). Static, `allot --version` takes about 0.7 ms
# less here, and so does every launch (docs/benchmarks.md, "Launch").
#
# Only `allot` is static. allot-lab loads compiled kernels with dlopen,
# and liballot and the OpenMP shim are loaded into programs: they stay
# dynamic. Cargo cannot give one binary flags of its own, and a flag for
# the whole build would reach the procedural macros too (which cannot be
# static), so `allot` is linked by `cargo rustc` with the flag for it alone.
# A later plain `cargo build -p allot-cli` links it dynamically again.
#
# Usage: scripts/build-allot.sh [--debug] [--target-dir DIR] [--locked]
#
#   --debug           the debug profile (default: release)
#   --target-dir DIR  cargo's target directory (default: $CARGO_TARGET_DIR
#                     or target/)
#   --locked          build with Cargo.lock as it is
#
# Prints the binary's path. Fails if the result is not static.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tool=build-allot
die() { echo "$tool: error: $*" >&2; exit 1; }
profile=release target="${CARGO_TARGET_DIR:-$here/target}" locked=()
while [ $# -gt 0 ]; do
  case "$1" in
    --debug) profile=debug; shift ;;
    --target-dir) [ $# -ge 2 ] || die "--target-dir needs a directory"; target=$2; shift 2 ;;
    --locked) locked=(--locked); shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
for t in readelf nm; do
  command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install binutils)"
done
flags=()
[ "$profile" = release ] && flags=(--release)

echo "$tool: cargo rustc ${flags[*]:+${flags[*]} }-p allot-cli --bin allot -- -C target-feature=+crt-static" >&2
(cd "$here" && CARGO_TARGET_DIR="$target" cargo rustc --quiet "${flags[@]}" "${locked[@]}" \
  -p allot-cli --bin allot -- -C target-feature=+crt-static) ||
  die "cargo rustc failed (see above); a link error naming -lc or -lgcc_eh means the static C
  libraries are missing (Debian, Ubuntu: libc6-dev, libgcc-12-dev; Fedora, RHEL: glibc-static)"

bin="$target/$profile/allot"
[ -x "$bin" ] || die "$bin was not built"
# A static executable asks for no program interpreter (the dynamic loader)
# and names no shared library.
if readelf -lW "$bin" | grep -q 'INTERP' || readelf -dW "$bin" 2>/dev/null | grep -q '(NEEDED)'; then
  die "$bin is linked dynamically (readelf -l shows an interpreter); the toolchain did not link it static"
fi
# What glibc does through shared libraries even in a static program (user
# and host lookups through NSS) would tie this binary to the glibc
# it was built with: none of it may be linked in. The linker's warning for
# these does not reach cargo's output, so the symbols are looked for.
if late=$(nm --defined-only "$bin" | grep -oE ' [TW] (getpw(nam|uid|ent)|getgr(nam|gid|ent)|getaddrinfo|gethostby[a-z0-9]*)(_r)?$'); then
  die "$bin links what glibc can only do through shared libraries:$(echo $late | tr -d 'TW')"
fi
echo "$bin"
