#!/usr/bin/env bash
# boot.sh: boot the hugeshm test guest under QEMU (TCG) and write its serial
# console to a file.
#
#   scripts/guest/boot.sh -i INITRAMFS -l LOG [-n NVDIMM.img] [-c]
#       [-t SECONDS] [-p PIDFILE] [-k VMLINUZ]
#
#   -i FILE     the initramfs (build-initramfs.sh)
#   -l FILE     the console log to write
#   -n FILE     attach an NVDIMM (on node 1) backed by FILE; a missing FILE
#               is created sparse, 256 MiB. The file keeps what reached it:
#               boot again with it to see what survived a power-off.
#   -c          add node 2: 512 MiB of memory and no CPU (a CXL-like
#               memory-only node, 2 hops further than node 1)
#   -t SECONDS  kill QEMU after SECONDS (default 120; SIGKILL 5 s later)
#   -p FILE     QEMU writes its pid there (to kill it from elsewhere)
#   -k VMLINUZ  the guest kernel (default: scripts/guest/kernel.sh)
#
# The guest: 2 NUMA nodes of 1 GiB each with one CPU each (one socket each:
# two cores of one socket split over two nodes make the kernel WARN about
# the cache topology), `-accel tcg -cpu max` (nested KVM hangs on the CI
# machines), no network, no display. Exits
# with QEMU's status: 0 when the guest powered off, 124 on the timeout.
# QEMU runs in this process's place (exec), in the caller's process group:
# signals to this pid or to the group reach it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
initrd="" log="" nvdimm="" timeout=120 kernel="" pidfile="" cxl=""

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

while getopts "i:l:n:ct:p:k:h" opt; do
    case "$opt" in
    i) initrd=$OPTARG ;;
    l) log=$OPTARG ;;
    n) nvdimm=$OPTARG ;;
    c) cxl=1 ;;
    t) timeout=$OPTARG ;;
    p) pidfile=$OPTARG ;;
    k) kernel=$OPTARG ;;
    *) usage ;;
    esac
done
if [ -z "$initrd" ] || [ -z "$log" ]; then
    usage
fi
[ -r "$initrd" ] || {
    echo "boot: no initramfs $initrd" >&2
    exit 1
}
command -v qemu-system-x86_64 >/dev/null || {
    echo "boot: qemu-system-x86_64 not found (Debian package: qemu-system-x86)" >&2
    exit 1
}
[ -n "$kernel" ] || kernel=$("$here/kernel.sh")

mem=2G
if [ -n "$cxl" ]; then
    mem=2560M
fi
# shellcheck disable=SC2054 # the commas are QEMU's
args=(
    -accel tcg -cpu max -machine pc,nvdimm=on
    -m "$mem",slots=2,maxmem=4G -smp 2,sockets=2
    -object memory-backend-ram,id=m0,size=1G
    -object memory-backend-ram,id=m1,size=1G
    -numa node,nodeid=0,cpus=0,memdev=m0
    -numa node,nodeid=1,cpus=1,memdev=m1
)
if [ -n "$cxl" ]; then
    # shellcheck disable=SC2054 # the commas are QEMU's
    args+=(
        -object memory-backend-ram,id=m2,size=512M
        -numa node,nodeid=2,memdev=m2
        -numa dist,src=0,dst=1,val=21 -numa dist,src=0,dst=2,val=31
        -numa dist,src=1,dst=2,val=31
    )
fi
if [ -n "$nvdimm" ]; then
    [ -e "$nvdimm" ] || truncate -s 256M "$nvdimm"
    size=$(stat -c %s "$nvdimm")
    # shellcheck disable=SC2054 # the commas are QEMU's
    args+=(
        -object "memory-backend-file,id=nv1,share=on,mem-path=$nvdimm,size=$size"
        -device nvdimm,id=nvdimm1,memdev=nv1,node=1,label-size=128K
    )
fi
args+=(
    -kernel "$kernel" -initrd "$initrd"
    -append "console=ttyS0 quiet panic=-1"
    -nodefaults -no-user-config -display none -monitor none
    -serial "file:$log" -no-reboot
)
if [ -n "$pidfile" ]; then
    args+=(-pidfile "$pidfile")
fi

# --foreground keeps QEMU in the caller's process group (a Ctrl-C in a
# terminal, or a signal to the group, reaches it); timeout forwards a
# SIGTERM sent to it.
exec timeout --foreground -k 5 "$timeout" qemu-system-x86_64 "${args[@]}" </dev/null
