#!/usr/bin/env bash
# run.sh: build the test guest's initramfs, boot it and print its console:
# the harness by hand, for writing and debugging scenarios.
#
#   scripts/guest/run.sh [-n] [-t SECONDS] SCENARIO.sh [BINARY...]
#
#   -n          attach a fresh 256 MiB NVDIMM (on node 1)
#   -t SECONDS  kill QEMU after SECONDS (default 120)
#
# e.g. cargo build -p hugeshm && scripts/guest/run.sh -n \
#          crates/hugeshm-cli/tests/guest-scenarios/basic.sh target/debug/hugeshm
#
# Works in a temporary directory, removed at the end (kept, and named, with
# HUGESHM_GUEST_KEEP=1). Exits with boot.sh's status.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
nvdimm=0 timeout=120
while getopts "nt:h" opt; do
    case "$opt" in
    n) nvdimm=1 ;;
    t) timeout=$OPTARG ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
        exit 2
        ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || exec "$0" -h
scenario=$1
shift

dir=$(mktemp -d "${TMPDIR:-/tmp}/hugeshm-guest.XXXXXX")
if [ "${HUGESHM_GUEST_KEEP:-}" = 1 ]; then
    trap 'echo "run: kept $dir" >&2' EXIT
else
    trap 'rm -rf "$dir"' EXIT
fi

kernel=$("$here/kernel.sh")
bins=()
for b in "$@"; do
    bins+=(-b "$b")
done
"$here/build-initramfs.sh" -o "$dir/initramfs.gz" -k "$kernel" -s "$scenario" "${bins[@]}"
args=(-i "$dir/initramfs.gz" -l "$dir/console.log" -t "$timeout" -k "$kernel")
[ "$nvdimm" = 0 ] || args+=(-n "$dir/nvdimm.img")
rc=0
start=$(date +%s.%N)
"$here/boot.sh" "${args[@]}" || rc=$?
end=$(date +%s.%N)
cat "$dir/console.log"
echo
secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
echo "run: QEMU exited $rc after $secs s" >&2
exit "$rc"
