#!/usr/bin/env bash
# The guest lane: allot's live tests on a real pure cgroup v2 kernel, a
# two-node NUMA machine and systemd as PID 1, each in a throwaway guest
# booted under QEMU (scripts/guest.sh: Debian's kernel, this machine's
# userland read-only under a tmpfs overlay). This machine's cpuset is
# cgroup v1's, so these paths are reached nowhere else in the test command.
#
#   bash scripts/test-guest.sh [PART...]       # default: every part
#
# Parts (each one boot; the guest is emulated, so no check judges speed):
#   v2          kernel 6.12, 4 CPUs: the cgroup2 backend's live tests, the
#               unit tests on v2 paths, `allot run` on cgroup2 (confinement,
#               exclusive cells as partitions, time cells gated with
#               cgroup.freeze, memory min/max and an OOM kill in a cell,
#               best effort frozen and thawed, adoption after kill -9, no
#               directory left), require's memory cap (memory.max, an OOM
#               kill past it), and a short chaos soak on cgroup2
#   kernel-6.1  Debian 12's own kernel, 4 CPUs: the cgroup2 backend's live
#               tests and `allot run` on cgroup2 again
#   numa        kernel 6.12, 8 CPUs in 2 NUMA nodes: topology from the
#               kernel, the runtime's nearest-first stealing order, cells
#               kept on one node or spanning both, require's fair_numa
#   systemd     kernel 6.12, systemd as PID 1: the packaged units installed,
#               socket activation, sd_notify readiness, cells in the
#               delegated subtree, restarts, journal priorities
#   slurm       kernel 6.12, 4 CPUs: a one-node Slurm cluster with
#               proctrack/cgroup, task/cgroup and cgroup/v2, allot's SPANK
#               plugin: steps in Slurm's cgroups on their cells' CPUs, two
#               jobs sharing the node, both ending clean
#
# Builds the test binaries first (cargo, debug profile: what `cargo test`
# built already). Results and each guest's console log land in
# target/guest/lane/PART/; a summary with each part's time is printed and
# kept in target/guest/lane/summary.txt.
#
# Without QEMU or the kernel package the lane is skipped with a warning,
# or fails under ALLOT_STRICT_TESTS=1 (CI). Environment:
#   ALLOT_GUEST_TIMEOUT        seconds each part may take (default 900)
#   ALLOT_GUEST_CHAOS_SECONDS  length of the v2 part's soak (default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

ALL_PARTS=(v2 kernel-6.1 numa systemd slurm)
parts=("$@")
((${#parts[@]})) || parts=("${ALL_PARTS[@]}")
for p in "${parts[@]}"; do
  case " ${ALL_PARTS[*]} " in *" $p "*) ;; *) echo "test-guest: unknown part $p (parts: ${ALL_PARTS[*]})" >&2; exit 2 ;; esac
done

skip_or_fail() {
  if [[ ${ALLOT_STRICT_TESTS:-} == 1 ]]; then
    echo "test-guest: $* (ALLOT_STRICT_TESTS=1: every test must run)" >&2
    exit 1
  fi
  echo "test-guest: skipped: $*" >&2
  exit 0
}
[[ $(id -u) == 0 ]] || skip_or_fail "needs root (the guest runs this machine's userland as root)"
command -v qemu-system-x86_64 >/dev/null || skip_or_fail "no qemu-system-x86_64 (scripts/deps.sh installs qemu-system-x86)"
[[ -x /bin/busybox ]] || skip_or_fail "no /bin/busybox (scripts/deps.sh installs busybox-static)"

target=${CARGO_TARGET_DIR:-$repo/target}
lane=$target/guest/lane
mkdir -p "$lane"
bins=$lane/bins

# The test binaries, by cargo's own account of what it built.
echo "test-guest: building the test binaries"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
{
  cargo test -q -p allot-enforce --lib --test cgroup2 --no-run --message-format=json
  cargo test -q -p allot-cli --bin allot --test v2_live --test numa_live --no-run --message-format=json
  cargo test -q -p allot-require --test memory_cap_live --no-run --message-format=json
  cargo build -q -p allot-cli -p allot-lab --bins --message-format=json
  cargo build -q -p allot-capi --message-format=json # liballot, for the Slurm plugin
} >"$json"
python3 - "$json" "$bins" <<'PY'
import json, sys
messages, out = sys.argv[1], sys.argv[2]
names = {("allot_enforce", "lib"): "enforce-unit", ("cgroup2", "test"): "enforce-cgroup2",
         ("allot", "bin"): "cli-unit", ("v2_live", "test"): "v2_live",
         ("numa_live", "test"): "numa_live", ("memory_cap_live", "test"): "memory_cap_live"}
found = {}
for line in open(messages):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    key = (m["target"]["name"], m["target"]["kind"][0])
    if key in names:
        found[names[key]] = m["executable"]
missing = set(names.values()) - set(found)
if missing:
    sys.exit(f"test-guest: not built: {', '.join(sorted(missing))}")
with open(out, "w") as f:
    for name, exe in sorted(found.items()):
        f.write(f"{name} {exe}\n")
PY

timeout=${ALLOT_GUEST_TIMEOUT:-900}
summary=$lane/summary.txt
: >"$summary"
failed=()
for p in "${parts[@]}"; do
  opts=(--timeout "$timeout" --out "$lane/$p")
  case $p in
    v2) opts+=(--kernel 6.12 --cpus 4) ;;
    kernel-6.1) opts+=(--kernel 6.1 --cpus 4) ;;
    numa) opts+=(--kernel 6.12 --cpus 8 --numa 2 --mem 4096) ;;
    systemd) opts+=(--kernel 6.12 --cpus 4 --init systemd) ;;
    slurm) opts+=(--kernel 6.12 --cpus 4) ;;
  esac
  echo
  echo "==> guest lane: $p (scripts/guest.sh ${opts[*]})"
  t0=$SECONDS
  rc=0
  bash scripts/guest.sh "${opts[@]}" -- bash scripts/guest/lane "$p" "$bins" || rc=$?
  took=$((SECONDS - t0))
  verdict=passed
  ((rc == 0)) || { verdict="FAILED (exit $rc)"; failed+=("$p"); }
  printf '%-11s %4d s  %s\n' "$p" "$took" "$verdict" | tee -a "$summary"
done

echo
echo "guest lane summary (wall time per part, boot included):"
cat "$summary"
if ((${#failed[@]})); then
  echo "test-guest: failed: ${failed[*]} (console logs in $lane/PART/console.log)" >&2
  exit 1
fi
