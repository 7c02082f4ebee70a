#!/usr/bin/env bash
# kernel.sh: print the guest kernel the QEMU test harness boots.
#
#   scripts/guest/kernel.sh
#
# The kernel is the newest /boot/vmlinuz-VER (by version order) that has a
# matching /lib/modules/VER/kernel directory, both readable: Debian's
# linux-image-amd64 installs such a pair. HUGESHM_GUEST_KERNEL=PATH picks a
# vmlinuz explicitly (its modules must be in /lib/modules/VER, VER taken from
# the file name after "vmlinuz-").
#
# Prints the vmlinuz path on stdout and exits 0; exits 3 with the reason on
# stderr when there is none (callers treat 3 as "cannot run here").
set -euo pipefail

modules_of() {
    local v=${1##*/vmlinuz-}
    echo "/lib/modules/$v"
}

if [ -n "${HUGESHM_GUEST_KERNEL:-}" ]; then
    k=$HUGESHM_GUEST_KERNEL
    if [ ! -r "$k" ]; then
        echo "HUGESHM_GUEST_KERNEL=$k is not a readable file" >&2
        exit 3
    fi
    if [ ! -d "$(modules_of "$k")/kernel" ]; then
        echo "HUGESHM_GUEST_KERNEL=$k has no $(modules_of "$k")/kernel" >&2
        exit 3
    fi
    echo "$k"
    exit 0
fi

found=()
for k in /boot/vmlinuz-*; do
    [ -e "$k" ] || continue
    found+=("$k")
done
if [ ${#found[@]} -eq 0 ]; then
    echo "no guest kernel: /boot has no vmlinuz-* (apt-get install linux-image-amd64)" >&2
    exit 3
fi
# Newest first; the first with readable modules wins.
while read -r k; do
    if [ -r "$k" ] && [ -d "$(modules_of "$k")/kernel" ]; then
        echo "$k"
        exit 0
    fi
done < <(printf '%s\n' "${found[@]}" | sort -V -r)
echo "no guest kernel: none of ${found[*]} is readable with a matching /lib/modules/VER/kernel" >&2
exit 3
