#!/usr/bin/env bash
# Builds allot's Debian packages (scripts/package-deb.sh: allot, and
# allot-slurm where Slurm's spank.h is installed), installs them on this
# machine, uses them — `allot run` against a broker of the package's own
# binary, a C program built with pkg-config against the installed
# liballot, the SPANK plugin's links — and purges them, checking that
# nothing they installed is left.
#
#   bash scripts/test-package.sh [--from DIR]
#
# --from DIR packages the binaries in DIR (default: target/debug, built
# here first with `cargo build -p allot-cli -p allot-lab -p allot-capi`, mostly done by
# the test command already; a release package is built the same way from
# target/release). Needs root and dpkg. Refuses to run where an allot
# package or an allot binary on the system paths is already installed:
# it never replaces or removes what it did not install. Without root or
# dpkg it skips (ALLOT_STRICT_TESTS=1: fails).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
from=""
[ "${1:-}" = --from ] && { from=$2; shift 2; }
say() { echo "test-package: $*"; }
fail() { echo "test-package: FAIL: $*" >&2; exit 1; }
skip() {
  if [ "${ALLOT_STRICT_TESTS:-0}" = 1 ]; then fail "cannot run here: $*"; fi
  say "skipped: $*"; exit 0
}
[ "$(id -u)" = 0 ] || skip "installing a package needs root"
command -v dpkg >/dev/null || skip "no dpkg on this machine"
for pkg in allot allot-slurm; do
  if dpkg -s "$pkg" >/dev/null 2>&1; then
    fail "an $pkg package is already installed here; this test installs and purges its own, so remove that one first"
  fi
done
for p in /usr/bin/allot /usr/bin/allot-lab /usr/lib/liballot.so.0 /etc/allot/allotd.toml \
  /usr/lib/allot /etc/slurm/plugstack.conf.d/allot.conf; do
  [ -e "$p" ] && fail "$p exists and is not from a package this test made; it would be replaced"
done

if [ -z "$from" ]; then
  (cd "$here" && cargo build -q -p allot-cli -p allot-lab -p allot-capi) || fail "cargo build failed (see above)"
  from="${CARGO_TARGET_DIR:-$here/target}/debug"
fi

