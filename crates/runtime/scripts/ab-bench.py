#!/usr/bin/env python3
"""Compares two builds of the runtime's divan benchmark, interleaved.

    ab-bench.py OLD_BINARY NEW_BINARY [ROUNDS] [FILTER...]

Build each binary with `cargo bench -p allot-runtime --bench runtime
--no-run` at the revision you want (a `git worktree` for the older one) and
copy the executable it names. Each round runs both with the same filters
(default: the spawn/join benchmarks and rayon's join, which is the same code
in both builds and so shows the noise), OLD first in even rounds and NEW
first in odd ones; the report gives, per benchmark, the median of the
per-round medians and NEW/OLD.

A binary whose name contains `batch_inside` (the runtime's example of that
name, built with `cargo build --release -p allot-runtime --example
batch_inside`) is run with FILTER... as its arguments, and its p50 figures
are the medians compared.
"""
import re
import statistics
import subprocess
import sys

UNITS = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def example_medians(binary, args):
    out = subprocess.run([binary, *args], capture_output=True, text=True, check=True).stdout
    found = {}
    for part in out.split("|"):
        m = re.match(r"\s*(.*?) \(µs\): p10 \S+ p50 (\S+)", part)
        if m:
            found[m.group(1)] = float(m.group(2)) * 1e-6
    return found


def medians(binary, filters):
    if "batch_inside" in binary:
        return example_medians(binary, filters)
    out = subprocess.run([binary, "--bench", *filters], capture_output=True, text=True, check=True).stdout
    found, path = {}, []
    for line in out.splitlines():
        m = re.match(r"^([│ ]*)[├╰]─ (\S+)(.*)$", line)
        if not m:
            continue
        depth = len(m.group(1)) // 3
        path = path[:depth] + [m.group(2)]
        cols = m.group(3).split("│")
        if len(cols) >= 3 and cols[2].strip():
            value, unit = cols[2].split()
            found["/".join(path)] = float(value) * UNITS[unit]
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    default = [] if "batch_inside" in old else ["allot_join", "allot_batch_in_pool", "allot_scope_batch", "rayon_join"]
    filters = sys.argv[4:] or default
    runs = {"old": [], "new": []}
    for r in range(rounds):
        order = (("old", old), ("new", new))
        for name, binary in order if r % 2 == 0 else order[::-1]:
            runs[name].append(medians(binary, filters))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"{'benchmark':40} {'old median':>12} {'new median':>12} {'new/old':>8}")
    for bench in sorted(runs["old"][0]):
        o = statistics.median(x[bench] for x in runs["old"])
        n = statistics.median(x[bench] for x in runs["new"])
        print(f"{bench:40} {o * 1e6:10.2f}µs {n * 1e6:10.2f}µs {n / o:8.3f}")


if __name__ == "__main__":
    main()
