#!/usr/bin/env bash
# Installs allot's Slurm integration (docs/slurm.md) into PREFIX:
#
#   PREFIX/lib/liballot.so* ...        liballot (scripts/install-liballot.sh)
#   PREFIX/lib/allot/liballot_shim.so  the OpenMP shim (`allot shim`)
#   PREFIX/lib/allot/tcm/              allot's thread composability manager (`allot shim`)
#   PREFIX/lib/slurm/spank_allot.so    the SPANK plugin, built against
#                                      Slurm's spank.h and linked with
#                                      liballot (rpath PREFIX/lib)
#
# and prints the plugstack.conf line that loads it. Run it on every node
# (or install PREFIX on a shared file system), as root for a system
# prefix: every file it writes is root's and not writable by others, as a
# library slurmstepd loads and a shim preloaded into jobs must be.
#
# Usage: scripts/install-slurm-plugin.sh [--from DIR] PREFIX
#
# By default builds allot first (cargo build --release -p allot-cli
# -p allot-capi). With --from DIR it takes `allot` and liballot_capi.* from
# DIR (e.g. target/debug) and builds nothing. Needs gcc and Slurm's
# development header (Debian: libslurm-dev).
set -euo pipefail

tool=install-slurm-plugin
source "$(dirname "$0")/lib/install-args.sh"
[ -f /usr/include/slurm/spank.h ] || die "slurm/spank.h not found: install Slurm's development header (Debian: apt-get install libslurm-dev)"
command -v gcc >/dev/null || die "gcc not found"

if [ -z "$from" ]; then
  echo "install-slurm-plugin: cargo build --release -p allot-cli -p allot-capi" >&2
  (cd "$repo" && cargo build --release -p allot-cli -p allot-capi) || die "cargo build failed (see above)"
  from="${CARGO_TARGET_DIR:-$repo/target}/release"
fi
[ -x "$from/allot" ] || die "$from/allot not found; build it with: cargo build -p allot-cli (or --release)"

bash "$repo/scripts/install-liballot.sh" --from "$from" "$prefix" 2>/dev/null || die "installing liballot failed"
prefix="$(cd "$prefix" && pwd)"
"$from/allot" shim --out "$prefix/lib/allot" >/dev/null || die "writing the shim failed"

mkdir -p "$prefix/lib/slurm"
tmp="$prefix/lib/slurm/.spank_allot.so.tmp.$$"
gcc -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared \
  -I "$repo/slurm" -I "$prefix/include" -o "$tmp" "$repo/slurm/spank_allot.c" \
  -L "$prefix/lib" -lallot -Wl,-rpath,"$prefix/lib" || { rm -f "$tmp"; die "compiling the plugin failed"; }
chmod 0755 "$tmp"
mv -f "$tmp" "$prefix/lib/slurm/spank_allot.so"

cat <<MSG
install-slurm-plugin: installed into $prefix
  plugstack.conf (e.g. /etc/slurm/plugstack.conf.d/allot.conf):
    required $prefix/lib/slurm/spank_allot.so socket=/run/allot/allot.sock shim=$prefix/lib/allot/liballot_shim.so tcm=$prefix/lib/allot/tcm
MSG
