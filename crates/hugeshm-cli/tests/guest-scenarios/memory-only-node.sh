# A CXL-like memory-only node (node 2: 512 MiB, no CPU) beside the two
# nodes with CPUs (crates/hugeshm-cli/tests/guest/guest_memory_only_node.rs checks
# what this prints). Sourced by the guest's /init.
# shellcheck shell=sh

node_pool() {
    echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"
}

mark nodes
block nodes.hardware numactl --hardware
echo 8 >"$(node_pool 0)"
echo 8 >"$(node_pool 1)"
echo 8 >"$(node_pool 2)"
block nodes.pools sh -c "cat $(node_pool 0) $(node_pool 1) $(node_pool 2)"

# bind=2: every page on the memory-only node; no CPU there, so the
# pre-fault is not pinned.
mark bind
block bind.create hugeshm create cx --size 16M --page-size 2m --policy only \
    --backend sysv --numa bind=2 --json
block bind.rm hugeshm rm cx --json

# per-node spans the memory-only node too (Oracle's pools know no CXL, but
# a part there is what a tier gets).
mark pernode
block pernode.create hugeshm create cs --size 24M --page-size 2m --policy only \
    --backend sysv --numa per-node --json
block pernode.rm hugeshm rm cs --per-node --json
block pernode.ipcs cat /proc/sysvipc/shm
block pernode.status hugeshm status --json
block pernode.status.text hugeshm status
