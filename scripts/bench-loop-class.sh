#!/usr/bin/env bash
# The broker's event loop as an ordinary thread (realtime = false) against
# the real-time class it takes by default (crates/broker/src/realtime.rs),
# on a machine its cells oversubscribe: five CPU hogs in cells, a request
# server with a p99 goal under --policy goals, and one CPU hog outside
# allot (no machine is idle). Per run, alternating the two settings:
#   status   round trips of `allot status --json` every 0.25 s, asked from
#            a SCHED_FIFO client (so the client's own waiting is not
#            counted): median, 99th percentile, largest
#   waited   the loop's time runnable but not run, per second of the run
#            (/proc/PID/schedstat)
#   grant    seconds from the server's registration to its first grant of
#            a single CPU (its timeline): how soon the policy acted
#   server   the server's own p50 and p99 over the second half
# then the medians of each setting. Starts its own brokers (cgroup v1,
# root) and removes everything it made.
#
#   bash scripts/bench-loop-class.sh [SECONDS] [REPEATS]
set -euo pipefail
secs=${1:-16}
reps=${2:-3}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-loop-class: needs root (cgroup v1, the real-time class)" >&2; exit 2; }
[ -e /sys/fs/cgroup/cpuset/cpuset.cpus ] || { echo "bench-loop-class: needs a cgroup v1 cpuset hierarchy" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

variant() { # realtime (true|false)
  (
    source scripts/lib/bench-broker.sh
    conf=$(mktemp)
    echo "realtime = $1" >"$conf"
    bench_broker "loop-$1" --policy goals --config "$conf"
    rm -f "$conf"
    bench_hogs 5
    sh -c 'while :; do :; done' &
    bench_pids="$bench_pids $!"
    local w0 t0
    w0=$(awk '{print $2}' /proc/"$broker"/task/"$broker"/schedstat)
    t0=$(date +%s%N)
    "$A" run --name server --goal p99=60ms -- "$A" bench serve --rate 300 --service-us 2000 \
      --seconds "$secs" --warmup $((secs / 2)) >"$dir/serve.json" &
    local server=$!
    bench_pids="$bench_pids $server"
    chrt -f 2 python3 - "$A" "$dir" "$((secs - 2))" <<'PY'
import json, subprocess, sys, time
a, d, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
lat, end, last = [], time.time() + secs, None
while time.time() < end:
    t = time.perf_counter()
    r = subprocess.run([a, "status", "--json"], capture_output=True, text=True)
    lat.append((time.perf_counter() - t) * 1e3)
    if r.returncode == 0:
        last = r.stdout
    time.sleep(0.25)
json.dump({"lat": lat}, open(d + "/lat.json", "w"))
open(d + "/status.json", "w").write(last or "{}")
PY
    local w1 t1
    w1=$(awk '{print $2}' /proc/"$broker"/task/"$broker"/schedstat)
    t1=$(date +%s%N)
    wait "$server" || true
    python3 - "$1" "$dir" "$((w1 - w0))" "$((t1 - t0))" <<'PY' | tee -a "$OUT"
import json, sys
label, d, waited_ns, span_ns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lat = sorted(json.load(open(d + "/lat.json"))["lat"])
st = json.load(open(d + "/status.json"))
srv = next((c for c in st.get("cells", []) if c["name"] == "server"), {})
grant = None
for s in (srv.get("timeline") or {}).get("steps", []):
    if s["step"] == "grant" and "CPUs " in s["detail"]:
        cpus = s["detail"].split("CPUs ")[1].split(" ")[0]
        if cpus and "," not in cpus and "-" not in cpus:
            grant = s["at_us"] / 1e6
            break
try:
    sv = json.load(open(d + "/serve.json"))
except Exception:
    sv = {"p50_us": float("nan"), "p99_us": float("nan")}
row = {"realtime": label, "status_p50": lat[len(lat) // 2], "status_p99": lat[int(0.99 * (len(lat) - 1))],
       "status_max": lat[-1], "waited_ms_per_s": waited_ns / 1e6 / (span_ns / 1e9),
       "grant_s": grant, "server_p50": sv["p50_us"] / 1e3, "server_p99": sv["p99_us"] / 1e3}
print("RESULT " + json.dumps(row))
print("realtime=%-5s status p50 %6.1f ms p99 %7.1f ms max %7.1f ms | loop waited %6.1f ms/s | "
      "single-CPU grant at %s s | server p50 %7.1f ms p99 %7.1f ms"
      % (label, row["status_p50"], row["status_p99"], row["status_max"], row["waited_ms_per_s"],
         "%.1f" % grant if grant is not None else "never", row["server_p50"], row["server_p99"]))
PY
  )
}

export OUT=$out
echo "== the event loop's class: 5 hog cells, a goal server, 1 hog outside allot, on $(nproc) CPUs, ${secs} s per run =="
for r in $(seq "$reps"); do
  variant false
  variant true
done 2>&1 | grep -v 'Killed  *setsid\|^RESULT'
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
print("== medians")
for label in ("false", "true"):
    rs = [r for r in rows if r["realtime"] == label]
    if not rs:
        continue
    med = lambda k: statistics.median(r[k] for r in rs if r[k] is not None) if any(r[k] is not None for r in rs) else float("nan")
    never = sum(r["grant_s"] is None for r in rs)
    print("realtime=%-5s status p50 %6.1f ms p99 %7.1f ms max %7.1f ms | loop waited %6.1f ms/s | "
          "single-CPU grant at %.1f s (never in %d of %d) | server p99 %7.1f ms"
          % (label, med("status_p50"), med("status_p99"), med("status_max"), med("waited_ms_per_s"),
             med("grant_s"), never, len(rs), med("server_p99")))
PY
