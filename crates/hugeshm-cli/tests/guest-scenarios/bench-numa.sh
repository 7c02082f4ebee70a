# `hugeshm bench numa` on a real 2-node kernel
# (crates/hugeshm-cli/tests/guest/guest_bench_numa.rs checks what this prints).
# Sourced by the guest's /init, which gives `mark`, `block` and `wait_for`.
# The per-node 2 MiB pools start empty: the bench raises them node by node
# and gives them back, which the pools block after it shows.
# shellcheck shell=sh

node_pool() {
    echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"
}

mark bench
block bench.json hugeshm bench numa --size 16M --page-size 4k,2m --runs 2 --json
block bench.table hugeshm bench numa --size 16M --page-size 4k,2m --runs 2
block bench.pools cat "$(node_pool 0)" "$(node_pool 1)"
block bench.ipcs cat /proc/sysvipc/shm
# `hugeshm lab`'s NUMA reproduction (seed 002) over the same measurement.
block lab.json hugeshm lab --quick --only numa --json
block lab.pools cat "$(node_pool 0)" "$(node_pool 1)"
