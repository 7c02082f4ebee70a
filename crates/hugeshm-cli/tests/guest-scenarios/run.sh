# hugeshm run on a real 2-node kernel (crates/hugeshm-cli/tests/guest/guest_run.rs
# checks what this prints), with two servers: the C probe of
# tests/run/probe.c, which makes the mappings a server makes (shared, SysV,
# private) and reports its own smaps and numa_maps of each; and, where the
# host has it, PostgreSQL itself: the test packs its programs at their own
# paths, a data directory initdb made on the host (shared_buffers 64MB,
# huge_pages on) and a postgres user, and names them in /etc/hugeshm-pg.env.
# Sourced by the guest's /init, which gives `mark`, `block` and `wait_for`.
# shellcheck shell=sh

node_pool() {
    echo "/sys/devices/system/node/node$1/hugepages/hugepages-2048kB/nr_hugepages"
}

echo 24 >"$(node_pool 0)"
echo 24 >"$(node_pool 1)"
run="hugeshm run --page-size 2m --policy only --prefault --min-size 4M"

# interleave: the shared mapping and the SysV segment split evenly over the
# nodes; the server's own (private) memory where its first touch puts it.
mark interleave
# shellcheck disable=SC2086
block interleave.probe $run --numa interleave -- probe shared:16m shm:16m private-full:16m

# PostgreSQL through pg_ctl (so --target postgres), as the postgres user,
# every process on node 0's CPU (taskset): its main segment split evenly,
# its own memory on node 0 with the default policy; segments shows the
# record while it runs.
pg=""
if [ -r /etc/hugeshm-pg.env ]; then
    # shellcheck disable=SC1091 # written by the test: pg_bin, pg_data
    . /etc/hugeshm-pg.env
    pg="hugeshm run --target postgres --page-size 2m --policy only --prefault=2"
    chown -R postgres:postgres "$pg_data"
fi
if [ -n "$pg" ]; then
    mark pg.interleave
    block pg.start taskset 1 su postgres -c \
        "$pg --numa interleave -- $pg_bin/pg_ctl -D $pg_data -l /tmp/pg.log -w -t 120 start"
    block pg.log cat /tmp/pg.log
    pid=$(head -n 1 "$pg_data/postmaster.pid")
    block pg.pid echo "$pid"
    block pg.numa_maps cat "/proc/$pid/numa_maps"
    block pg.segments hugeshm segments --json
    block pg.stop su postgres -c "$pg_bin/pg_ctl -D $pg_data -w -t 60 stop -m fast"
fi

# bind=1: every page on node 1, faulted from node 1's CPU.
mark bind
# shellcheck disable=SC2086
block bind.probe $run --numa bind=1 -- probe shared:16m

# node 1 short (2 free pages): only fails with node 1's numbers; try falls
# back whole to 4 KiB pages. PostgreSQL under only does not start, and its
# log has the line (node 0 given 40 pages first, so that the pool as a
# whole would do and only node 1 is short).
mark short
echo 2 >"$(node_pool 1)"
# shellcheck disable=SC2086
block short.only $run --numa bind=1 -- probe shared:16m
block short.try hugeshm run --page-size 2m --policy try --prefault --min-size 4M \
    --numa bind=1 -- probe shared:16m
if [ -n "$pg" ]; then
    echo 40 >"$(node_pool 0)"
    block pg.short su postgres -c \
        "$pg --numa bind=1 -- $pg_bin/pg_ctl -D $pg_data -l /tmp/pg-short.log -w -t 60 start"
    block pg.short.log cat /tmp/pg-short.log
    block pg.short.after sh -c "pidof postgres || echo 'no postgres'
        [ -e $pg_data/postmaster.pid ] && echo 'postmaster.pid left' || echo 'no postmaster.pid'"
fi
