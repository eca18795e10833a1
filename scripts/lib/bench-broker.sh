# Sourced by the benchmark scripts that need a broker of their own
# (cgroup v1, root). `bench_broker LABEL [DAEMON OPTIONS]` builds allot
# (release), starts a broker on a private socket with the cgroup name
# allot-bench-LABEL-PID (and the options, e.g. --policy goals),
# exports ALLOT_SOCKET and waits until it answers. It sets:
#   A     the allot binary     dir   a private temporary directory
#   name  the broker's cgroup name
# On exit (also on failure) it kills what the cells hold, then the pids a
# script lists in `bench_pids` (its `allot run` wrappers), stops the
# broker, removes any cgroup left under `name`, and removes `dir`.
# `bench_hogs N` then starts N CPU hogs in best-effort cells (hog-1…).

bench_kill_cells() {
  local p
  for p in $(cat /sys/fs/cgroup/cpuset/"$name"/cell-*/cgroup.procs 2>/dev/null); do
    kill -9 "$p" 2>/dev/null || true
  done
}

bench_cleanup() {
  # `allot run` starts its program in a process group of its own: kill
  # what the cells hold (by pid, from the cgroups), then the wrappers,
  # then stop the broker, which removes its cgroups once no cell is left.
  local h
  bench_kill_cells
  [ -n "${bench_pids:-}" ] && kill -- $bench_pids 2>/dev/null || true
  sleep 0.5
  [ -n "${broker:-}" ] && kill "$broker" 2>/dev/null && wait "$broker" 2>/dev/null || true
  for h in cpuset cpu cpuacct freezer blkio; do
    if [ -d "/sys/fs/cgroup/$h/$name" ]; then
      echo "warning: /sys/fs/cgroup/$h/$name is left; removing it" >&2
      find "/sys/fs/cgroup/$h/$name" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
      rmdir "/sys/fs/cgroup/$h/$name" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
}

bench_broker() { # LABEL [DAEMON OPTIONS...]
  local label=$1
  shift
  cargo build --release -q -p allot-cli -p allot-lab
  A=$PWD/target/release/allot
  dir=$(mktemp -d)
  name=allot-bench-$label-$$
  bench_pids=""
  trap bench_cleanup EXIT
  "$A" daemon --socket "$dir/s" --backend cgroup1 --cgroup-name "$name" "$@" 2>"$dir/log" &
  broker=$!
  export ALLOT_SOCKET=$dir/s
  for _ in $(seq 50); do "$A" status >/dev/null 2>&1 && return; sleep 0.1; done
  echo "the broker did not answer; its log:" >&2
  cat "$dir/log" >&2
  exit 1
}

bench_hogs() { # N: N CPU hogs in best-effort cells hog-1..hog-N, killed on exit
  local i
  for i in $(seq "$1"); do
    setsid "$A" run --name "hog-$i" -- sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
    bench_pids="$bench_pids $!"
  done
  sleep 1
}
