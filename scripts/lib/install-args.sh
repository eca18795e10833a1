# Sourced by the install scripts (install-liballot.sh,
# install-slurm-plugin.sh): their shared command line,
# `[--from DIR] PREFIX`, with -h/--help printing the calling script's
# header comment. Set `tool` (the name errors start with) before sourcing
# with the script's arguments; sets `repo`, `from` and `prefix`, and
# defines `die`.

die() { echo "$tool: error: $*" >&2; exit 1; }
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

repo="$(cd "$(dirname "$0")/.." && pwd)"
from=""
prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || die "--from needs a directory"; from="$2"; shift 2 ;;
    --from=*) from="${1#--from=}"; shift ;;
    -h|--help) usage 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$prefix" ] || die "more than one PREFIX given ($prefix, $1)"; prefix="$1"; shift ;;
  esac
done
[ -n "$prefix" ] || { echo "$tool: error: no PREFIX given" >&2; usage; }
