#!/usr/bin/env bash
# build-initramfs.sh: build the initramfs (cpio newc, gzip) of the hugeshm
# test guest.
#
#   scripts/guest/build-initramfs.sh -o OUT.cpio.gz [-s SCENARIO.sh]
#       [-b BINARY]... [-f SRC:DEST]... [-e SRC:DEST]... [-d SRC:DEST]...
#       [-k VMLINUZ] [-g]
#
#   -o OUT       the initramfs to write
#   -s FILE      the scenario, installed as /scenario.sh; /init sources it
#                (see scripts/guest/init for the functions it may use)
#   -b BINARY    a test binary, installed as /usr/local/bin/NAME (its debug
#                info stripped when `strip` exists, unless -g)
#   -f SRC:DEST  any other file, installed at DEST
#   -e SRC:DEST  a program installed at DEST (not stripped), with the
#                libraries ldd lists: for one that must sit at its own path
#                (PostgreSQL's find their share directory from theirs)
#   -d SRC:DEST  a directory tree, copied whole at DEST (modes kept; every
#                file of the image is owned by root)
#   -k VMLINUZ   the guest kernel (default: scripts/guest/kernel.sh); its
#                modules come from /lib/modules/VER
#   -g           keep the debug info of the -b binaries
#
# What goes in: busybox (static, with a symlink per applet), the binaries,
# numactl, ndctl, mkfs.ext4 (mke2fs, /etc/mke2fs.conf), chattr and lsattr
# (e2fsprogs': they set and show the DAX flag, +x), every shared
# library `ldd` lists for them (at the same paths), the NVDIMM, device-dax
# and ext4 modules of the guest kernel (in load order, listed in
# /lib/modules/guest/order; a module built into that kernel is skipped),
# scripts/guest/init as /init, and the scenario. Needs read access to
# /lib/modules only: root is not required. Debian packages: busybox-static
# numactl ndctl e2fsprogs linux-image-amd64.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out="" scenario="" kernel="" keep_debug=0
bins=() files=() execs=() dirs=()

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

while getopts "o:s:b:f:e:d:k:gh" opt; do
    case "$opt" in
    o) out=$OPTARG ;;
    s) scenario=$OPTARG ;;
    b) bins+=("$OPTARG") ;;
    f) files+=("$OPTARG") ;;
    e) execs+=("$OPTARG") ;;
    d) dirs+=("$OPTARG") ;;
    k) kernel=$OPTARG ;;
    g) keep_debug=1 ;;
    *) usage ;;
    esac
done
[ -n "$out" ] || usage

die() {
    echo "build-initramfs: $*" >&2
    exit 1
}

[ -n "$kernel" ] || kernel=$("$here/kernel.sh")
kver=${kernel##*/vmlinuz-}
moddir=/lib/modules/$kver
[ -d "$moddir/kernel" ] || die "no $moddir/kernel for the kernel $kernel"

# The tools may sit in sbin directories that a user's PATH lacks.
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
tool() {
    command -v "$1" 2>/dev/null || die "$1 not found (Debian package: $2)"
}
busybox=$(tool busybox busybox-static)
numactl=$(tool numactl numactl)
ndctl=$(tool ndctl ndctl)
mkfs_ext4=$(tool mkfs.ext4 e2fsprogs)
chattr=$(tool chattr e2fsprogs)
lsattr=$(tool lsattr e2fsprogs)
command -v gzip >/dev/null || die "gzip not found"

stage=$(mktemp -d "${TMPDIR:-/tmp}/hugeshm-initramfs.XXXXXX")
trap 'rm -rf "$stage"' EXIT
# mktemp made it 0700: the image's / must let every user through.
chmod 755 "$stage"

# put SRC DEST: copy SRC (links followed) to DEST inside the image.
put() {
    mkdir -p "$stage$(dirname "$2")"
    cp -L "$1" "$stage$2"
}

# libs ELF: copy every shared library ldd lists for ELF, at the same path.
libs() {
    local list
    # A static binary: ldd says "not a dynamic executable" and fails.
    list=$(ldd "$1" 2>/dev/null) || return 0
    while read -r lib; do
        [ -e "$stage$lib" ] || put "$lib" "$lib"
    done < <(printf '%s\n' "$list" | grep -o '/[^ ]*' || true)
}

# The directories /init uses, and the ones mount points need.
mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,proc,sys,dev,tmp,run,mnt,root}
mkdir -p "$stage/lib/modules/guest"

