#!/usr/bin/env bash
# Builds allot's Debian package with dpkg-deb from a staged tree:
#
#   /usr/bin/allot, /usr/bin/allot-lab          (stripped)
#   /usr/lib/systemd/system/allotd.{socket,service}
#   /etc/allot/allotd.toml                      (a conffile, kept on upgrade)
#   /usr/share/man/man1/allot*.1.gz, man5/allotd.toml.5.gz,
#   /usr/share/doc/allot/ (README.md and docs/*.md), bash/zsh/fish completions
#   /usr/lib/liballot.so.VERSION (soname liballot.so.0), liballot.so.0,
#   liballot.so, liballot.a, /usr/include/allot.h and allot/*.h,
#   /usr/lib/pkgconfig/allot.pc
#
# With --slurm, also the Slurm integration as a package of its own,
# allot-slurm (depends on allot of the same version):
#
#   /usr/lib/allot/spank_allot.so               the SPANK plugin, on liballot
#   /usr/lib/allot/liballot_shim.so             the OpenMP shim for job tasks
#   /etc/slurm/plugstack.conf.d/allot.conf      the line that loads it (a
#                                               conffile; plugstack.conf
#                                               must include that directory)
#
# Usage: scripts/package-deb.sh [--from DIR] [--out DIR] [--slurm]
#
#   --from DIR  take allot, allot-lab and liballot_capi.{so,a} from DIR (a
#               cargo profile directory such as target/release) instead of
#               building them with `cargo build --release` (allot static,
#               with scripts/build-allot.sh)
#   --out DIR   where the packages go (default: target/deb)
#   --slurm     build allot-slurm too (needs gcc and Slurm's spank.h:
#               Debian's libslurm-dev)
#
# Prints each package's path. The installed service is not enabled: that
# stays the administrator's choice (`systemctl enable --now allotd.socket`).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tool=package-deb
die() { echo "$tool: error: $*" >&2; exit 1; }
from="" out="$here/target/deb" slurm=0
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || die "--from needs a directory"; from=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --slurm) slurm=1; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
for t in dpkg-deb strip gzip objdump readelf; do
  command -v "$t" >/dev/null || die "$t not found (Debian: apt-get install dpkg-dev binutils gzip)"
done
if [ "$slurm" = 1 ]; then
  [ -f /usr/include/slurm/spank.h ] || die "--slurm: slurm/spank.h not found (Debian: apt-get install libslurm-dev)"
  command -v gcc >/dev/null || die "--slurm: gcc not found"
fi

if [ -z "$from" ]; then
  echo "$tool: cargo build --release -p allot-lab -p allot-capi" >&2
  (cd "$here" && cargo build --release -p allot-lab -p allot-capi) || die "cargo build failed (see above)"
  # allot itself static, for its start at every launch (the script says why).
  bash "$here/scripts/build-allot.sh" >/dev/null || die "scripts/build-allot.sh failed (see above)"
  from="${CARGO_TARGET_DIR:-$here/target}/release"
fi
for f in allot allot-lab liballot_capi.so liballot_capi.a; do
  [ -f "$from/$f" ] || die "$from/$f not found: build with cargo build --release -p allot-cli -p allot-lab -p allot-capi, or give --from"
done

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$here/Cargo.toml" | head -n1)"
[ -n "$version" ] || die "cannot read the workspace version from Cargo.toml"
arch=$(dpkg --print-architecture)

