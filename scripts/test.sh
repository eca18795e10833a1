#!/usr/bin/env bash
# The project's checks: formatting, lints, every test. Run from anywhere.
# Live tests confine, signal and move only processes they start, and remove
# every cgroup they create.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test"
cargo test --workspace

step "all checks passed"
