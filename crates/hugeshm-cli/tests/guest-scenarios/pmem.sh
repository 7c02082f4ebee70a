# Persistent memory in status and segments (crates/hugeshm-cli/tests/guest_pmem.rs
# checks what it prints). Sourced by the guest's /init; the guest has an NVDIMM
# of 256 MiB on node 1 and a memory-only node 2.
# shellcheck shell=sh

mark pmem
block pmem.labels sh -c "ndctl disable-region region0 &&
    ndctl init-labels nmem0 && ndctl enable-region region0"
block pmem.namespace ndctl create-namespace --region=region0 --mode=fsdax
block pmem.mkfs mkfs.ext4 -q -F -b 4096 -E stride=512,stripe_width=512 /dev/pmem0
mkdir -p /mnt/pmem
block pmem.mount mount -o dax /dev/pmem0 /mnt/pmem

# Two processes map a 64 MiB file each there, allocated whole first
# (fallocate), at a 2 MiB-aligned address: one from file offset 0 (the
# stripe keeps the extents 2 MiB aligned: PMD faults), one from file offset
# 4096 (4 KiB faults). Each holds its mapping until its fifo is closed.
mkfifo /tmp/hold.aligned /tmp/hold.misaligned
# One after the other: two files allocated at once may interleave their
# extents (then neither is 2 MiB aligned).
hugeshm-testproc --touch dax:/mnt/pmem/aligned:64M </tmp/hold.aligned >/tmp/aligned.json &
exec 3>/tmp/hold.aligned
wait_for /tmp/aligned.json '"pid"' 60
hugeshm-testproc --touch dax:/mnt/pmem/misaligned:64M:4096 </tmp/hold.misaligned \
    >/tmp/misaligned.json 3>&- &
exec 4>/tmp/hold.misaligned
wait_for /tmp/misaligned.json '"pid"' 60
block pmem.procs cat /tmp/aligned.json /tmp/misaligned.json
# What else the kernel says about the two mappings: smaps (the same for
# both) and the processes' page tables (VmPTE).
for f in aligned misaligned; do
    pid=$(sed 's/.*"pid":\([0-9]*\).*/\1/' /tmp/$f.json)
    block "pmem.smaps.$f" sh -c "grep -A24 ' /mnt/pmem/$f\$' /proc/$pid/smaps |
        grep -E '^(Rss|FilePmdMapped|KernelPageSize|MMUPageSize|VmFlags)'"
    block "pmem.vmpte.$f" grep VmPTE /proc/$pid/status
done
block pmem.segments.json hugeshm segments --json
block pmem.segments hugeshm segments --color never
block pmem.status.json hugeshm status --json
block pmem.status hugeshm status --color never
exec 3>&- 4>&-
wait
block pmem.files ls -a /mnt/pmem
umount /mnt/pmem
block pmem.after cat /proc/mounts
