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
  libopenblas0-pthread libopenblas0-openmp libblis4-pthread libtbb-dev
                                      # the shim's follower tests (OpenBLAS, BLIS, oneTBB)
  python3-numpy                       # the BLAS benchmark mix and the numpy live test
  curl unzip ca-certificates          # fetching the Go toolchain below
  systemd                             # systemd-analyze verify and systemd-socket-activate (service tests)
  tmux                                # the live test of allot top
  python3-venv python3-pytest python3-threadpoolctl  # the Python package's tests
  slurmctld slurmd slurm-client munge libslurm-dev   # the Slurm plugin and its live test (scripts/test-slurm.sh)
  qemu-system-x86 busybox-static cpio # the guest lane (scripts/test-guest.sh: cgroup v2 kernels under QEMU)
)

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages (install them as root): ${missing[*]}" >&2
  else
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Packages with daemons (munge, slurmctld, slurmd) are installed, not
    # started: the tests start their own, and nothing else on this machine
    # should change. A policy-rc.d of ours (only if there is none) tells
    # the maintainer scripts so, for the length of the install.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      policy=/usr/sbin/policy-rc.d
      printf '#!/bin/sh\n# allot scripts/deps.sh: no daemon starts while it installs packages\nexit 101\n' >"$policy"
      chmod 755 "$policy"
      trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
    if [ -n "$policy" ]; then
      rm -f "$policy"
      trap - EXIT
    fi
  fi
fi

# Go 1.25 or later (the live test of a Go program following its CPU set).
# Debian 12 ships Go 1.19, so the toolchain comes from the Go module proxy,
# as `go` itself fetches toolchains, into /usr/local/go.
GO_TOOLCHAIN=go1.25.4
go_minor() {
  "$1" version 2>/dev/null | sed -n 's/.* go1\.\([0-9]*\).*/\1/p'
}
go_ok() {
  local go minor
  for go in go /usr/local/go/bin/go; do
    minor=$(go_minor "$go")
    [ -n "$minor" ] && [ "$minor" -ge 25 ] && return 0
  done
  return 1
}
if ! go_ok; then
  if [ "$(id -u)" -ne 0 ] || [ -e /usr/local/go ]; then
    echo "missing: Go 1.25 or later (install $GO_TOOLCHAIN into /usr/local/go as root)" >&2
  else
    echo "installing: $GO_TOOLCHAIN from proxy.golang.org into /usr/local/go"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    curl -fsSL -o "$tmp/go.zip" \
      "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip"
    unzip -q "$tmp/go.zip" -d "$tmp/x"
    mv "$tmp/x/golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" /usr/local/go
    # Module zips carry no file modes: the tools must be made executable.
    chmod -R a+rX /usr/local/go
    chmod a+x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/*
    /usr/local/go/bin/go version
  fi
fi

# ninja 1.13, a jobserver client (the live test of a ninja build in a cell,
# crates/cli/tests/jobserver_live.rs). Debian 12 ships 1.11, so it comes
# from PyPI, into the build tree (target/tools/ninja), not the system.
NINJA_VERSION=1.13.0
ninja_dir="$(cd "$(dirname "$0")/.." && pwd)/target/tools/ninja"
if ! "$ninja_dir/bin/ninja" --version 2>/dev/null | grep -q "^$NINJA_VERSION"; then
  echo "installing: ninja $NINJA_VERSION from PyPI into $ninja_dir"
  rm -rf "$ninja_dir"
  python3 -m venv "$ninja_dir"
  "$ninja_dir/bin/pip" install -q "ninja==$NINJA_VERSION"
  "$ninja_dir/bin/ninja" --version
fi
