# shellcheck shell=bash
# Poli-C's image-server case study, the part shared by
# scripts/bench-image-servers.sh (this machine, a broker of its own) and
# the images step of scripts/bench-16cpu.sh (a borrowed machine, from a
# kit built here): K server processes, each serving RATE/K requests per
# second (exponential arrivals, a burst of BURST seconds, a seed of its
# own), every request blurring an image with OpenMP
# (crates/capi/benches/c/image_server.c).
#
# Variants (img_variants):
#   fixed-N   libgomp, N threads per request in every process, for N = 1,
#             2, 4, ... up to the CPUs (and at least 4)
#   fair      allot_require(allot_fair_cores()) in each request, the
#             processes coordinated through the broker on $img_socket (the
#             shim preloaded, so each team joins its block)
#   numa      the same with allot_fair_numa()
#   alone     fair without a broker: each process divides the machine as
#             if it were alone
#
# Set before calling:
#   img_progs   the programs: image_server, image_server_plain, and the
#               libraries in lib/ (liballot.so.0) and shim/ (the shim)
#   img_dir     a scratch directory (traces, outputs, results)
#   img_k       server processes          img_burst  seconds per burst
#   img_socket  the broker's socket       img_cpus   the machine's CPUs
#   img_only    (optional) the variants to run, space-separated
#
# img_measure LOADS ROUNDS prints progress to stderr and the tables (mean
# latency over every process's requests, medians of rounds, the variants'
# order rotating from round to round; against the best fixed size, the
# median and range of each round's ratio to the best fixed size of that
# round; then the CPU time that idled while a request waited, per
# request; then each variant's requests on average: their wait for cores,
# their service time and their team size) to stdout.

# Builds the programs in the tree $1 (release, as liballot ships), with
# the image server's bench harness: target/tmp/image_server. On the build
# machine only (it needs cargo).
img_build() {
  (cd "$1" && cargo test --release -q -p allot-capi --bench image_server >/dev/null)
}

# The variants measured on $img_cpus CPUs ($img_only, when set: those,
# space-separated).
img_variants() {
  if [[ -n ${img_only:-} ]]; then
    echo "$img_only"
    return
  fi
  local n=1 top=$((img_cpus > 4 ? img_cpus : 4))
  while ((n <= top)); do
    printf 'fixed-%d ' "$n"
    n=$((n * 2))
  done
  echo fair numa alone
}

# One request alone on one thread, ms (the calibration's median).
img_service_ms() {
  "$img_progs/image_server_plain" calibrate | sed -n 's/.*service1_ms=\([0-9.]*\).*/\1/p'
}

