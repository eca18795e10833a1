# Sourced by the install scripts (install-liballot.sh,
# install-slurm-plugin.sh): their shared command line,
# `[--from DIR] [--destdir DIR] PREFIX`, with -h/--help printing the
# calling script's header comment. Set `tool` (the name errors start with)
# before sourcing with the script's arguments, and `supports_destdir=1` if
# the script honours `--destdir`; sets `repo`, `from`, `destdir` and
# `prefix`, and defines `die`.

die() { echo "$tool: error: $*" >&2; exit 1; }
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

repo="$(cd "$(dirname "$0")/.." && pwd)"
from=""
destdir=""
prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || die "--from needs a directory"; from="$2"; shift 2 ;;
    --from=*) from="${1#--from=}"; shift ;;
    --destdir)
      [ "${supports_destdir:-0}" = 1 ] || die "--destdir is not supported by $tool"
      [ $# -ge 2 ] || die "--destdir needs a directory"; destdir="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$prefix" ] || die "more than one PREFIX given ($prefix, $1)"; prefix="$1"; shift ;;
  esac
done
[ -n "$prefix" ] || { echo "$tool: error: no PREFIX given" >&2; usage; }
