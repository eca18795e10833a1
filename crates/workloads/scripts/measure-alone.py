#!/usr/bin/env python3
"""Single-job times of the workloads at scale 1, as in README.md.

    cargo build -p allot-workloads --release --example workload
    crates/workloads/scripts/measure-alone.py [kernel...]     # REPS=3 by default

Per kernel: REPS interleaved pairs (omp 2 threads, allot 2 workers), then one
run of each on CPU 0 only (taskset). Each run starts after a second with the
machine < 10 % busy (waiting at most two minutes), and the line printed for
it adds the CPU time the run used (ours_cpu) and the CPU time every other
process used meanwhile (others_cpu; from /proc/stat), so runs disturbed by
other work can be told apart. A SUMMARY line per kernel gives the medians.
"""
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = str(ROOT / "target/release/examples/workload")
HZ = os.sysconf("SC_CLK_TCK")


def cpu_ticks():
    """(all ticks, idle ticks) from the first line of /proc/stat."""
    v = list(map(int, open("/proc/stat").readline().split()[1:9]))
    return sum(v), v[3] + v[4]


def wait_quiet(limit=120.0):
    start = time.time()
    while time.time() - start < limit:
        a = cpu_ticks()
        time.sleep(1.0)
        b = cpu_ticks()
        total = b[0] - a[0]
        if total and (total - (b[1] - a[1])) / total < 0.10:
            return True
    return False


def run(args):
    quiet = wait_quiet()
    a = cpu_ticks()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b = cpu_ticks()
    busy = ((b[0] - a[0]) - (b[1] - a[1])) / HZ
    ours = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    line = [l for l in out.splitlines() if l.startswith("workload=")][-1]
    print(f"{line} ours_cpu={ours:.2f} others_cpu={max(0.0, busy - ours):.2f} quiet_start={quiet}", flush=True)
    return float(re.search(r"seconds=([0-9.]+)", line).group(1))


def main():
    kernels = sys.argv[1:] or ["pricing", "stencil", "pipeline", "anneal", "cluster"]
    reps = int(os.environ.get("REPS", "3"))
    for k in kernels:
        t = {"omp2": [], "allot2": [], "omp1": [], "allot1": []}
        for _ in range(reps):
            t["omp2"].append(run([WORKLOAD, k, "1", "omp"]))
            t["allot2"].append(run([WORKLOAD, k, "1", "allot"]))
        t["omp1"].append(run(["taskset", "-c", "0", WORKLOAD, k, "1", "omp"]))
        t["allot1"].append(run(["taskset", "-c", "0", WORKLOAD, k, "1", "allot"]))
        med = {v: sorted(x)[len(x) // 2] for v, x in t.items()}
        print(f"SUMMARY {k} " + " ".join(f"{v}={m:.3f}" for v, m in med.items())
              + f" allot/omp={med['allot2'] / med['omp2']:.3f}", flush=True)


if __name__ == "__main__":
    main()