work=$(mktemp -d -t allot-pkgtest.XXXXXX)
installed=0
broker=""
cleanup() {
  if [ -n "$broker" ]; then
    kill "$broker" 2>/dev/null || true
    wait "$broker" 2>/dev/null || true
  fi
  if [ "$installed" = 1 ]; then dpkg --purge allot-slurm allot >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

slurm=()
[ -f /usr/include/slurm/spank.h ] && slurm=(--slurm)
mapfile -t debs < <(bash "$here/scripts/package-deb.sh" --from "$from" --out "$work" "${slurm[@]}")
deb=${debs[0]}
for d in "${debs[@]}"; do say "built $(basename "$d") ($(du -h "$d" | cut -f1))"; done
[ "${#debs[@]}" = $((1 + ${#slurm[@]})) ] || fail "expected $((1 + ${#slurm[@]})) package(s), got: ${debs[*]}"
# (Outputs are read whole before grep -q looks at them: with pipefail, a
# writer cut off by grep's early exit would fail the pipeline.)
info=$(dpkg-deb --info "$deb")
grep -q '^ Depends: libc6 (>= 2\.' <<<"$info" || fail "no libc6 dependency in the control file: $info"

dpkg -i "${debs[@]}" >/dev/null
installed=1
dpkg -L allot | sort >"$work/files"
if [ "${#slurm[@]}" = 1 ]; then
  dpkg -L allot-slurm | sort >>"$work/files"
  for p in /usr/lib/allot/spank_allot.so /usr/lib/allot/liballot_shim.so /usr/lib/allot/tcm/libtcm.so.1 /etc/slurm/plugstack.conf.d/allot.conf; do
    [ -e "$p" ] || fail "allot-slurm did not install $p"
  done
  grep -q '^required /usr/lib/allot/spank_allot.so ' /etc/slurm/plugstack.conf.d/allot.conf \
    || fail "the plugstack line does not load the installed plugin"
  plugin=$(ldd /usr/lib/allot/spank_allot.so)
  grep -Eq 'liballot\.so\.0 => (/usr)?/lib/liballot\.so\.0' <<<"$plugin" \
    || fail "the SPANK plugin does not find the installed liballot: $plugin"
  say "allot-slurm: the plugin loads liballot.so.0 from the allot package"
fi
for p in /usr/bin/allot /usr/bin/allot-lab /usr/lib/systemd/system/allotd.service \
  /usr/lib/systemd/system/allotd.socket /etc/allot/allotd.toml /usr/share/man/man1/allot.1.gz \
  /usr/share/man/man5/allotd.toml.5.gz /usr/share/doc/allot/operations.md \
  /usr/share/bash-completion/completions/allot /usr/include/allot.h /usr/include/allot/require.h \
  /usr/lib/pkgconfig/allot.pc /usr/lib/liballot.so /usr/lib/liballot.so.0 /usr/lib/liballot.a; do
  grep -qx "$p" "$work/files" || fail "the package lacks $p"
  [ -e "$p" ] || fail "$p is listed but not installed"
done
grep -q 'ExecStart=/usr/bin/allot daemon' /usr/lib/systemd/system/allotd.service \
  || fail "the service does not run the installed binary"
cache=$(ldconfig -p)
grep -q 'liballot.so.0 ' <<<"$cache" || fail "the loader does not know liballot.so.0"
say "installed: $(/usr/bin/allot --version)"

# The package's broker and `allot run`, on a private socket.
/usr/bin/allot daemon --socket "$work/allot.sock" --backend affinity 2>"$work/broker.log" &
broker=$!
for _ in $(seq 100); do [ -S "$work/allot.sock" ] && break; sleep 0.05; done
[ -S "$work/allot.sock" ] || fail "the installed broker did not start: $(cat "$work/broker.log")"
# shellcheck disable=SC2016 # $ALLOT_CELL is the cell's, expanded inside it
out=$(/usr/bin/allot run --socket "$work/allot.sock" --no-start -- sh -c 'echo "cell $ALLOT_CELL"')
case "$out" in "cell "[0-9]*) ;; *) fail "allot run from the package printed: $out" ;; esac
say "allot run: $out"
kill "$broker"; wait "$broker" || true; broker=""

# A C program against the installed library, found through pkg-config.
[ "$(pkg-config --modversion allot)" = "$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$here/Cargo.toml" | head -n1)" ] \
  || fail "pkg-config reports another version"
# shellcheck disable=SC2046 # pkg-config's words are the flags
cc -std=c11 -o "$work/sum" "$here/examples/c/parallel_sum.c" $(pkg-config --cflags --libs allot) \
  || fail "a C program does not build against the installed liballot"
ALLOT_SOCKET="$work/none.sock" "$work/sum" 1000000 >"$work/sum.out" || fail "the C program failed: $(cat "$work/sum.out")"
# (/lib is /usr/lib on a merged-/usr system: the loader may name either.)
linked=$(ldd "$work/sum")
grep -Eq 'liballot\.so\.0 => (/usr)?/lib/liballot\.so\.0' <<<"$linked" \
  || fail "the program does not load the installed liballot.so.0: $(ldd "$work/sum")"
say "a C program built with pkg-config runs on /usr/lib/liballot.so.0"

dpkg --purge allot-slurm allot >/dev/null
installed=0
left=""
while read -r p; do
  [ -d "$p" ] && continue # shared directories (/usr/bin, …) stay
  [ -e "$p" ] || [ -L "$p" ] && left="$left $p"
done <"$work/files"
[ -z "$left" ] || fail "left after purge:$left"
if [ -e /etc/allot ]; then fail "/etc/allot left after purge"; fi
cache=$(ldconfig -p)
if grep -q 'liballot.so.0 ' <<<"$cache"; then fail "the loader still lists liballot.so.0"; fi
if [ -e /usr/lib/allot ]; then fail "/usr/lib/allot left after purge"; fi
say "ok: built, installed, used and purged; nothing left"
