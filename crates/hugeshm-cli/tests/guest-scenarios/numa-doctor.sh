# The NUMA doctor on a real 2-node kernel (crates/hugeshm-cli/tests/
# guest_numa_doctor.rs checks what it prints): uneven per-node pools and
# their fix, a /dev/shm file written from node 1 ("Cyclops") and the mpol
# remount that fixes it, advise/apply with --spread beside a live segment.
# Sourced by the guest's /init (scripts/guest/init), which gives `mark`,
# `block` and `wait_for`; the guest has 2 NUMA nodes of 1 GiB and one CPU
# each.
# shellcheck shell=sh

node_pool() {
    echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"
}

pools() {
    cat "$(node_pool 0)" "$(node_pool 1)"
}

set_pools() {
    echo "$1" >"$(node_pool 0)"
    echo "$2" >"$(node_pool 1)"
}

# fix_of FILE CODE: the fix of the finding CODE in the status JSON in FILE
# (pretty-printed: "code", "message", "fix" on lines of their own).
fix_of() {
    grep -A2 "\"code\": \"$2\"" "$1" | sed -n 's/^ *"fix": "\(.*\)"$/\1/p' | head -n 1
}

# shmem_kb: the Shmem of each node in kB, one line per node.
shmem_kb() {
    for n in 0 1; do
        sed -n 's/^Node [0-9]* Shmem: *\([0-9]*\) kB$/\1/p' \
            "/sys/devices/system/node/node$n/meminfo"
    done
}

# hold NAME ARGS...: `hugeshm create NAME ARGS --hold` in the background
# (under the numactl words in $PIN); its pid in $held, its JSON report in
# /tmp/NAME.json. Returns 1 when it did not come up in 60 s.
hold() {
    _n=$1
    shift
    # shellcheck disable=SC2086 # $PIN is a list of words
    $PIN hugeshm create "$_n" "$@" --hold --json >"/tmp/$_n.json" 2>"/tmp/$_n.err" &
    held=$!
    wait_for "/tmp/$_n.err" "holding region" 60
}

# release PID NAME: SIGTERM the holder, then remove the region.
release() {
    kill -TERM "$1"
    wait "$1"
    hugeshm rm "$2" >/dev/null
}

# uneven: pools 100/20 on two alike nodes; status says pool-uneven with the
# per-node writes, and persistence per node; running its fix evens them.
mark uneven
set_pools 100 20
block uneven.pools pools
hugeshm status --json >/tmp/uneven.json
block uneven.status cat /tmp/uneven.json
fix=$(fix_of /tmp/uneven.json pool-uneven)
block uneven.fix sh -c "$fix"
block uneven.fixed-pools pools
block uneven.fixed-status hugeshm status --json

# cyclops: a /dev/shm file written by a process bound to node 1 sits on
# node 1; the tmpfs-no-mpol fix (the remount) makes a new one spread.
mark cyclops
set_pools 0 0
PIN="numactl --cpunodebind=1 --membind=1"
hold cyc1 --backend posix --size 64M --page-size 4k --policy off
cyc1=$held
block cyclops.create cat /tmp/cyc1.json /tmp/cyc1.err
# dd from node 1 as well: nobody maps that file, so only the nodes' Shmem
# tells where it went.
shmem_kb >/tmp/shmem.0
numactl --cpunodebind=1 --membind=1 dd if=/dev/zero of=/dev/shm/dd1 bs=1M count=64 2>/dev/null
shmem_kb >/tmp/shmem.1
block cyclops.dd-shmem paste /tmp/shmem.0 /tmp/shmem.1
block cyclops.segments hugeshm segments --json
hugeshm status --json >/tmp/cyclops.json
block cyclops.status cat /tmp/cyclops.json
fix=$(fix_of /tmp/cyclops.json tmpfs-no-mpol)
block cyclops.remount sh -c "$fix"
block cyclops.mounts grep ' /dev/shm ' /proc/mounts
hold cyc2 --backend posix --size 64M --page-size 4k --policy off
cyc2=$held
block cyclops.create2 cat /tmp/cyc2.json /tmp/cyc2.err
shmem_kb >/tmp/shmem.2
numactl --cpunodebind=1 --membind=1 dd if=/dev/zero of=/dev/shm/dd2 bs=1M count=64 2>/dev/null
shmem_kb >/tmp/shmem.3
block cyclops.dd2-shmem paste /tmp/shmem.2 /tmp/shmem.3
block cyclops.segments2 hugeshm segments --json
# The file written before the remount goes (its owner would recreate it).
release "$cyc1" cyc1
rm -f /dev/shm/dd1 /dev/shm/dd2
block cyclops.segments3 hugeshm segments --json
block cyclops.status3 hugeshm status --json
release "$cyc2" cyc2
block cyclops.left ls -A /dev/shm
PIN=

# apply: --size 200M --spread ends exactly as advise planned, per node;
# beside a live 64 MiB region on node 0 it is refused until --live counts
# the region.
mark apply
set_pools 100 20
block apply.advise hugeshm advise --size 200M --spread --json
block apply.apply hugeshm apply --size 200M --spread --json
block apply.pools pools
set_pools 100 20
PIN="numactl --cpunodebind=0 --membind=0"
hold live --backend sysv --size 64M --page-size 2m --policy only
live=$held
PIN=
block apply.live-create cat /tmp/live.json
block apply.live-before pools
block apply.live-advise hugeshm advise --size 200M --spread --json
block apply.live-refused hugeshm apply --size 200M --spread
block apply.live-after-refusal pools
block apply.live-advise-counted hugeshm advise --size 200M --spread --live --json
block apply.live-apply hugeshm apply --size 200M --spread --live --json
block apply.live-pools pools
release "$live" live
set_pools 0 0
block apply.end sh -c "cat /proc/sysvipc/shm; ls -A /dev/shm; cat $(node_pool 0) $(node_pool 1)"
