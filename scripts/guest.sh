#!/usr/bin/env bash
# A throwaway Linux guest with pure cgroup v2, built from Debian's packages
# only, for live tests of the paths this machine (cgroup v1) cannot reach.
#
#   bash scripts/guest.sh [options] -- COMMAND [ARGS...]
#   bash scripts/guest.sh --shell            # an interactive root shell
#   bash scripts/guest.sh --build            # only build (and cache) the guest
#
# The guest is Debian's kernel (linux-image-amd64 for 6.1, linux-image-6.12-amd64
# for 6.12) booted by QEMU, with a busybox initramfs that mounts THIS machine's
# root file system read-only over 9p under a tmpfs overlay: the guest runs the
# host's own userland (systemd, Slurm, compilers, the checkout and its built
# test binaries) without copying anything, and nothing it writes reaches the
# host except the run's exchange directory (--out). COMMAND runs as root in
# the current directory with cgroup2 mounted at /sys/fs/cgroup and every
# controller enabled at the root; its exit status is this script's.
#
# The kernel and initramfs are cached under target/guest/<kernel>/; the
# packages come from the configured Debian mirror (apt-get download) and from
# nowhere else.
#
# Options:
#   --kernel 6.1|6.12   Debian 12's kernel or its 6.12 (default 6.12)
#   --cpus N            virtual CPUs (default 4)
#   --numa N            N NUMA nodes, CPUs and memory split evenly (default 1)
#   --mem MIB           guest memory (default 3072)
#   --timeout S         hard limit on the whole boot and command (default 900)
#   --init systemd      boot systemd as PID 1; COMMAND runs as a unit once
#                       basic.target is reached (the host's own services stay
#                       off; default: a plain shell script as PID 1)
#   --out DIR           exchange directory: console.log and rc land here
#                       (default: a fresh directory under target/guest/runs)
#   --accel tcg|kvm|auto  auto (default) uses KVM when a probe boot under it
#                       works on this machine (cached per host boot), else TCG
#   --env NAME          pass the host's NAME into the guest (repeatable;
#                       PATH, HOME, CARGO_TARGET_DIR and ALLOT_* always pass)
#
# Exit status: COMMAND's; 124 when the time limit ended the guest; 2 for a
# bad option; 3 when QEMU, the kernel package or busybox is missing.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "guest.sh: $1" >&2; exit "${2:-1}"; }

KERNEL=6.12
CPUS=4
NUMA=1
MEM=3072
TIMEOUT=900
INIT=shell
OUT=""
ACCEL=auto
SHELL_MODE=0
BUILD_ONLY=0
PASS_ENV=(PATH HOME CARGO_TARGET_DIR RUST_BACKTRACE LANG TERM)

while (($#)); do
  case $1 in
    --kernel) KERNEL=${2:?--kernel needs 6.1 or 6.12}; shift 2 ;;
    --cpus) CPUS=${2:?}; shift 2 ;;
    --numa) NUMA=${2:?}; shift 2 ;;
    --mem) MEM=${2:?}; shift 2 ;;
    --timeout) TIMEOUT=${2:?}; shift 2 ;;
    --init) INIT=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --accel) ACCEL=${2:?}; shift 2 ;;
    --env) PASS_ENV+=("${2:?}"); shift 2 ;;
    --shell) SHELL_MODE=1; shift ;;
    --build) BUILD_ONLY=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" 2 ;;
    *) break ;;
  esac
done
case $KERNEL in
  6.1) META=linux-image-amd64 ;;
  6.12) META=linux-image-6.12-amd64 ;;
  *) die "--kernel $KERNEL: 6.1 or 6.12" 2 ;;
esac
case $INIT in shell | systemd) ;; *) die "--init $INIT: shell or systemd" 2 ;; esac
for n in CPUS NUMA MEM TIMEOUT; do
  [[ ${!n} =~ ^[1-9][0-9]*$ ]] || die "--${n,,} ${!n}: a positive whole number" 2
