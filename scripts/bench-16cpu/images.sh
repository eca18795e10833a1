# shellcheck shell=bash
# Sourced by bench-16cpu.sh: Poli-C's image-server case study (Figure 10 of
# the paper; scripts/bench-image-servers.sh on this machine) on a machine
# without a Rust toolchain, from a kit built here.
#
# build_images_kit DIR (on the build machine): builds the image server
# against liballot (release, as it ships: the image server's bench harness)
# and copies the two programs, liballot.so.0 (stripped) and the OpenMP shim
# into DIR (a few MiB).
#
# step_images (on the machine, with --images DIR): four server processes
# against the bench's broker, fixed team sizes 1, 2, 4, ... up to the
# CPUs, fair_cores and fair_numa through the broker and fair_cores without
# it, at 40, 70 and 100 % of the machine's capacity; medians of
# min(--repeats, 2) rounds of 2 s bursts (0.5 s with --quick):
# images.txt, with the CPU time idle while a request waited and each
# variant's wait, service time and team size per request.

build_images_kit() {
  local dir=$1 progs=$repo/target/tmp/image_server
  img_build "$repo" ||
    die "building the image server failed (cargo test --release -p allot-capi --bench image_server)"
  mkdir -p "$dir/lib" "$dir/shim"
  cp "$progs/image_server" "$progs/image_server_plain" "$dir/"
  strip -o "$dir/lib/liballot.so.0" "$progs/prefix/lib/liballot.so.0"
  cp "$progs"/shim/*.so "$dir/shim/"
  du -sh "$dir"
}

step_images() {
  local rounds burst=2 loads=0.4,0.7,1.0 secs
  [[ -n $IMAGES_KIT ]] || return 0
  rounds=$((REPEATS < 2 ? REPEATS : 2))
  ((QUICK)) && burst=0.5
  # Variants × loads × rounds bursts, each with its drain and start.
  secs=$(ceil "($(img_cpus=$NCPU img_variants | wc -w)) * 3 * $rounds * ($burst + 0.5) + 10")
  say "== images: 4 image-server processes, fixed team sizes against fair_cores and fair_numa through the broker (about $secs s)"
  if ! fits "$secs"; then
    skipped_for_time=$((skipped_for_time + 1))
    say "skipped (time budget)"
    return
  fi
  mkdir -p "$work/images"
  if ! img_progs=$IMAGES_KIT img_dir=$work/images img_k=4 img_burst=$burst \
    img_socket=$daemon_sock img_cpus=$NCPU \
    timeout -k 5 $((secs * 2)) bash -c "source '$here_16/lib/image-servers.sh'; img_measure $loads $rounds" \
    >"$OUT/images.txt" 2>>"$work/images.err"; then
    fail "the image servers failed (see images.txt)"
    cat "$work/images.err" >>"$OUT/images.txt"
    return
  fi
  grep -v '^  load' "$work/images.err" >>"$OUT/images.txt" || true
  sed 's/^/  /' "$OUT/images.txt" | while IFS= read -r line; do say "$line"; done
}
