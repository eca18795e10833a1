# Sourced by scripts/test-slurm.sh and scripts/bench-slurm.sh: a one-node
# Slurm cluster with allot's SPANK plugin, made of the caller's own
# processes (root; Debian's slurmctld, slurmd and munge).
#
#   slurm_cluster_start [BROKER OPTIONS...]
#
# builds allot (debug, or release with SLURM_ALLOT_PROFILE=release),
# installs liballot, the shim and the plugin into a private temporary
# directory, and starts, on local addresses only:
#   - an allot broker (cgroup v1, cgroup name allot-slurm-PID, socket
#     $cluster/allot/allot.sock) with the given options;
#   - munged with a key of its own, slurmctld and slurmd, all reading
#     $cluster/slurm.conf (exported as SLURM_CONF), with the plugin in
#     $cluster/plugstack.conf. Ports are picked per run.
# It sets: cluster (the directory), A (the allot binary), node (the node's
# name), ALLOT_SOCKET and SLURM_CONF (exported).
#
# SLURM_TASK=cgroup1 runs Slurm's own cgroup confinement beside allot's:
# task/cgroup on cgroup v1 constraining memory (not cores: those are
# allot's), with a cgroup.conf of the run's. Slurm then makes its tree
# in the v1 hierarchies (slurm_trees); the run refuses to start if one
# exists (another Slurm's), and removes it at teardown. Memory is then a
# consumable (CR_CPU_Memory), so a job's --mem becomes its limit.
#
# SLURM_TASK=cgroup2 is a pure cgroup v2 machine's setup (the guest lane,
# scripts/guest/slurm-check): the broker on the cgroup2 backend, Slurm's
# proctrack/cgroup and task/cgroup with cgroup/v2 (cgroup.conf
# IgnoreSystemd=yes: no systemd to ask, slurmd makes its
# system.slice/slurmstepd.scope itself), memory constrained by Slurm, cores
# by allot through the steps' `user` groups, which the cells include. The
# run refuses to start if that scope exists and removes it at teardown.
#
# Every daemon starts inside a cgroup of the unified hierarchy made for
# this run (job steps inherit it: slurmd forks slurmstepd), so teardown
# finds every process the cluster ran, also ones a failing test left, and
# kills only those. On exit (also on failure) slurm_cluster_stop cancels
# the jobs, kills that cgroup's processes, stops the broker, removes the
# cgroups and the directory. `slurm_plugin_off` / `slurm_plugin_on` edit
# plugstack.conf (read by each new step).

slurm_die() { echo "slurm-cluster: error: $*" >&2; exit 1; }

slurm_track_root() {
  if [ -f /sys/fs/cgroup/unified/cgroup.procs ]; then
    echo /sys/fs/cgroup/unified
  elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo /sys/fs/cgroup
  else
    slurm_die "no cgroup2 hierarchy to track the cluster's processes in"
  fi
}

