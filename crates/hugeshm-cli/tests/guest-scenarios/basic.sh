# The first guest scenarios (crates/hugeshm-cli/tests/guest/guest.rs checks what
# they print). Sourced by the guest's /init (scripts/guest/init), which gives
# `mark`, `block` and `wait_for`; the guest has 2 NUMA nodes of 1 GiB and an
# NVDIMM of 256 MiB on node 1.
# shellcheck shell=sh

node_pool() {
    echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"
}

# pools: per-node 2 MiB pools written through sysfs, seen by status.
mark pools
echo 10 >"$(node_pool 0)"
echo 20 >"$(node_pool 1)"
block pools.written sh -c "cat $(node_pool 0) $(node_pool 1)"
block pools.numactl numactl --hardware
block pools.status hugeshm status --json

# sysv: a 2 MiB-page SysV segment held by `create --hold`, seen by segments
# with its bytes per node.
mark sysv
hugeshm create x --size 8M --page-size 2m --policy only --backend sysv \
    --hold --json >/tmp/create.json 2>/tmp/create.err &
holder=$!
if wait_for /tmp/create.err "holding region" 60; then
    block sysv.create cat /tmp/create.json
    block sysv.segments hugeshm segments --json
else
    block sysv.create-failed cat /tmp/create.json /tmp/create.err
fi
# Background jobs of sh ignore SIGINT: SIGTERM releases the holder.
kill -TERM "$holder"
wait "$holder"
holder_rc=$?
block sysv.holder sh -c "echo rc=$holder_rc; cat /tmp/create.err"
block sysv.rm hugeshm rm x --json
block sysv.ipcs cat /proc/sysvipc/shm

# nvdimm: an fsdax namespace on the NVDIMM, ext4 with 4 KiB blocks, mounted
# with -o dax.
mark nvdimm
if [ -e /sys/bus/nd/devices/region0 ]; then
    block nvdimm.labels sh -c "ndctl disable-region region0 &&
        ndctl init-labels nmem0 && ndctl enable-region region0"
    block nvdimm.namespace ndctl create-namespace --region=region0 --mode=fsdax
    block nvdimm.mkfs mkfs.ext4 -q -F -b 4096 /dev/pmem0
    mkdir -p /mnt/pmem
    block nvdimm.mount mount -o dax /dev/pmem0 /mnt/pmem
    block nvdimm.mounts cat /proc/mounts
    block nvdimm.status hugeshm status --json
    umount /mnt/pmem
else
    block nvdimm.missing ls /sys/bus/nd/devices
fi
