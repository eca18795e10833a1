#!/usr/bin/env bash
# The Python package's checks: its Rust half formatted and lint-clean, then
# the abi3 manylinux wheel (scripts/build-wheel.sh) installed into a fresh
# virtual environment (with Debian's numpy and threadpoolctl visible) and
# pytest against a private broker.
# Needs the allot binary built (scripts/test.sh builds it); $ALLOT_BIN
# overrides which one.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --manifest-path python/Cargo.toml -- --check
cargo clippy --manifest-path python/Cargo.toml --all-targets -- -D warnings

# The binary this run built (the test command builds the debug one), not
# an older release build left by experiments.
if [ -z "${ALLOT_BIN:-}" ] && [ -x target/debug/allot ]; then
  export ALLOT_BIN=$PWD/target/debug/allot
fi

work=$(mktemp -d /tmp/allot-python-XXXXXX)
trap 'rm -rf "$work"' EXIT
wheel=$(bash scripts/build-wheel.sh "$work/wheels" | tail -1)
echo "testing $wheel"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$wheel"
# From outside the source tree, so the installed package is what is tested.
cd "$work"
"$work/venv/bin/python" -c 'import allot, sys; print("allot", allot.PROTOCOL_VERSION, "from", allot.__file__)'
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests"
