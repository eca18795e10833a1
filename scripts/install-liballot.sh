#!/usr/bin/env bash
# Installs liballot (allot's C ABI) into PREFIX:
#
#   PREFIX/include/allot.h
#   PREFIX/include/allot/pool.h, require.h, time.h, goals.h, memory.h, channel.h, hooks.h (parts allot.h includes)
#   PREFIX/lib/liballot.so.VERSION   (soname liballot.so.0)
#   PREFIX/lib/liballot.so.0 -> liballot.so.VERSION
#   PREFIX/lib/liballot.so   -> liballot.so.0
#   PREFIX/lib/liballot.a
#   PREFIX/lib/pkgconfig/allot.pc
#
# Usage: scripts/install-liballot.sh [--from DIR] [--destdir DIR] PREFIX
#
# With --destdir DIR (packaging) the files go under DIR/PREFIX while
# allot.pc names PREFIX, where they will be once the package is installed;
# PREFIX must then be absolute.
#
# By default builds the library first (cargo build --release -p allot-capi)
# and takes it from the release directory of the cargo target directory
# ($CARGO_TARGET_DIR, else target/). With --from DIR it builds nothing and
# takes liballot_capi.so and liballot_capi.a from DIR (e.g. target/debug);
# tests use this to avoid a nested cargo build.
#
# Running it again replaces the files with the new build (each file is
# written under a temporary name and renamed), so it is safe to repeat.
set -euo pipefail

tool=install-liballot
supports_destdir=1
source "$(dirname "$0")/lib/install-args.sh"

crate="$repo/crates/capi"
header="$crate/include/allot.h"
template="$crate/allot.pc.in"
[ -f "$header" ] || die "missing $header: run this script from an allot checkout"
parts="pool.h require.h time.h goals.h memory.h channel.h hooks.h"
for part in $parts; do
  [ -f "$crate/include/allot/$part" ] || die "missing $crate/include/allot/$part: run this script from an allot checkout"
done
[ -f "$template" ] || die "missing $template: run this script from an allot checkout"

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)"
[ -n "$version" ] || die "cannot read the workspace version from $repo/Cargo.toml"
url="$(sed -n '/^\[workspace.package\]/,/^\[/s/^repository *= *"\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)"

if [ -z "$from" ]; then
  command -v cargo >/dev/null 2>&1 || die "cargo not found; install Rust, or pass --from DIR with a built liballot_capi.so"
  echo "install-liballot: cargo build --release -p allot-capi" >&2
  (cd "$repo" && cargo build --release -p allot-capi) || die "cargo build failed (see above)"
  from="${CARGO_TARGET_DIR:-$repo/target}/release"
fi
[ -d "$from" ] || die "$from is not a directory"
so="$from/liballot_capi.so"
ar="$from/liballot_capi.a"
[ -f "$so" ] || die "$so not found; build it with: cargo build -p allot-capi (or --release)"
[ -f "$ar" ] || die "$ar not found; build it with: cargo build -p allot-capi (or --release)"

if [ -n "$destdir" ]; then
  case "$prefix" in
    /*) ;;
    *) die "with --destdir, PREFIX must be absolute (where the files will be once installed, e.g. /usr)" ;;
  esac
  root="$destdir$prefix"
else
  mkdir -p "$prefix" || die "cannot create $prefix"
  prefix="$(cd "$prefix" && pwd)"
  root="$prefix"
fi
libdir="$root/lib"
incdir="$root/include"
pcdir="$libdir/pkgconfig"
mkdir -p "$libdir" "$incdir/allot" "$pcdir" || die "cannot create directories under $root (permissions?)"

# put SRC DEST MODE: copy to a temporary name beside DEST, then rename, so
# a program loading DEST never sees half a file.
put() {
  local tmp
  tmp="$(dirname "$2")/.$(basename "$2").tmp.$$"
  install -m "$3" "$1" "$tmp" || { rm -f "$tmp"; die "cannot write $2"; }
  mv -f "$tmp" "$2" || { rm -f "$tmp"; die "cannot write $2"; }
}
# link TARGET NAME: NAME -> TARGET, replacing whatever NAME was.
link() {
  local tmp="$libdir/.$2.tmp.$$"
  ln -sfn "$1" "$tmp" && mv -Tf "$tmp" "$libdir/$2" || { rm -f "$tmp"; die "cannot link $libdir/$2"; }
}

put "$so" "$libdir/liballot.so.$version" 0755
link "liballot.so.$version" liballot.so.0
link liballot.so.0 liballot.so
put "$ar" "$libdir/liballot.a" 0644
# The parts first: a compiler that sees the new allot.h finds them.
for part in $parts; do
  put "$crate/include/allot/$part" "$incdir/allot/$part" 0644
done
put "$header" "$incdir/allot.h" 0644

# The system libraries the Rust standard library in liballot.a needs
# (what `rustc --print native-static-libs` prints for x86_64/aarch64 Linux).
libs_private="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
pc_tmp="$pcdir/.allot.pc.tmp.$$"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@URL@|$url|g" \
    -e "s|@LIBS_PRIVATE@|$libs_private|g" "$template" > "$pc_tmp" \
  && mv -f "$pc_tmp" "$pcdir/allot.pc" || { rm -f "$pc_tmp"; die "cannot write $pcdir/allot.pc"; }

cat >&2 <<MSG
install-liballot: installed liballot $version into $root
  compile: cc -std=c11 prog.c \$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs allot) -Wl,-rpath,$libdir
MSG
