#!/usr/bin/env bash
# Installs allot as a system service: the binary (and allot-lab, the demo
# and experiments, when it was built beside it), allotd.socket and
# allotd.service, an (empty) /etc/allot/allotd.toml, shell completions and
# man pages. Then, on a machine run by systemd, enables the socket.
#
#   sudo bash scripts/install-service.sh [--prefix /usr/local] [--root DIR] [--bin PATH] [--no-enable]
#
# --prefix  where the binary and man pages go, and what the units run (default /usr/local)
# --root    stage every file under DIR instead of / (packaging, tests); implies --no-enable
# --bin     the allot binary to install (default: target/release/allot, which must exist)
# --no-enable  install only; print the systemctl commands instead of running them
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local root="" bin="" enable=1
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --root) root=$2; enable=0; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --no-enable) enable=0; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "install-service.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install-service.sh: --prefix must be absolute" >&2; exit 2 ;; esac
if [ -z "$bin" ]; then
  bin=$here/target/release/allot
  # Not built here: this runs as root, and a build would run build scripts
  # as root and leave a root-owned target/ in the user's tree.
  [ -x "$bin" ] || { echo "install-service.sh: build first (as yourself: cargo build --release -p allot-lab and bash scripts/build-allot.sh, which links allot static as the package ships it) or give --bin PATH" >&2; exit 1; }
fi
[ -x "$bin" ] || { echo "install-service.sh: no executable at $bin" >&2; exit 1; }
if [ -z "$root" ] && [ "$(id -u)" != 0 ]; then
  echo "install-service.sh: run as root (or stage with --root DIR)" >&2; exit 1
fi

install -D -m 755 "$bin" "$root$prefix/bin/allot"
lab=$(dirname "$bin")/allot-lab
installed_lab=""
if [ -x "$lab" ]; then
  # `allot demo` and `allot bench` hand over to it, beside allot.
  install -D -m 755 "$lab" "$root$prefix/bin/allot-lab"
  installed_lab=" and allot-lab"
fi
for unit in allotd.socket allotd.service; do
  sed "s|/usr/local/bin/allot|$prefix/bin/allot|g" "$here/dist/systemd/$unit" \
    | install -D -m 644 /dev/stdin "$root/etc/systemd/system/$unit"
done
# systemd starts a service's processes at the top of its cgroup, which may
# hold none while cells below it have controllers (cgroup v2's rule): a
# restart while cells live would fail. systemd 254 and later start them in
# a subgroup instead (DelegateSubgroup=), the broker's own leaf; older ones
# do not know the setting, so it is a drop-in written only where the
# installing machine's systemd has it (docs/operations.md, "Restarts").
systemd_version=$(systemctl --version 2>/dev/null | sed -n '1s/^systemd \([0-9]*\).*/\1/p')
if [ -n "$systemd_version" ] && [ "$systemd_version" -ge 254 ]; then
  printf '# allot scripts/install-service.sh: systemd %s starts the broker in its own leaf\n[Service]\nDelegateSubgroup=broker\n' "$systemd_version" \
    | install -D -m 644 /dev/stdin "$root/etc/systemd/system/allotd.service.d/subgroup.conf"
fi
if [ ! -e "$root/etc/allot/allotd.toml" ]; then
  install -d -m 755 "$root/etc/allot"
  cat > "$root/etc/allot/allotd.toml" <<'TOML'
# allot broker configuration. Every key is optional; the keys, their
# defaults and meanings: man 5 allotd.toml (and operations.md among the
# documents in /usr/share/doc/allot or PREFIX/share/doc/allot). To see the
# settings in effect and check them against this machine:
#   allot daemon --check-config --config /etc/allot/allotd.toml
TOML
fi
"$bin" completions bash | install -D -m 644 /dev/stdin "$root/usr/share/bash-completion/completions/allot"
"$bin" completions zsh | install -D -m 644 /dev/stdin "$root/usr/share/zsh/vendor-completions/_allot"
"$bin" completions fish | install -D -m 644 /dev/stdin "$root/usr/share/fish/vendor_completions.d/allot.fish"
"$bin" man --out "$root$prefix/share/man/man1" > /dev/null
install -d -m 755 "$root$prefix/share/man/man5"
mv "$root$prefix/share/man/man1/allotd.toml.5" "$root$prefix/share/man/man5/"
# The documents the pages and the configuration file point to.
install -d -m 755 "$root$prefix/share/doc/allot"
install -m 644 "$here/README.md" "$here"/docs/*.md "$root$prefix/share/doc/allot/"

echo "installed under ${root:-/}: $prefix/bin/allot$installed_lab, /etc/systemd/system/allotd.{socket,service}, /etc/allot/allotd.toml, completions, man pages, documents"
if [ "$enable" = 1 ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl enable --now allotd.socket
  echo "allotd.socket enabled: the broker starts on the first connection (allot status)"
else
  echo "to start it: systemctl daemon-reload && systemctl enable --now allotd.socket"
fi
