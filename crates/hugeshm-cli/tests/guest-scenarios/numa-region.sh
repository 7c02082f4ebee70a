# NUMA placement of regions on a real 2-node kernel
# (crates/hugeshm-cli/tests/guest/guest_numa_region.rs checks what this prints).
# Sourced by the guest's /init, which gives `mark`, `block` and `wait_for`.
# shellcheck shell=sh

node_pool() {
    echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"
}

echo 20 >"$(node_pool 0)"
echo 20 >"$(node_pool 1)"

# bind: all of a 16 MiB SysV region on node 1, with two pre-fault threads
# (which would otherwise spread it over both nodes).
mark bind
block bind.create hugeshm create nb --size 16M --page-size 2m --policy only \
    --backend sysv --numa bind=1 --prefault-threads 2 --json
block bind.rm hugeshm rm nb --json
block bind.default-threads hugeshm create nd --size 8M --page-size 2m \
    --policy only --backend sysv --numa bind=1 --json
block bind.default-threads.rm hugeshm rm nd --json

# interleave: half on each node.
mark interleave
block interleave.create hugeshm create ni --size 16M --page-size 2m --policy only \
    --backend sysv --numa interleave --prefault-threads 2 --json
block interleave.rm hugeshm rm ni --json

# shortfall: node 1 holds 2 free pages; bind=1 of 8 pages fails before the
# system call with node-exact numbers, and so does the caller's own
# numactl --membind=1; try falls back whole.
mark shortfall
echo 2 >"$(node_pool 1)"
block shortfall.bind hugeshm create ns --size 16M --page-size 2m --policy only \
    --backend sysv --numa bind=1
block shortfall.membind numactl --membind=1 hugeshm create ns --size 16M \
    --page-size 2m --policy only --backend sysv
block shortfall.try hugeshm create ns --size 16M --page-size 2m --policy try \
    --backend sysv --numa bind=1 --json
block shortfall.rm hugeshm rm ns --json
block shortfall.ipcs cat /proc/sysvipc/shm

# per-node: Oracle-style, one region per node bound to it, faulted from the
# node's CPU; then a per-node set that one node cannot hold, with the node's
# numbers before anything is created; then a part that cannot be created
# (its name is taken) after the other was: nothing of the set is left.
mark pernode
echo 20 >"$(node_pool 0)"
echo 20 >"$(node_pool 1)"
block pernode.create hugeshm create sga --size 32M --page-size 2m --policy only \
    --backend sysv --numa per-node --json
block pernode.ipcs cat /proc/sysvipc/shm
block pernode.attach hugeshm attach sga --per-node --json
block pernode.rm hugeshm rm sga --per-node --json
block pernode.table hugeshm create sga --size 32M --page-size 2m --policy only \
    --backend sysv --numa per-node
block pernode.table.rm hugeshm rm sga --per-node --json
echo 2 >"$(node_pool 1)"
block pernode.short hugeshm create sga --size 32M --page-size 2m --policy only \
    --backend sysv --numa per-node
block pernode.try hugeshm create sga --size 32M --page-size 2m --policy try \
    --backend sysv --numa per-node --json
block pernode.try.rm hugeshm rm sga --per-node --json
echo 20 >"$(node_pool 1)"
block pernode.taken hugeshm create sgb.node0 --size 4M --page-size 2m --policy only \
    --backend sysv --json
block pernode.partial hugeshm create sgb --size 32M --page-size 2m --policy only \
    --backend sysv --numa per-node
block pernode.partial.ipcs cat /proc/sysvipc/shm
block pernode.partial.rm hugeshm rm sgb.node0 --json
block pernode.pools cat /sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages \
    /sys/devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages

# weighted interleave: on a kernel before 6.9 (Debian 12's 6.1) a clear
# error before anything is created; on one that has it, weights 1 and 3 put
# 2 of the 8 pages on node 0 and 6 on node 1.
mark weighted
weights=/sys/kernel/mm/mempolicy/weighted_interleave
block weighted.kernel uname -r
if [ -d "$weights" ]; then
    echo 1 >"$weights/node0"
    echo 3 >"$weights/node1"
    block weighted.weights cat "$weights/node0" "$weights/node1"
fi
block weighted.create hugeshm create nw --size 16M --page-size 2m --policy only \
    --backend sysv --numa weighted-interleave --json
block weighted.ipcs cat /proc/sysvipc/shm
if [ -d "$weights" ]; then
    block weighted.rm hugeshm rm nw --json
fi

# held and bound: segments shows the policy and the node, and no
# single-node warning (the placement is on purpose).
mark held
# 64 MiB: the size from which single-node would warn.
echo 40 >"$(node_pool 1)"
hugeshm create nh --size 64M --page-size 2m --policy only --backend sysv \
    --numa bind=1 --hold --json >/tmp/held.json 2>/tmp/held.err &
holder=$!
if wait_for /tmp/held.err "holding region" 60; then
    block held.segments hugeshm segments --json
else
    block held.failed cat /tmp/held.json /tmp/held.err
fi
kill -TERM "$holder"
wait "$holder"
block held.rm hugeshm rm nh --json