slurm_cluster_stop() {
  local p i
  set +e
  if [ -n "${SLURM_CONF:-}" ] && [ -f "${SLURM_CONF:-}" ]; then
    timeout 10 scancel --quiet --full --signal=KILL --user=root >/dev/null 2>&1
    for u in $(squeue -h -o %u 2>/dev/null | sort -u); do
      timeout 10 scancel --quiet --full --signal=KILL --user="$u" >/dev/null 2>&1
    done
  fi
  if [ -n "${slurm_track:-}" ] && [ -d "$slurm_track" ]; then
    for i in 1 2 3 4 5; do
      for p in $(cat "$slurm_track/cgroup.procs" 2>/dev/null); do
        kill -9 "$p" 2>/dev/null
      done
      [ -z "$(cat "$slurm_track/cgroup.procs" 2>/dev/null)" ] && break
      sleep 0.2
    done
    rmdir "$slurm_track" 2>/dev/null || echo "warning: cannot remove $slurm_track" >&2
  fi
  if [ -n "${slurm_broker:-}" ]; then
    kill "$slurm_broker" 2>/dev/null
    wait "$slurm_broker" 2>/dev/null
  fi
  if [ -n "${slurm_own_tree:-}" ]; then
    for t in $(slurm_trees); do
      for p in $(find "$t" -name cgroup.procs -exec cat {} + 2>/dev/null); do
        kill -9 "$p" 2>/dev/null
      done
      find "$t" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
      rmdir "$t" 2>/dev/null || echo "warning: cannot remove $t" >&2
    done
    if [ -n "${slurm_made_slice:-}" ]; then
      rmdir /sys/fs/cgroup/system.slice 2>/dev/null || echo "warning: cannot remove /sys/fs/cgroup/system.slice" >&2
    fi
  fi
  # The broker's cgroup v2 directory (SLURM_TASK=cgroup2): what a failed
  # run left in its cells is ours.
  if [ -n "${slurm_cg:-}" ] && [ -f "/sys/fs/cgroup/$slurm_cg/cgroup.procs" ]; then
    for c in /sys/fs/cgroup/"$slurm_cg"/cell-*; do
      [ -d "$c" ] && echo 1 >"$c/cgroup.kill" 2>/dev/null
    done
    sleep 0.2
    find "/sys/fs/cgroup/$slurm_cg" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
    rmdir "/sys/fs/cgroup/$slurm_cg" 2>/dev/null || echo "warning: cannot remove /sys/fs/cgroup/$slurm_cg" >&2
  fi
  for h in cpuset cpu cpuacct freezer blkio; do
    if [ -n "${slurm_cg:-}" ] && [ -d "/sys/fs/cgroup/$h/$slurm_cg" ]; then
      for p in $(cat /sys/fs/cgroup/$h/$slurm_cg/*/cgroup.procs 2>/dev/null); do
        kill -9 "$p" 2>/dev/null
      done
      sleep 0.2
      find "/sys/fs/cgroup/$h/$slurm_cg" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
      rmdir "/sys/fs/cgroup/$h/$slurm_cg" 2>/dev/null || echo "warning: cannot remove /sys/fs/cgroup/$h/$slurm_cg" >&2
    fi
  done
  [ -n "${cluster:-}" ] && [ -z "${SLURM_KEEP:-}" ] && rm -rf "$cluster"
  [ -n "${SLURM_KEEP:-}" ] && echo "kept $cluster" >&2
  return 0
}

# Slurm's cgroup trees: in the v1 hierarchies (task/cgroup names its tree
# `slurm`, or `slurm_NODE` when built for several slurmds a host), or its
# cgroup/v2 scope.
slurm_trees() {
  local h n
  if [ "${SLURM_TASK:-none}" = cgroup2 ]; then
    # slurmstepd.scope, or NODE_slurmstepd.scope (builds for several
    # slurmds a host, as Debian's).
    for n in /sys/fs/cgroup/system.slice/*slurmstepd.scope; do
      [ -d "$n" ] && echo "$n"
    done
    return 0
  fi
  for h in /sys/fs/cgroup/*/; do
    for n in slurm "slurm_$(hostname -s)"; do
      [ -d "$h$n" ] && echo "$h$n"
    done
  done
  return 0
}

# Runs "$@" in the background inside the tracking cgroup.
slurm_spawn() {
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$slurm_track" "$@" \
    >"$cluster/$1.out" 2>&1 &
}

slurm_wait_for() { # SECONDS DESCRIPTION COMMAND...: polls until COMMAND succeeds
  local secs=$1 what=$2 until
  shift 2
  until=$((SECONDS + secs))
  while ((SECONDS < until)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "slurm-cluster: $what did not happen within ${secs}s; logs:" >&2
  tail -n 30 "$cluster"/*.log >&2 2>/dev/null
  exit 1
}

slurm_port() { # a free local TCP port
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

slurm_plugin_on() {
  echo "required $cluster/lib/slurm/spank_allot.so socket=$ALLOT_SOCKET shim=$cluster/lib/allot/liballot_shim.so tcm=$cluster/lib/allot/tcm state=$cluster/tickets $*" \
    >"$cluster/plugstack.conf"
}

slurm_plugin_off() { : >"$cluster/plugstack.conf"; }

slurm_cluster_start() {
  [ "$(id -u)" -eq 0 ] || slurm_die "needs root (slurmd starts job steps as their users)"
  local b
  for b in munged slurmctld slurmd sbatch srun scontrol; do
    command -v "$b" >/dev/null || slurm_die "$b is missing: install slurmctld slurmd slurm-client munge libslurm-dev (scripts/deps.sh)"
  done
  [ -f /usr/include/slurm/spank.h ] || slurm_die "slurm/spank.h is missing: install libslurm-dev"
  local backend=cgroup1
  if [ "${SLURM_TASK:-none}" = cgroup2 ]; then
    backend=cgroup2
    grep -qw cpuset /sys/fs/cgroup/cgroup.controllers 2>/dev/null ||
      slurm_die "SLURM_TASK=cgroup2 needs a pure cgroup v2 machine with cpuset"
  else
    [ -d /sys/fs/cgroup/cpuset ] || slurm_die "no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset"
  fi

  local profile=${SLURM_ALLOT_PROFILE:-debug} flag=""
  [ "$profile" = release ] && flag=--release
  # SLURM_ALLOT_BUILT=1: built already (the guest lane builds on the host).
  [ -n "${SLURM_ALLOT_BUILT:-}" ] || cargo build $flag -q -p allot-cli -p allot-capi
  A=$PWD/target/$profile/allot

  cluster=$(mktemp -d /tmp/allot-slurm.XXXXXX)
  chmod 755 "$cluster"
  slurm_cg=allot-slurm-$$
  slurm_track=$(slurm_track_root)/allot-slurm-track-$$
  trap slurm_cluster_stop EXIT
  mkdir "$slurm_track"

  # liballot, the shim and the plugin, as an operator installs them.
  bash scripts/install-slurm-plugin.sh --from "target/$profile" "$cluster" >/dev/null ||
    slurm_die "installing the plugin failed"

  # The broker.
  mkdir -m 755 "$cluster/allot"
  export ALLOT_SOCKET=$cluster/allot/allot.sock
  "$A" daemon --socket "$ALLOT_SOCKET" --backend "$backend" --cgroup-name "$slurm_cg" "$@" \
    2>"$cluster/broker.log" &
  slurm_broker=$!
  slurm_wait_for 10 "the broker answering" "$A" status

  # munge, with a key of its own.
  dd if=/dev/urandom of="$cluster/munge.key" bs=1024 count=1 2>/dev/null
  chmod 400 "$cluster/munge.key"
  slurm_spawn munged -F --key-file="$cluster/munge.key" --socket="$cluster/munge.sock" \
    --pid-file="$cluster/munged.pid" --log-file="$cluster/munged.log" \
    --seed-file="$cluster/munged.seed"
  slurm_wait_for 10 "munged answering" sh -c "munge -S '$cluster/munge.sock' -n | unmunge -S '$cluster/munge.sock'"

  local task=task/none select=CR_CPU proctrack=proctrack/linuxproc
  case "${SLURM_TASK:-none}" in
    none) ;;
    cgroup2)
      [ -z "$(slurm_trees)" ] || slurm_die "$(slurm_trees | head -1) exists (another Slurm's cgroups?); SLURM_TASK=cgroup2 would share it"
      slurm_own_tree=1
      # Without systemd, slurmd makes its scope in a system.slice that must
      # exist; one this run makes goes with it.
      if [ ! -d /sys/fs/cgroup/system.slice ]; then
        mkdir /sys/fs/cgroup/system.slice
        slurm_made_slice=1
        # What systemd enables on a slice, which Slurm's scope needs.
        for c in cpuset cpu memory pids; do
          echo "+$c" >/sys/fs/cgroup/system.slice/cgroup.subtree_control ||
            slurm_die "cannot enable $c for system.slice"
        done
      fi
      task=task/cgroup
      proctrack=proctrack/cgroup
      select=CR_CPU_Memory
      cat >"$cluster/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
ConstrainCores=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainDevices=no
EOF
      ;;
    cgroup1)
      [ -z "$(slurm_trees)" ] || slurm_die "$(slurm_trees | head -1) exists (another Slurm's cgroups?); SLURM_TASK=cgroup1 would share it"
      [ -d /sys/fs/cgroup/memory ] || slurm_die "SLURM_TASK=cgroup1 needs the cgroup v1 memory hierarchy"
      slurm_own_tree=1
      task=task/cgroup
      select=CR_CPU_Memory # so that --mem is the job's, and its limit
      cat >"$cluster/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v1
ConstrainCores=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainDevices=no
EOF
      ;;
    *) slurm_die "SLURM_TASK must be none, cgroup1 or cgroup2" ;;
  esac

  node=$(hostname -s)
  local cpus
  cpus=$(nproc)
  mkdir -p "$cluster/state" "$cluster/spool" "$cluster/jobs"
  chmod 1777 "$cluster/jobs"
  cat >"$cluster/slurm.conf" <<EOF
ClusterName=allottest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(slurm_port)
SlurmdPort=$(slurm_port)
AuthType=auth/munge
AuthInfo=socket=$cluster/munge.sock
CredType=cred/munge
StateSaveLocation=$cluster/state
SlurmdSpoolDir=$cluster/spool
SlurmctldPidFile=$cluster/slurmctld.pid
SlurmdPidFile=$cluster/slurmd.pid
SlurmctldLogFile=$cluster/slurmctld.log
SlurmdLogFile=$cluster/slurmd.log
ProctrackType=$proctrack
TaskPlugin=$task
SelectType=select/cons_tres
SelectTypeParameters=$select
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=1
PlugStackConfig=$cluster/plugstack.conf
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES:8
EOF
  export SLURM_CONF=$cluster/slurm.conf
  slurm_plugin_on
  slurm_spawn slurmctld -D -i -f "$SLURM_CONF"
  slurm_wait_for 20 "slurmctld answering" scontrol ping
  slurm_spawn slurmd -D -f "$SLURM_CONF"
  slurm_wait_for 30 "the node becoming idle" sh -c "sinfo -h -N -o %t | grep -qx idle"
}
