#!/usr/bin/env bash
# Builds the `allot` binary from scratch the way a machine without OpenMP
# would, static as the package ships it (scripts/build-allot.sh), and
# checks that it needs nothing from the lab and works:
#
#  - its package depends on no package of the lab, and the binary links no
#    code of it (allot-lab, the workloads, the charts);
#  - every C compiler call goes through a wrapper first on the PATH (as
#    `cc` and `gcc`) that logs it and fails any call asking for OpenMP
#    (`-fopenmp`, `-lgomp`, `-lomp`), so the build fails if any part of the
#    product needs OpenMP;
#  - the binary must not carry an OpenMP runtime;
#  - the only C the build may compile is the OpenMP preload shim
#    (crates/capi/shim/*.c) and allot's Thread Composability Manager
#    (crates/capi/tcm/*.c), plain C, no OpenMP; everything else the
#    compiler driver does is linking, which Rust itself needs `cc` for;
#  - the static binary's broker, on a private socket, starts a program in a
#    cell.
#
# Uses its own target directory (target/product-check) so the build is
# cold on every run; takes a few minutes on 2 CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d -t allot-product-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
real_cc=$(command -v cc)
mkdir "$work/bin"
cat >"$work/bin/cc" <<WRAP
#!/bin/sh
printf '%s\n' "\$*" >>"$work/calls.log"
for a in "\$@"; do
  case "\$a" in
    -fopenmp|-fopenmp=*|-lgomp|-lomp|-liomp5)
      echo "product-check: a compiler call asked for OpenMP (\$a): \$*" >&2
      echo "\$*" >>"$work/openmp.log"
      exit 1 ;;
  esac
done
exec "$real_cc" "\$@"
WRAP
chmod 755 "$work/bin/cc"
ln -s cc "$work/bin/gcc"
: >"$work/calls.log"

# The product package depends on nothing of the lab (its normal
# dependencies; the tests may use the lab's test kit).
lab_deps=$(cargo tree --quiet --locked -p allot-cli -e normal --prefix none \
  | grep -oE '^allot-(lab|workloads|plot|testkit) ' | sort -u || true)
if [ -n "$lab_deps" ]; then
  echo "FAIL: the allot-cli package depends on the lab: $lab_deps" >&2
  exit 1
fi
echo "ok: allot-cli depends on nothing of the lab (cargo tree -e normal)"

target=target/product-check
rm -rf "$target"
echo "building allot (cold, $target, static as the package ships it) with an OpenMP-refusing compiler …"
start=$(date +%s)
if ! PATH="$work/bin:$PATH" CC="$work/bin/cc" \
    bash scripts/build-allot.sh --debug --target-dir "$target" --locked >/dev/null; then
  echo "FAIL: the allot binary does not build static without OpenMP (scripts/build-allot.sh)" >&2
  [ -s "$work/openmp.log" ] && { echo "calls that asked for OpenMP:" >&2; cat "$work/openmp.log" >&2; }
  exit 1
fi
echo "built in $(( $(date +%s) - start )) s: a static executable (no interpreter, no shared library)"
bin="$target/debug/allot"

if nm --defined-only "$bin" | grep -E ' (GOMP_|omp_get_|__kmpc_)' >&2; then
  echo "FAIL: the allot binary carries an OpenMP runtime" >&2
  exit 1
fi
lab=$(nm -C --defined-only "$bin" \
  | grep -cE 'allot_lab::|allot_workloads::|allot_plot::|plotters::' || true)
if [ "$lab" != 0 ]; then
  echo "FAIL: the allot binary links $lab symbols of the lab (allot-lab, workloads, charts)" >&2
  exit 1
fi
# C sources compiled (calls with -c or naming a .c file), apart from the
# shim's and the manager's.
others=$(grep -oE '[^ ]+\.c( |$)' "$work/calls.log" | tr -d ' ' | sort -u \
  | grep -vE '^(shim|tcm)/[a-z_]*\.c$' || true)
if [ -n "$others" ]; then
  echo "FAIL: the build compiled C beyond the shim and the TCM:" >&2
  echo "$others" >&2
  exit 1
fi
shim=$(grep -oE '(shim|tcm)/[a-z_]+\.c' "$work/calls.log" | sort -u | tr '\n' ' ')
echo "compiler calls: $(wc -l <"$work/calls.log") (C compiled: ${shim:-none}; the rest link)"
"$bin" --version

# The static binary does its work: a broker of its own on a private socket
# starts a program in a cell (killed and waited for on any exit).
sock_dir=$(mktemp -d -t allot-product-sock.XXXXXX)
broker=""
trap 'if [ -n "$broker" ]; then kill "$broker" 2>/dev/null; wait "$broker" 2>/dev/null; fi; rm -rf "$work" "$sock_dir"' EXIT
"$bin" daemon --socket "$sock_dir/a.sock" --idle-exit 60 >"$sock_dir/broker.log" 2>&1 &
broker=$!
for _ in $(seq 100); do [ -S "$sock_dir/a.sock" ] && break; sleep 0.1; done
if ! out=$("$bin" run --socket "$sock_dir/a.sock" --no-start --timeline -- /bin/true 2>&1) \
    || ! grep -q 'registered as cell' <<<"$out"; then
  echo "FAIL: the static allot did not start a program in a cell:" >&2
  echo "$out" >&2
  sed 's/^/broker: /' "$sock_dir/broker.log" >&2
  exit 1
fi
kill "$broker"
wait "$broker" 2>/dev/null || true
broker=""
echo "ok: allot builds static and runs without OpenMP, compiles no workload, links no lab code, and starts a program in a cell"
rm -rf "$target"
