# `bench dmbc` on an emulated NVDIMM (crates/hugeshm-cli/tests/guest/guest_dmbc.rs
# checks what this prints): an fsdax namespace, ext4 mounted -o dax, the
# bench's data file there; then the same on the guest's tmpfs (not DAX).
# Sourced by the guest's /init, which gives `mark`, `block` and `wait_for`.
# Small sizes and short runs: TCG is slow.
# shellcheck shell=sh

mkdir -p /mnt/pmem
if [ -e /sys/bus/nd/devices/region0 ] && ! mount -o dax /dev/pmem0 /mnt/pmem 2>/dev/null; then
    mark setup
    block setup.labels sh -c "ndctl disable-region region0 &&
        ndctl init-labels -f nmem0 && ndctl enable-region region0"
    block setup.namespace ndctl create-namespace --region=region0 --mode=fsdax --align=2M
    block setup.mkfs mkfs.ext4 -q -F -b 4096 /dev/pmem0
    block setup.mount mount -o dax /dev/pmem0 /mnt/pmem
fi
block mounted grep /mnt/pmem /proc/mounts
mark dmbc
block dmbc.dax.json hugeshm bench dmbc --data-dir /mnt/pmem --data-size 32M --cache-size 4M --duration 1 --json
block dmbc.dax hugeshm bench dmbc --data-dir /mnt/pmem --data-size 32M --cache-size 4M --duration 1
block dmbc.tmp.json hugeshm bench dmbc --dir /tmp --data-size 32M --cache-size 4M --duration 1 --json
block dmbc.files ls -a /mnt/pmem
umount /mnt/pmem
