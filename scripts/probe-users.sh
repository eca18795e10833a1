#!/usr/bin/env bash
# Two users probe one broker for what they may do to each other (allot
# bench users): end another's cell, take another's process into a cell,
# read another's cell names in the status, take every CPU as guarantees or
# through require, take a process out of root's cpuset cgroup. One line per
# check; exit status 1 if any fails. Needs root (the users are unassigned
# uids from 440000 that the probe's threads switch to; no account is made).
#
# Without --socket the probe starts a private broker and removes all it
# made. With --socket PATH it probes a broker started for the purpose (it
# registers cells and holds CPUs there); the socket's directory must let
# other users reach it.
#
#   sudo bash scripts/probe-users.sh [--socket PATH] [--backend cgroup1|cgroup2|affinity]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "probe-users: needs root (its users are uids it switches threads to)" >&2
  exit 2
fi
cargo build --release -q -p allot-cli -p allot-lab
exec target/release/allot bench users "$@"