done
((CPUS % NUMA == 0)) || die "--cpus $CPUS cannot be split evenly over --numa $NUMA nodes" 2
if ((BUILD_ONLY == 0 && SHELL_MODE == 0 && $# == 0)); then
  die "no command (give -- COMMAND, --shell or --build; see --help)" 2
fi

command -v qemu-system-x86_64 >/dev/null ||
  die "qemu-system-x86_64 is missing: install Debian's qemu-system-x86 (scripts/deps.sh does)" 3
[[ -x /bin/busybox ]] && /bin/busybox --list | grep -qx switch_root ||
  die "/bin/busybox is missing: install Debian's busybox-static (scripts/deps.sh does)" 3
command -v cpio >/dev/null || die "cpio is missing: install Debian's cpio" 3

# ------------------------------------------------------------------ build

target=${CARGO_TARGET_DIR:-$repo/target}
cache=$target/guest/$KERNEL

# The kernel package behind the meta package: linux-image-amd64 ->
# linux-image-6.1.0-N-amd64 (which holds /boot/vmlinuz-*).
resolve_kernel_package() {
  local pkg=$1 dep i
  for i in 1 2 3; do
    dep=$(apt-cache depends "$pkg" 2>/dev/null |
      sed -n 's/^ *Depends: \(linux-image-[^ <>]*\)$/\1/p' | head -n 1)
    [[ -n $dep ]] || break
    pkg=$dep
  done
  echo "$pkg"
}

build_guest() {
  local pkg tmp deb ver m key
  pkg=$(resolve_kernel_package "$META")
  [[ $pkg != "$META" ]] || {
    apt-get update -q >/dev/null 2>&1 || true
    pkg=$(resolve_kernel_package "$META")
  }
  [[ $pkg != "$META" ]] ||
    die "cannot resolve $META to a kernel package (apt-cache depends $META; is the Debian mirror configured?)" 3
  # The cache is good for this kernel package and this initramfs script.
  key="$pkg $(cat "$repo/scripts/guest/init" "$0" | sha256sum | cut -c1-16)"
  if [[ -f $cache/key && $(cat "$cache/key") == "$key" && -f $cache/initrd.gz ]]; then
    return
  fi
  echo "guest.sh: building the $KERNEL guest from $pkg" >&2
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064 # expand now: the trap must remove this directory
  trap "rm -rf '$tmp'" EXIT
  (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
    die "apt-get download $pkg failed (is the Debian mirror reachable?)" 3
  deb=$(ls "$tmp"/*.deb)
  dpkg-deb -x "$deb" "$tmp/x"
  ver=$(ls "$tmp/x/lib/modules")
  mkdir -p "$tmp/ir/bin" "$tmp/ir/lib/modules"
  cp /bin/busybox "$tmp/ir/bin/busybox"
  cp "$repo/scripts/guest/init" "$tmp/ir/init"
  chmod 755 "$tmp/ir/init"
  # The modules the boot needs, in load order (the package keeps them out of
  # the image), and dummy (stage2's address); compressed ones are unpacked
  # for busybox's insmod.
  : >"$tmp/ir/lib/modules/order"
  for m in virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci \
    netfs fscache 9pnet 9pnet_virtio 9p overlay dummy; do
    local f
    f=$(find "$tmp/x/lib/modules/$ver/kernel" -name "$m.ko*" | head -n 1)
    [[ -n $f ]] || continue # built into this kernel
    case $f in
      *.xz) xz -dc "$f" >"$tmp/ir/lib/modules/$m.ko" ;;
      *.zst) zstd -qdc "$f" >"$tmp/ir/lib/modules/$m.ko" ;;
      *) cp "$f" "$tmp/ir/lib/modules/$m.ko" ;;
    esac
    echo "$m.ko" >>"$tmp/ir/lib/modules/order"
  done
  mkdir -p "$cache"
  (cd "$tmp/ir" && find . | cpio -o -H newc --quiet | gzip -1) >"$cache/initrd.gz.tmp"
  cp "$tmp/x/boot/vmlinuz-$ver" "$cache/vmlinuz"
  mv "$cache/initrd.gz.tmp" "$cache/initrd.gz"
  echo "$pkg" >"$cache/package"
  echo "$key" >"$cache/key"
  rm -rf "$tmp"
  trap - EXIT
}
build_guest
((BUILD_ONLY == 0)) || { echo "guest.sh: $KERNEL guest ready in $cache ($(cat "$cache/package"))"; exit 0; }

# ------------------------------------------------------------------ boot

qemu=(qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot
  -kernel "$cache/vmlinuz" -initrd "$cache/initrd.gz")

# KVM is used only where a short probe boot under it reaches the initramfs
# (some hosts expose /dev/kvm that cannot run a stock kernel); the answer is
# kept for this host boot.
kvm_works() {
  local marker boot_id
  [[ -r /dev/kvm && -w /dev/kvm ]] || return 1
  boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
  marker=$target/guest/kvm-$boot_id
  if [[ ! -f $marker ]]; then
    mkdir -p "$target/guest"
    if timeout -k 2 20 "${qemu[@]}" -accel kvm -m 256 -smp 1 -serial stdio \
      -append "console=ttyS0 panic=-1 rdinit=/bin/busybox -- poweroff -f" 2>/dev/null </dev/null |
      grep -q 'Run /bin/busybox as init process'; then
      echo yes >"$marker"
    else
      echo no >"$marker"
    fi
  fi
  [[ $(cat "$marker") == yes ]]
}
# TCG runs every vCPU on one host thread: with a thread per vCPU, a vCPU
# may run kernel code another vCPU has just patched (static keys flip when
# cgroups freeze or controllers are enabled) and the guest kernel oopses
# on a stale int3 (seen on 6.12 in this lane).
tcg=(-accel tcg,thread=single)
case $ACCEL in
  tcg) accel=("${tcg[@]}") ;;
  kvm) accel=(-accel kvm -cpu host) ;;
  auto) if kvm_works; then accel=(-accel kvm -cpu host); else accel=("${tcg[@]}"); fi ;;
  *) die "--accel $ACCEL: tcg, kvm or auto" 2 ;;
esac

if [[ -z $OUT ]]; then
  mkdir -p "$target/guest/runs"
  # Keep the 20 latest runs' directories (none yet on a first run: the
  # glob then matches nothing, and ls's complaint must not end the script).
  shopt -s nullglob
  old_runs=("$target"/guest/runs/run.*)
  shopt -u nullglob
  if ((${#old_runs[@]} > 0)); then
    ls -dt "${old_runs[@]}" | tail -n +20 | xargs -r rm -rf
  fi
  OUT=$(mktemp -d "$target/guest/runs/run.XXXXXX")
else
  mkdir -p "$OUT"
  rm -f "$OUT/rc" "$OUT/console.log"
fi
OUT=$(cd "$OUT" && pwd)
printf '%s\n' "$INIT" >"$OUT/init"
pwd >"$OUT/cwd"
echo "$SHELL_MODE" >"$OUT/shell"
{
  for n in "${PASS_ENV[@]}"; do
    [[ -n ${!n+x} ]] && printf '%s=%q\n' "$n" "${!n}"
  done
  while IFS='=' read -r n _; do
    printf '%s=%q\n' "$n" "${!n}"
  done < <(env | grep -E '^ALLOT_[A-Z0-9_]*=' || true)
  printf 'ALLOT_GUEST=%q\n' "$KERNEL"
} >"$OUT/env"
{
  printf '%q ' "$@"
  echo
} >"$OUT/cmd"

smp=(-smp "$CPUS" -m "${MEM}M")
if ((NUMA > 1)); then
  per=$((CPUS / NUMA))
  for ((i = 0; i < NUMA; i++)); do
    smp+=(-object "memory-backend-ram,id=mem$i,size=$((MEM / NUMA))M"
      -numa "node,nodeid=$i,cpus=$((i * per))-$((i * per + per - 1)),memdev=mem$i")
  done
  smp[3]=$(((MEM / NUMA) * NUMA))M
fi

cmdline="console=ttyS0 panic=-1 loglevel=3 allot_guest.stage2=$repo/scripts/guest/stage2"

if ((SHELL_MODE)); then serial=(-serial mon:stdio); else serial=(-serial stdio); fi

start=$(date +%s)
rc=0
timeout -k 10 "$TIMEOUT" "${qemu[@]}" "${accel[@]}" "${smp[@]}" "${serial[@]}" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$OUT,mount_tag=guestio,security_model=none,multidevs=remap" \
  -append "$cmdline" || rc=$?
took=$(($(date +%s) - start))
if [[ -f $OUT/rc ]]; then
  rc=$(cat "$OUT/rc")
  echo "guest.sh: $KERNEL guest, ${CPUS} CPUs: exit $rc after ${took} s (output in $OUT)" >&2
  exit "$rc"
fi
if ((rc == 124)); then
  echo "guest.sh: the guest ran past --timeout $TIMEOUT s and was stopped (output so far in $OUT)" >&2
  exit 124
fi
echo "guest.sh: the guest ended after ${took} s without the command's exit status (QEMU exit $rc: a kernel panic or a failed mount; see the console above)" >&2
exit 1
