# dax regions on an emulated NVDIMM (crates/hugeshm-cli/tests/guest/guest_dax.rs
# checks what this prints). Sourced by the guest's /init, which gives
# `mark`, `block` and `wait_for`. The first boot sets up two namespaces, an
# fsdax one with a file system and a devdax one (/dev/daxX.Y), and writes
# to a region on each; the second boot (same NVDIMM image, whose labels
# bring both namespaces back) reads what survived the power-off.
# shellcheck shell=sh

mkdir -p /mnt/pmem
if [ -e /sys/bus/nd/devices/region0 ] && ! mount -o dax /dev/pmem0 /mnt/pmem 2>/dev/null; then
    mark setup
    block setup.labels sh -c "ndctl disable-region region0 &&
        ndctl init-labels -f nmem0 && ndctl enable-region region0"
    block setup.namespace ndctl create-namespace --region=region0 --mode=fsdax --align=2M \
        --size=128M
    block setup.devdax ndctl create-namespace --region=region0 --mode=devdax --align=2M
    # Extents on a 2 MiB grid (a plain -b 4096 gave the regions here
    # PMD entries too, with and without a 1 MiB file before them).
    block setup.mkfs mkfs.ext4 -q -F -b 4096 -E stride=512,stripe_width=512 /dev/pmem0
    block setup.mount mount -o dax /dev/pmem0 /mnt/pmem
fi
block mounted grep /mnt/pmem /proc/mounts
dev=$(ls /dev/dax* 2>/dev/null | head -n 1)
block devdax.device sh -c "echo $dev; cat /sys/bus/dax/devices/${dev#/dev/}/size \
    /sys/bus/dax/devices/${dev#/dev/}/align"

if [ -e /mnt/pmem/hugeshm.pm ]; then
    # Second boot: the region and what was persisted before the power-off.
    mark after
    block after.ls hugeshm ls --json
    block after.read hugeshm bench dax-child read pm 13 17
    block after.rm hugeshm rm pm --json
    block after.files ls -a /mnt/pmem
    # The device's region: its bytes, then rm frees the device for another.
    block after.devread hugeshm bench dax-child read dd 13 15
    block after.devrm hugeshm rm dd --json
    block after.devls hugeshm ls --json
    block after.devagain hugeshm create again --backend dax --device "$dev" --size 4M --json
    block after.devrm2 hugeshm rm again --json
    block after.devend hugeshm ls --json
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

    # device-dax: a region held by a process; while held, another create
    # on the device and rm are refused; once let go, rm frees the device.
    mark devdax
    hugeshm create dh --backend dax --device "$dev" --size 8M --hold --json \
        >/tmp/dh.json 2>/tmp/dh.err &
    held=$!
    wait_for /tmp/dh.err "holding region" 60
    block devdax.held cat /tmp/dh.json
    block devdax.heldls hugeshm ls --json
    block devdax.busy hugeshm create other --backend dax --device "$dev" --size 8M
    block devdax.inuse hugeshm rm dh
    # Background jobs of sh ignore SIGINT: SIGTERM releases the holder.
    kill -TERM "$held"
    wait "$held"
    block devdax.rmheld hugeshm rm dh --json
    block devdax.freels hugeshm ls --json
    # Four creators of different names race for the free device: one wins,
    # the others are refused; rm frees it again.
    pids=""
    for n in 1 2 3 4; do
        hugeshm create "race$n" --backend dax --device "$dev" --size 4M \
            >/dev/null 2>"/tmp/race$n.err" &
        pids="$pids $!"
    done
    n=0
    : >/tmp/race.rc
    for p in $pids; do
        n=$((n + 1))
        wait "$p"
        echo "race$n $?" >>/tmp/race.rc
    done
    block devdax.race cat /tmp/race.rc
    block devdax.raceerr sh -c 'cat /tmp/race*.err'
    block devdax.racels hugeshm ls --json
    block devdax.racerm hugeshm rm "$(awk '$2 == 0 { print $1 }' /tmp/race.rc)" --json
    # The region that meets the power-off, attached by name from another
    # process; another name on the device, and one larger than it, are
    # refused with the numbers.
    block devdax.create hugeshm create dd --backend dax --device "$dev" --size 32M \
        --policy only --json
    block devdax.attach hugeshm attach dd --backend dax --json
    # Nobody holds it now: create refuses the name, reuse keeps the
    # region, recreate makes it anew on the same device.
    block devdax.again hugeshm create dd --backend dax --device "$dev" --size 32M
    block devdax.reuse hugeshm create dd --backend dax --device "$dev" --size 32M \
        --reclaim reuse --json
    # (found by name: recreated on its device without --device)
    block devdax.recreate hugeshm create dd --backend dax --size 32M --reclaim recreate \
        --json
    block devdax.ls hugeshm ls --json
    # Ownership: a device node another user owns (whatever the header
    # says), or one that others may write, is not trusted.
    chown 1000 "$dev"
    block devdax.foreign hugeshm attach dd --backend dax
    block devdax.foreignrm hugeshm rm dd
    chown 0 "$dev"
    chmod 0666 "$dev"
    block devdax.writable hugeshm attach dd --backend dax
    chmod 0600 "$dev"
    block devdax.taken hugeshm create other --backend dax --device "$dev" --size 8M
    block devdax.big hugeshm create big --backend dax --device "$dev" --size 1G
    block devdax.write hugeshm bench dax-child write dd 13 "device-survives"
    # The harness's end line (the /init's own would follow a clean
    # poweroff, which syncs), then the power goes.
    say "DONE rc=0 uptime=$(uptime_s)"
    echo o >/proc/sysrq-trigger
    sleep 5
fi