# Runs variant $1 at $2 requests/s per process (seeds from $3): one line
# per process, "requests mean_ms p95_ms". A process that fails (or blurs
# differently) is reported on stderr and its line left out.
img_run() {
  local v=$1 rate=$2 seed=$3 i shim pids=()
  shim=$(ls "$img_progs"/shim/*.so | head -1)
  # A process that fails writes no trace: none of an earlier load's stays.
  rm -f "$img_dir"/trace-"$v"-*
  for i in $(seq "$img_k"); do
    local opts=(--burst "$img_burst" --seed $((seed + i)) --trace "$img_dir/trace-$v-$i")
    case "$v" in
      fixed-*) "$img_progs/image_server_plain" fixed "${v#fixed-}" "$rate" "${opts[@]}" ;;
      fair | numa)
        ALLOT_SOCKET=$img_socket LD_PRELOAD=$shim LD_LIBRARY_PATH=$img_progs/lib \
          "$img_progs/image_server" "$v" "$rate" "${opts[@]}" ;;
      alone)
        ALLOT_SOCKET=/nonexistent LD_PRELOAD=$shim LD_LIBRARY_PATH=$img_progs/lib \
          "$img_progs/image_server" fair "$rate" "${opts[@]}" ;;
    esac >"$img_dir/out-$v-$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || echo "image server $((i + 1)) of $v failed: $(tail -n 2 "$img_dir/out-$v-$((i + 1))")" >&2
  done
  for i in $(seq "$img_k"); do
    sed -n 's/^result .*requests=\([0-9]*\) mean_ms=\([0-9.]*\) .*p95_ms=\([0-9.]*\).*/\1 \2 \3/p' "$img_dir/out-$v-$i"
  done
}

# CPU ms that idled while a request of variant $1 waited, per request:
# every request's arrival, start and end on one time line; while requests
# wait, each idle CPU (CPUs less the cores of the requests running) up to
# the number waiting is time a freed core was not yet passed on.
img_idle_while_waiting() {
  python3 - "$img_cpus" "$img_dir"/trace-"$1"-* <<'PY'
import sys
cpus, events, n = int(sys.argv[1]), [], 0
for path in sys.argv[2:]:
    for line in open(path):
        arrival, start, done, cores = line.split()[:4]
        n += 1
        events += [(float(arrival), 0, 1), (float(start), int(cores), -1),
                   (float(done), -int(cores), 0)]
events.sort()
busy = waiting = 0
idle = 0.0
last = events[0][0] if events else 0.0
for t, d_busy, d_wait in events:
    idle += min(max(0, cpus - busy), waiting) * (t - last)
    busy, waiting, last = busy + d_busy, waiting + d_wait, t
print(f"{idle * 1e3 / max(1, n):.3f}")
PY
}

# What variant $1's requests were, on average: "wait_ms service_ms cores"
# (arrival to start, start to end, team size).
img_shape() {
  cat "$img_dir"/trace-"$1"-* | awk '{ n++; w += $2 - $1; s += $3 - $2; c += $4 }
    END { if (n) printf "%.2f %.2f %.2f\n", w / n * 1e3, s / n * 1e3, c / n }'
}

img_measure() { # LOADS (comma-separated fractions of capacity) ROUNDS
  local loads=$1 rounds=$2 one capacity load each r j v nv
  local -a variants
  read -r -a variants <<<"$(img_variants)"
  nv=${#variants[@]}
  one=$(img_service_ms)
  [[ -n $one ]] || { echo "image servers: the calibration failed" >&2; return 1; }
  capacity=$(python3 -c "print($img_cpus * 1000 / $one)")
  echo "$img_k image servers on $img_cpus CPUs: one request $one ms on one thread, capacity $(printf %.1f "$capacity") requests/s; $rounds round(s) of $img_burst s; variants ${variants[*]}"
  : >"$img_dir/results"
  : >"$img_dir/idle"
  : >"$img_dir/shape"
  for load in ${loads//,/ }; do
    each=$(python3 -c "print($capacity * $load / $img_k)")
    for r in $(seq "$rounds"); do
      for ((j = 0; j < nv; j++)); do
        v=${variants[$(((j + r) % nv))]}
        img_run "$v" "$each" $((r * 100)) | while read -r n mean p95; do
          echo "$load $r $v $n $mean $p95" >>"$img_dir/results"
        done
        case "$v" in fair | numa | alone) echo "$load $v $(img_idle_while_waiting "$v")" >>"$img_dir/idle" ;; esac
        echo "$load $v $(img_shape "$v")" >>"$img_dir/shape"
        echo "  load $load round $r: $v done" >&2
      done
    done
  done
  python3 - "$img_dir/results" "$capacity" "$img_dir/idle" "$img_dir/shape" "${variants[@]}" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
cap = float(sys.argv[2])
order = sys.argv[5:]
by = collections.defaultdict(lambda: collections.defaultdict(list))
for load, r, v, n, mean, p95 in rows:
    by[(load, v)][r].append((int(n), float(mean), float(p95)))
def name(v):
    return {"fair": "fair_cores", "numa": "fair_numa", "alone": "fair_cores alone"}.get(
        v, v.replace("-", " "))
ours = [v for v in ("fair", "numa") if v in order]
print("mean latency over every process's requests, ms (worst process's p95), median of rounds")
print("| load | rate (req/s) | " + " | ".join(name(v) for v in order) + " | "
      + " | ".join(f"{name(v)} ÷ best fixed" for v in ours) + " |")
print("|---:|---:|" + "---:|" * (len(order) + len(ours)))
for load in sorted({l for l, _ in by}, key=float):
    cells, means = [], {}
    for v in order:
        per_round = [p for p in by[(load, v)].values() if p]
        if not per_round:
            cells.append("-")
            continue
        means[v] = statistics.median(
            sum(n * x for n, x, _ in procs) / max(1, sum(n for n, _, _ in procs))
            for procs in per_round)
        p = statistics.median(max(p for _, _, p in procs) for procs in per_round)
        cells.append(f"{means[v]:.1f} ({p:.0f})")
    # Against the best fixed size of the same round (the variants of a
    # round run back to back, so a VM's change of speed between rounds
    # does not move the ratio): the median of the rounds, and their range.
    def round_mean(v, r):
        procs = by[(load, v)].get(r)
        if not procs:
            return None
        return sum(n * x for n, x, _ in procs) / max(1, sum(n for n, _, _ in procs))
    ratios = []
    for v in ours:
        per = []
        for r in sorted({r for (l, _), rs in by.items() if l == load for r in rs}):
            fixed = [m for f in order if f.startswith("fixed") for m in [round_mean(f, r)] if m]
            mine = round_mean(v, r)
            if fixed and mine:
                per.append(mine / min(fixed))
        ratios.append(f"**{statistics.median(per):.2f}** ({min(per):.2f}–{max(per):.2f})"
                      if per else "-")
    print(f"| {float(load) * 100:.0f} % | {cap * float(load):.1f} | " + " | ".join(cells)
          + " | " + " | ".join(ratios) + " |")
idle = collections.defaultdict(list)
for line in open(sys.argv[3]):
    load, v, ms = line.split()
    idle[(load, v)].append(float(ms))
waits = [v for v in ("fair", "numa", "alone") if v in order]
print()
print("CPU idle while a request waited, ms per request (median of rounds)")
print("| load | " + " | ".join(name(v) for v in waits) + " |")
print("|---:|" + "---:|" * len(waits))
for load in sorted({l for l, _ in idle}, key=float):
    print(f"| {float(load) * 100:.0f} % | " + " | ".join(
        f"{statistics.median(idle[(load, v)]):.2f}" if idle[(load, v)] else "-"
        for v in waits) + " |")
shape = collections.defaultdict(list)
for line in open(sys.argv[4]):
    f = line.split()
    if len(f) == 5:
        shape[(f[0], f[1])].append(tuple(float(x) for x in f[2:]))
print()
print("per request: wait for cores + service ms (mean team size), median of rounds")
print("| load | " + " | ".join(name(v) for v in order) + " |")
print("|---:|" + "---:|" * len(order))
for load in sorted({l for l, _ in shape}, key=float):
    cells = []
    for v in order:
        rows = shape[(load, v)]
        if not rows:
            cells.append("-")
            continue
        w, sv, c = (statistics.median(r[i] for r in rows) for i in range(3))
        cells.append(f"{w:.1f} + {sv:.1f} ({c:.2f})")
    print(f"| {float(load) * 100:.0f} % | " + " | ".join(cells) + " |")
PY
}
