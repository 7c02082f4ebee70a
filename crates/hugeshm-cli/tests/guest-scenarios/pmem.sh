# Persistent memory in status and segments (crates/hugeshm-cli/tests/guest/guest_pmem.rs
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

# The same namespace mounted dax=inode: a file is DAX only with its own
# flag. Three processes map a 16 MiB file each: one created in a directory
# with the flag (new files take it), one without it, and one given the flag
# (chattr +x) while it is mapped (not in force until its inode is loaded
# again). Then a dax region there.
mark pmem.inode
block pmem.inode.mount mount -o dax=inode /dev/pmem0 /mnt/pmem
mkdir /mnt/pmem/flagged
block pmem.inode.chattr chattr +x /mnt/pmem/flagged
mkfifo /tmp/hold.inode
hugeshm-testproc --touch dax:/mnt/pmem/flagged/on:16M dax:/mnt/pmem/off:16M \
    </tmp/hold.inode >/tmp/inode.json &
exec 5>/tmp/hold.inode
wait_for /tmp/inode.json '"pid"' 60
mkfifo /tmp/hold.late
hugeshm-testproc --touch dax:/mnt/pmem/late:16M </tmp/hold.late >/tmp/late.json 5>&- &
exec 6>/tmp/hold.late
wait_for /tmp/late.json '"pid"' 60
block pmem.inode.setlate chattr +x /mnt/pmem/late
block pmem.inode.lsattr lsattr -d /mnt/pmem/flagged /mnt/pmem/flagged/on /mnt/pmem/off /mnt/pmem/late
block pmem.inode.segments.json hugeshm segments --json
block pmem.inode.segments hugeshm segments --color never
exec 5>&- 6>&-
wait
# A dax region on the dax=inode mount: its file has the flag from its
# creation (made in a staging directory with it), MAP_SYNC, PMD entries.
# A staging directory a killed creator left (pid 99999 is above the guest's
# pid_max, so gone) is swept by the create; the listing at the end shows it.
mkdir /mnt/pmem/.hugeshm.dax-99999-0
block pmem.inode.create hugeshm create pi --backend dax --dir /mnt/pmem --size 8M \
    --policy only --json
block pmem.inode.regionattr lsattr /mnt/pmem/hugeshm.pi
block pmem.inode.ls hugeshm ls --json
block pmem.inode.rm hugeshm rm pi --json
# In a directory with the flag (here the mount's root): made there directly.
chattr +x /mnt/pmem
block pmem.inode.createflagged hugeshm create pf --backend dax --size 4M --policy only --json
block pmem.inode.rmflagged hugeshm rm pf --json
block pmem.inode.files ls -a /mnt/pmem
umount /mnt/pmem
block pmem.inode.after cat /proc/mounts

# A dax=inode file system whose files cannot be DAX (1 KiB blocks; DAX
# needs blocks of the page size), which the kernel mounts all the same: a
# dax region there is not DAX although it has the flag; only refuses and
# leaves nothing, try maps it plainly and says so.
block pmem.nodax.mkfs mkfs.ext4 -q -F -b 1024 /dev/pmem0
block pmem.nodax.mount mount -o dax=inode /dev/pmem0 /mnt/pmem
block pmem.nodax.only hugeshm create nd --backend dax --size 4M --policy only
block pmem.nodax.onlyfiles ls -a /mnt/pmem
block pmem.nodax.try hugeshm create nd --backend dax --size 4M --policy try --json
block pmem.nodax.rm hugeshm rm nd --json
block pmem.nodax.files ls -a /mnt/pmem
umount /mnt/pmem
