# Persistent memory in status (crates/hugeshm-cli/tests/guest_pmem.rs checks
# what it prints). Sourced by the guest's /init; the guest has an NVDIMM of
# 256 MiB on node 1 and a memory-only node 2.
# shellcheck shell=sh

mark pmem
block pmem.labels sh -c "ndctl disable-region region0 &&
    ndctl init-labels nmem0 && ndctl enable-region region0"
block pmem.namespace ndctl create-namespace --region=region0 --mode=fsdax
block pmem.mkfs mkfs.ext4 -q -F -b 4096 -E stride=512,stripe_width=512 /dev/pmem0
mkdir -p /mnt/pmem
block pmem.mount mount -o dax /dev/pmem0 /mnt/pmem
block pmem.status.json hugeshm status --json
block pmem.status hugeshm status --color never
umount /mnt/pmem
block pmem.after cat /proc/mounts
