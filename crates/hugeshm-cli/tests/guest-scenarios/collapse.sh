# `hugeshm collapse` on the guest's kernel (Debian's 6.1, the first with
# MADV_COLLAPSE) and its 2 NUMA nodes
# (crates/hugeshm-cli/tests/guest/guest_collapse.rs checks what this prints).
# Sourced by the guest's /init, which gives `mark`, `block` and `wait_for`.
# shellcheck shell=sh

SHMEM=/sys/kernel/mm/transparent_hugepage/shmem_enabled

mark collapse
block collapse.kernel uname -r
block collapse.shmem_enabled cat "$SHMEM"
was=$(sed 's/.*\[\(.*\)\].*/\1/' "$SHMEM")
# A 32 MiB SysV segment on 4 KiB pages, touched by a holder bound to node 1
# and mapped by 2 forked children that wrote every page once. The holder
# holds it until its stdin (a FIFO) closes.
mkfifo /tmp/hold
numactl --membind=1 hugeshm-testproc --touch --align 2M --forks 2 --write-every 0 \
    sysv-plain:32M </tmp/hold >/tmp/tp.json 2>/tmp/tp.err &
holder=$!
exec 3>/tmp/hold
if wait_for /tmp/tp.json '"pid"' 60; then
    block collapse.holder cat /tmp/tp.json
    block collapse.before sh -c "grep SYSV /proc/$holder/numa_maps"
    block collapse.json hugeshm collapse --pid "$holder" --json
    block collapse.after sh -c "grep SYSV /proc/$holder/numa_maps; grep -A20 SYSV /proc/$holder/smaps | grep -E '^(Rss|ShmemPmdMapped):'"
    block collapse.segments hugeshm segments --json
    # shmem_enabled = deny: refused (exit 2), nothing tried.
    echo deny >"$SHMEM"
    block collapse.deny hugeshm collapse --pid "$holder" --json
    echo "$was" >"$SHMEM"
else
    block collapse.holder-failed cat /tmp/tp.json /tmp/tp.err
fi
exec 3>&-
wait "$holder"
# The holder removed its segment (IPC_RMID); the children notice it ended
# within 20 ms, and the segment goes with the last of them.
n=50
while [ "$n" -gt 0 ] && [ "$(wc -l </proc/sysvipc/shm)" -gt 1 ]; do
    usleep 100000
    n=$((n - 1))
done
block collapse.ipcs cat /proc/sysvipc/shm
