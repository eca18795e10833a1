#!/usr/bin/env bash
# Installs the runtimes that speak the Thread Composability Manager
# protocol (oneTBB with its headers, Intel's OpenMP) and Intel's own
# manager (tcmlib, for comparison) from PyPI, each into a private venv under
# target/: nothing outside the repository changes. Prints the directory of
# the runtimes (its lib/ and include/) on the last line; the TCM tests
# (crates/capi/tests/tcm.rs) and scripts/bench-tcm.sh read it from
# ALLOT_INTEL_RUNTIMES.
#
# Intel's libtcm goes into a venv of its own: beside libtbb it would be
# what oneTBB finds, and the tests must choose which manager a program gets.
#
#   bash scripts/intel-runtimes.sh            # install (or reuse) and print the path
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned: what the tests were written against.
RUNTIMES=(tbb==2023.2.0 tbb-devel==2023.2.0 intel-openmp==2026.2.0)
INTEL_TCM=(tcmlib==1.6.0)

venv() { # DIR PACKAGES...
  local dir=$1
  shift
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$*" ]; then
    return 0
  fi
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check --no-deps "$@" >&2
  echo "$*" >"$dir/.installed"
}

venv target/intel-runtimes "${RUNTIMES[@]}"
venv target/intel-tcm "${INTEL_TCM[@]}"
for f in target/intel-runtimes/lib/libtbb.so.12 target/intel-runtimes/lib/libiomp5.so \
  target/intel-runtimes/include/tbb/parallel_for.h target/intel-tcm/lib/libtcm.so.1; do
  [ -e "$f" ] || { echo "error: $f is missing after the install" >&2; exit 1; }
done
echo "$PWD/target/intel-runtimes"