# Tools first, so that busybox's applets do not shadow them.
put "$busybox" /bin/busybox
libs "$busybox"
for t in "$numactl" "$ndctl" "$chattr" "$lsattr"; do
    put "$t" "/usr/bin/$(basename "$t")"
    libs "$t"
done
# mkfs.ext4 is mke2fs under another name: it picks ext4 from argv[0].
put "$mkfs_ext4" /usr/sbin/mkfs.ext4
libs "$mkfs_ext4"
[ ! -r /etc/mke2fs.conf ] || put /etc/mke2fs.conf /etc/mke2fs.conf

for b in "${bins[@]}"; do
    [ -f "$b" ] || die "no binary $b"
    dest=/usr/local/bin/$(basename "$b")
    if [ "$keep_debug" = 0 ] && command -v strip >/dev/null; then
        mkdir -p "$stage/usr/local/bin"
        strip --strip-debug -o "$stage$dest" "$b"
    else
        put "$b" "$dest"
    fi
    libs "$b"
done

# split OPT SRC:DEST: sets src and dest, or dies.
split() {
    src=${2%%:*}
    dest=${2#*:}
    if [ "$src" = "$2" ] || [ "${dest#/}" = "$dest" ]; then
        die "-$1 $2: want SRC:/DEST"
    fi
}
for f in "${files[@]}"; do
    split f "$f"
    put "$src" "$dest"
done
for e in "${execs[@]}"; do
    split e "$e"
    [ -f "$src" ] || die "no program $src"
    put "$src" "$dest"
    libs "$src"
done
for d in "${dirs[@]}"; do
    split d "$d"
    [ -d "$src" ] || die "no directory $src"
    mkdir -p "$stage$dest"
    cp -a "$src/." "$stage$dest/"
done

# One symlink per busybox applet where nothing sits yet.
while read -r applet; do
    [ -n "$applet" ] || continue
    if [ ! -e "$stage/$applet" ] && [ ! -L "$stage/$applet" ]; then
        mkdir -p "$stage/$(dirname "$applet")"
        ln -s /bin/busybox "$stage/$applet"
    fi
done < <("$busybox" --list-full)

# The modules of the recipe (docs: vm-recipe.md), in insmod order.
modules=(
    drivers/nvdimm/libnvdimm
    drivers/acpi/nfit/nfit
    drivers/nvdimm/nd_btt
    drivers/nvdimm/nd_pmem
    drivers/dax/device_dax
    drivers/dax/dax_pmem
    crypto/crc32c_generic
    lib/crc16
    fs/mbcache
    fs/jbd2/jbd2
    fs/ext4/ext4
)
: >"$stage/lib/modules/guest/order"
for m in "${modules[@]}"; do
    name=$(basename "$m").ko
    src=""
    for ext in "" .xz .zst .gz; do
        if [ -f "$moddir/kernel/$m.ko$ext" ]; then
            src=$moddir/kernel/$m.ko$ext
            break
        fi
    done
    if [ -z "$src" ]; then
        if grep -qx "kernel/$m.ko" "$moddir/modules.builtin" 2>/dev/null; then
            continue
        fi
        die "module $m is neither in $moddir/kernel nor built into $kver"
    fi
    # busybox insmod loads plain .ko files only.
    case "$src" in
    *.xz) xz -dc "$src" >"$stage/lib/modules/guest/$name" ;;
    *.zst) zstd -qdc "$src" >"$stage/lib/modules/guest/$name" ;;
    *.gz) gzip -dc "$src" >"$stage/lib/modules/guest/$name" ;;
    *) cp "$src" "$stage/lib/modules/guest/$name" ;;
    esac
    echo "$name" >>"$stage/lib/modules/guest/order"
done

cp "$here/init" "$stage/init"
chmod 755 "$stage/init"
if [ -n "$scenario" ]; then
    cp "$scenario" "$stage/scenario.sh"
fi

mkdir -p "$(dirname "$out")"
(cd "$stage" && find . | LC_ALL=C sort | "$busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
    gzip -3 >"$out.tmp"
mv "$out.tmp" "$out"
echo "build-initramfs: $out ($(du -k "$out" | cut -f1) KiB, kernel $kver)" >&2
