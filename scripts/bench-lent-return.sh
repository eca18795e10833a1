#!/usr/bin/env bash
# How long a guaranteed cell waits for the CPUs it lent while idle, once it
# wants them back. An owner cell guaranteed the broker's whole capacity
# (`--min N`) idles with one sleeping process, so the broker lends the rest
# of its entitlement to a best-effort hog; then it starts N spinning
# processes, and the time from their start to its grant holding N CPUs
# again is read from `allot status --json` (polled as fast as the command
# runs, a few ms). Over TRIALS, the median, 99th percentile and maximum.
# This is what "a guaranteed cell owns its CPUs" means while it lends them
# (docs/architecture.md, "Lending"). Starts its own broker (cgroup v1,
# root), removes everything it made.
#
#   bash scripts/bench-lent-return.sh [TRIALS] [DAEMON OPTIONS...]
set -euo pipefail
trials=${1:-30}
shift || true
cd "$(dirname "$0")/.."
source scripts/lib/bench-broker.sh
bench_broker lentreturn "$@"

status() { "$A" status --json; }
field() { # python expression over the status document `s`
  status | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)"
}
n=$(field 's["machine"]["capacity"]')
[ "$n" -ge 2 ] || { echo "needs a capacity of 2 CPUs or more (it is $n)" >&2; exit 1; }
ctl=$dir/ctl
mkdir -p "$ctl"
cat >"$dir/owner.sh" <<OWNER
#!/bin/sh
# Idles until told to go; then $n spinners until told to stop.
while :; do
  while [ ! -e $ctl/go ]; do sleep 0.002; done
  date +%s.%N >$ctl/started
  for i in \$(seq $n); do sh -c 'while [ ! -e $ctl/stop ]; do :; done' & done
  wait
  rm -f $ctl/go $ctl/stop
done
OWNER
bench_hogs 1
setsid "$A" run --name owner --min "$n" -- sh "$dir/owner.sh" </dev/null >/dev/null 2>"$dir/owner.log" &
bench_pids="$bench_pids $!"
echo "== a guaranteed cell of $n CPUs takes back what it lent, $trials trials, on $(nproc) CPUs =="
# When the kernel got the owner's grant back is read from the broker's own
# record of the cell (its timeline in `allot status --json`: each cpuset
# write on CLOCK_MONOTONIC), after each trial: polling while the spinners
# run would compete with them for the CPUs and measure its own delay.
python3 - "$A" "$ctl" "$n" "$trials" <<'PY'
import json, os, subprocess, sys, time
allot, ctl, n, trials = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def count(cpus):
    k = 0
    for part in cpus.split(","):
        if part:
            a, _, b = part.partition("-")
            k += int(b or a) - int(a) + 1
    return k

def owner():
    s = json.loads(subprocess.run([allot, "status", "--json"], capture_output=True,
                                  check=True).stdout)
    return next(c for c in s["cells"] if c["name"] == "owner")

offset_ns = time.time_ns() - time.monotonic_ns()  # realtime - monotonic
delays = []
for t in range(trials):
    deadline = time.time() + 10
    while count(owner()["cpus"]) >= n:  # idle: wait until part of it is lent
        if time.time() > deadline:
            sys.exit(f"trial {t}: the idle owner never lent a CPU")
        time.sleep(0.05)
    open(os.path.join(ctl, "go"), "w").close()
    started = os.path.join(ctl, "started")
    while not os.path.exists(started) or not open(started).read().strip():
        time.sleep(0.01)
    start_ns = int(float(open(started).read()) * 1e9) - offset_ns
    time.sleep(1.5)
    tl = owner()["timeline"]
    writes = [tl["origin_ns"] + 1000 * st["at_us"] for st in tl["steps"]
              if st["step"] == "cpuset" and count(st["detail"].split()[-1]) >= n]
    back = [w for w in writes if w >= start_ns]
    if not back:
        sys.exit(f"trial {t}: no cpuset write of {n} CPUs after the spinners started: {tl}")
    delays.append((back[0] - start_ns) / 1e6)
    os.remove(started)
    open(os.path.join(ctl, "stop"), "w").close()
    time.sleep(0.3)
d = sorted(delays)
q = lambda p: d[min(len(d) - 1, int(p * len(d)))]
print("trials %d: from the spinners' start to the kernel holding the owner's whole grant: "
      "p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (len(d), q(0.5), q(0.99), d[-1]))
PY