work=$(mktemp -d -t allot-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
stage="$work/allot"
mkdir -p "$stage/DEBIAN" "$work/bin"

# The binaries, stripped, through the install scripts (one layout for a
# package and for an install from a checkout).
strip -o "$work/bin/allot" "$from/allot"
strip -o "$work/bin/allot-lab" "$from/allot-lab"
bash "$here/scripts/install-service.sh" --root "$stage" --prefix /usr --bin "$work/bin/allot" >/dev/null
# A package's units belong to the distribution's unit directory; /etc is
# the administrator's.
mkdir -p "$stage/usr/lib/systemd/system"
mv "$stage/etc/systemd/system/"allotd.* "$stage/usr/lib/systemd/system/"
rmdir -p "$stage/etc/systemd/system" 2>/dev/null || true
gzip -9n "$stage/usr/share/man/man1/"*.1 "$stage/usr/share/man/man5/"*.5
bash "$here/scripts/install-liballot.sh" --from "$from" --destdir "$stage" /usr 2>/dev/null
strip --strip-debug "$stage/usr/lib/liballot.so.$version" "$stage/usr/lib/liballot.a"

# The newest glibc symbol version the binaries use is the least glibc
# they run on (a static allot, as scripts/build-allot.sh makes it, uses
# none: it carries its own).
dynamic=()
for f in "$work/bin/allot" "$work/bin/allot-lab" "$stage/usr/lib/liballot.so.$version"; do
  readelf -dW "$f" 2>/dev/null | grep -q '(NEEDED)' && dynamic+=("$f")
done
glibc=$(objdump -T "${dynamic[@]}" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<CONTROL
Package: allot
Version: $version
Architecture: $arch
Maintainer: allot developers <allot@example.invalid>
Installed-Size: $size
Depends: libc6 (>= $glibc)
Section: admin
Priority: optional
Homepage: https://example.invalid/allot
Description: share one Linux machine well between parallel programs
 allot's broker decides how many CPUs each program (each cell) gets and
 which, enforces it with cgroups or CPU affinity, and tells each program
 when its share changes; allot run confines unmodified programs and sizes
 their OpenMP, BLAS and oneTBB pools and make's jobserver to the grant.
 Includes liballot (C ABI, headers, pkg-config) and allot-lab (the demo
 and experiments).
CONTROL
echo /etc/allot/allotd.toml >"$stage/DEBIAN/conffiles"
cat >"$stage/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
ldconfig
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
SCRIPT
cat >"$stage/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
# The broker stops; the programs in its cells run on (their processes
# belong to their users' sessions).
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl stop allotd.socket allotd.service 2>/dev/null || true
fi
SCRIPT
cat >"$stage/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
ldconfig
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
SCRIPT
chmod 755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

mkdir -p "$out"
deb="$out/allot_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"

[ "$slurm" = 1 ] || exit 0
# allot-slurm: the plugin built against the headers and library just
# staged (the package's Depends makes the installed ones the same).
sstage="$work/allot-slurm"
mkdir -p "$sstage/DEBIAN" "$sstage/usr/lib/allot" "$sstage/etc/slurm/plugstack.conf.d"
gcc -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared \
  -I "$here/slurm" -I "$stage/usr/include" -o "$sstage/usr/lib/allot/spank_allot.so" \
  "$here/slurm/spank_allot.c" -L "$stage/usr/lib" -lallot || die "compiling the SPANK plugin failed"
"$work/bin/allot" shim --out "$sstage/usr/lib/allot" >/dev/null || die "writing the shim failed"
strip --strip-unneeded "$sstage/usr/lib/allot/"*.so
cat >"$sstage/etc/slurm/plugstack.conf.d/allot.conf" <<CONF
# allot's SPANK plugin (docs/slurm.md): every job step on this node runs in
# a cell of the node's broker. Loaded when /etc/slurm/plugstack.conf has
#   include /etc/slurm/plugstack.conf.d/*.conf
# Options: socket=PATH, shim=PATH (omit: none), tcm=DIR (omit: none),
# state=DIR, borrow=no.
required /usr/lib/allot/spank_allot.so socket=/run/allot/allot.sock shim=/usr/lib/allot/liballot_shim.so tcm=/usr/lib/allot/tcm
CONF
ssize=$(du -sk --exclude=DEBIAN "$sstage" | cut -f1)
cat >"$sstage/DEBIAN/control" <<CONTROL
Package: allot-slurm
Version: $version
Architecture: $arch
Maintainer: allot developers <allot@example.invalid>
Installed-Size: $ssize
Depends: allot (= $version), libc6 (>= $glibc)
Recommends: slurmd
Section: admin
Priority: optional
Homepage: https://example.invalid/allot
Description: allot's Slurm integration (SPANK plugin)
 Puts every Slurm job step on a node in a cell of the node's allot
 broker, so jobs sharing a node divide its CPUs while they run and a job
 that ends hands its CPUs to the others. Restart slurmd after installing.
CONTROL
echo /etc/slurm/plugstack.conf.d/allot.conf >"$sstage/DEBIAN/conffiles"
sdeb="$out/allot-slurm_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$sstage" "$sdeb" >/dev/null
echo "$sdeb"
