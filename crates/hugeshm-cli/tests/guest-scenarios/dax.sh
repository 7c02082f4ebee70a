# dax regions on an emulated NVDIMM (crates/hugeshm-cli/tests/guest_dax.rs
# checks what this prints). Sourced by the guest's /init, which gives
# `mark`, `block` and `wait_for`. The first boot sets up the namespace and
# the file system and writes; the second boot (same NVDIMM image) reads
# what survived the power-off.
# shellcheck shell=sh

mkdir -p /mnt/pmem
if [ -e /sys/bus/nd/devices/region0 ] && ! mount -o dax /dev/pmem0 /mnt/pmem 2>/dev/null; then
    mark setup
    block setup.labels sh -c "ndctl disable-region region0 &&
        ndctl init-labels -f nmem0 && ndctl enable-region region0"
    block setup.namespace ndctl create-namespace --region=region0 --mode=fsdax --align=2M
    # Extents on a 2 MiB grid (a plain -b 4096 gave the regions here
    # PMD entries too, with and without a 1 MiB file before them).
    block setup.mkfs mkfs.ext4 -q -F -b 4096 -E stride=512,stripe_width=512 /dev/pmem0
    block setup.mount mount -o dax /dev/pmem0 /mnt/pmem
fi
block mounted grep /mnt/pmem /proc/mounts

if [ -e /mnt/pmem/hugeshm.pm ]; then
    # Second boot: the region and what was persisted before the power-off.
    mark after
    block after.ls hugeshm ls --json
    block after.read hugeshm bench dax-child read pm 13 17
    block after.rm hugeshm rm pm --json
    block after.files ls -a /mnt/pmem
else
    mark create
    block create.pm hugeshm create pm --backend dax --size 32M --policy only --json
    block create.attach hugeshm attach pm --backend dax --json
    block create.ls hugeshm ls --json
    # A region larger than the device: the numbers, and nothing left.
    block create.full hugeshm create big --backend dax --size 1G --policy only
    block create.files ls -a /mnt/pmem
    # Not a DAX directory.
    block create.notdax hugeshm create nd --backend dax --size 8M --dir /tmp
    # Written and persisted, then the power goes: no sync, no unmount.
    block create.write hugeshm bench dax-child write pm 13 "survives-poweroff"
    # The harness's end line (the /init's own would follow a clean
    # poweroff, which syncs), then the power goes.
    say "DONE rc=0 uptime=$(uptime_s)"
    echo o >/proc/sysrq-trigger
    sleep 5
fi
