# hugeshm run on a real 2-node kernel (crates/hugeshm-cli/tests/guest/guest_run.rs
# checks what this prints). The C probe of tests/run/probe.c stands in for
# the server: PostgreSQL (its binaries, libraries, share files and a user to
# run as) does not fit in the test initramfs. It makes the mappings a
# server makes and reports its own smaps and numa_maps of each.
# Sourced by the guest's /init, which gives `mark`, `block` and `wait_for`.
# shellcheck shell=sh

node_pool() {
    echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"
}

echo 20 >"$(node_pool 0)"
echo 20 >"$(node_pool 1)"
run="hugeshm run --page-size 2m --policy only --prefault --min-size 4M"

# interleave: the shared mapping and the SysV segment split evenly over the
# nodes; the server's own (private) memory where its first touch puts it.
mark interleave
# shellcheck disable=SC2086
block interleave.probe $run --numa interleave -- probe shared:16m shm:16m private-full:16m
# While it holds them: segments shows the records.
# shellcheck disable=SC2086
(sleep 4; echo) | $run --numa interleave -- probe shared:16m hold >/tmp/held.out 2>&1 &
wait_for /tmp/held.out '"hold"' 20
block interleave.held cat /tmp/held.out
block interleave.segments hugeshm segments --json
wait

# bind=1: every page on node 1, faulted from node 1's CPU.
mark bind
# shellcheck disable=SC2086
block bind.probe $run --numa bind=1 -- probe shared:16m

# node 1 short (2 free pages): only fails with node 1's numbers; try falls
# back whole to 4 KiB pages.
mark short
echo 2 >"$(node_pool 1)"
# shellcheck disable=SC2086
block short.only $run --numa bind=1 -- probe shared:16m
block short.try hugeshm run --page-size 2m --policy try --prefault --min-size 4M \
    --numa bind=1 -- probe shared:16m
