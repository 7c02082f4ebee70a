#!/bin/sh
# capture-fixture.sh: copy, from the live host, exactly the files hugeshm reads
# into a fixture tree that `hugeshm --proc-root DEST/proc --sys-root DEST/sys
# --fs-root DEST/fs` (or HUGESHM_PROC_ROOT / HUGESHM_SYS_ROOT / HUGESHM_FS_ROOT)
# can read back.
#
#   scripts/capture-fixture.sh [--no-mount-rewrite] DEST [PID...]
#
# Without PIDs every process that maps shared memory or hugetlb memory (a
# MAP_SHARED mapping, /SYSV*, /memfd:*, /anon_hugepage, or a file on a
# hugetlbfs mount) is captured. Run it as root to read every process.
#
# What is captured (files that do not exist on this kernel are skipped):
#   DEST/proc/{meminfo,cmdline,mounts,sysvipc/shm,buddyinfo,pagetypeinfo}
#   DEST/proc/sys/vm/{nr_hugepages,nr_overcommit_hugepages,hugetlb_shm_group,
#                     min_free_kbytes,overcommit_memory,hugetlb_optimize_vmemmap}
#   DEST/proc/sys/kernel/{shmmax,shmall,shmmni}
#   DEST/proc/self/{limits,status,cgroup,mountinfo}
#                                       (of the `cat` reading them, as hugeshm
#                                        reads its own)
#   DEST/proc/PID/{status,limits,maps,smaps,numa_maps,cgroup}
#   DEST/fs/<hugetlb cgroup mount>/cgroup.controllers and, for the cgroup of
#       the reader and of each PID and every ancestor, its hugetlb.* files
#   DEST/sys/kernel/mm/hugepages/hugepages-*/{nr,free,resv,surplus,
#                                             nr_overcommit}_hugepages, demote_size
#   DEST/sys/kernel/mm/transparent_hugepage/{enabled,defrag,shmem_enabled,
#                                            khugepaged/defrag}
#   DEST/sys/devices/system/node/node*/{cpulist,distance,meminfo}
#   DEST/sys/devices/system/node/node*/hugepages/hugepages-*/{nr,free,
#                                                  surplus}_hugepages
#
# Files are copied with `cat`: /proc and /sys files report a size of 0, so
# cp may copy nothing.
#
# /proc/mounts is rewritten so that it only lists the mounts hugeshm cares
# about (hugetlbfs, tmpfs on /dev/shm or with huge=/mpol=, and /, /proc,
# /sys, /dev) without duplicate lines: sandbox, container and cgroup mounts of
# the capturing machine do not leak into the fixture. /proc/self/mountinfo
# keeps the same mounts and the cgroup hierarchies (cgroup, cgroup2). DEST/fs is created
# empty: hugeshm skips a mount whose directory is absent under the fs root,
# so files on /dev/shm or hugetlbfs mounts of the host are not captured.
# --no-mount-rewrite keeps /proc/mounts as it is.
#
# CAPTURE_PROC and CAPTURE_SYS (default /proc and /sys) read another tree.
set -eu

usage() {
    echo "usage: $0 [--no-mount-rewrite] DEST [PID...]" >&2
    exit 2
}

rewrite_mounts=1
while [ $# -gt 0 ]; do
    case $1 in
    --no-mount-rewrite)
        rewrite_mounts=0
        shift
        ;;
    -h | --help)
        sed -n '2,45p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    --)
        shift
        break
        ;;
    -*) usage ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || usage
dest=$1
shift
for p in "$@"; do
    case $p in
    '' | *[!0-9]*)
        echo "$0: not a pid: $p" >&2
        exit 2
        ;;
    esac
done

PROC=${CAPTURE_PROC:-/proc}
SYS=${CAPTURE_SYS:-/sys}

# copy SRC DST: cat SRC into DST, creating DST's directory; a file that is
# absent or unreadable is skipped with a note on stderr.
copy() {
    [ -e "$1" ] || return 0
    mkdir -p "$(dirname "$2")"
    if ! cat "$1" >"$2.tmp" 2>/dev/null; then
        rm -f "$2.tmp"
        [ -e "$1" ] && echo "capture-fixture: skipped $1 (unreadable)" >&2
        return 0
    fi
    mv "$2.tmp" "$2"
}

mkdir -p "$dest/proc" "$dest/sys" "$dest/fs"
P=$dest/proc
S=$dest/sys

# Host-wide /proc files.
for f in meminfo cmdline sysvipc/shm buddyinfo pagetypeinfo; do
    copy "$PROC/$f" "$P/$f"
done
for f in vm/nr_hugepages vm/nr_overcommit_hugepages vm/hugetlb_shm_group \
    vm/min_free_kbytes vm/overcommit_memory vm/hugetlb_optimize_vmemmap \
    kernel/shmmax kernel/shmall kernel/shmmni; do
    copy "$PROC/sys/$f" "$P/sys/$f"
done
# The reader's own limits and status (hugeshm reads /proc/self).
mkdir -p "$P/self"
cat "$PROC/self/limits" >"$P/self/limits"
cat "$PROC/self/status" >"$P/self/status"
copy "$PROC/self/cgroup" "$P/self/cgroup"

if [ $rewrite_mounts = 1 ]; then
    mkdir -p "$P"
    awk '
        $3 == "hugetlbfs" { keep = 1 }
        $3 == "tmpfs" && ($2 == "/dev/shm" || $4 ~ /(^|,)(huge|mpol)=/) { keep = 1 }
        $2 == "/" || $2 == "/proc" || $2 == "/sys" || $2 == "/dev" { keep = 1 }
        keep && !seen[$0]++ { print }
        { keep = 0 }
    ' "$PROC/mounts" >"$P/mounts"
    if [ -e "$PROC/self/mountinfo" ]; then
        awk '
            { for (i = 7; i <= NF; i++) if ($i == "-") break; fs = $(i + 1) }
            fs == "hugetlbfs" || fs == "cgroup" || fs == "cgroup2" { keep = 1 }
            fs == "tmpfs" && ($5 == "/dev/shm" || $(i + 3) ~ /(^|,)(huge|mpol)=/) { keep = 1 }
            $5 == "/" || $5 == "/proc" || $5 == "/sys" || $5 == "/dev" { keep = 1 }
            keep && !seen[$0]++ { print }
            { keep = 0 }
        ' "$PROC/self/mountinfo" >"$P/self/mountinfo"
    fi
else
    copy "$PROC/mounts" "$P/mounts"
    copy "$PROC/self/mountinfo" "$P/self/mountinfo"
fi

# Host-wide pools.
for d in "$SYS"/kernel/mm/hugepages/hugepages-*kB; do
    [ -d "$d" ] || continue
    rel=kernel/mm/hugepages/$(basename "$d")
    for f in nr_hugepages free_hugepages resv_hugepages surplus_hugepages \
        nr_overcommit_hugepages demote_size; do
        copy "$d/$f" "$S/$rel/$f"
    done
done

# THP.
for f in enabled defrag shmem_enabled khugepaged/defrag; do
    copy "$SYS/kernel/mm/transparent_hugepage/$f" \
        "$S/kernel/mm/transparent_hugepage/$f"
done

# NUMA nodes and their pools.
for n in "$SYS"/devices/system/node/node[0-9]*; do
    [ -d "$n" ] || continue
    rel=devices/system/node/$(basename "$n")
    for f in cpulist distance meminfo; do
        copy "$n/$f" "$S/$rel/$f"
    done
    for d in "$n"/hugepages/hugepages-*kB; do
        [ -d "$d" ] || continue
        for f in nr_hugepages free_hugepages surplus_hugepages; do
            copy "$d/$f" "$S/$rel/hugepages/$(basename "$d")/$f"
        done
    done
done

# Which processes: the ones named, or all that map shared or hugetlb memory.
auto=0
if [ $# -eq 0 ]; then
    auto=1
    huge_mounts=$(awk '$3 == "hugetlbfs" { print $2 }' "$PROC/mounts")
    pids=
    for d in "$PROC"/[0-9]*; do
        pid=${d##*/}
        [ "$pid" = "$$" ] && continue
        if awk -v mounts="$huge_mounts" '
            BEGIN { n = split(mounts, m, "\n") }
            $2 ~ /s$/ || $6 ~ /^\/(SYSV[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]|memfd:|anon_hugepage)/ { found = 1; exit }
            {
                for (i = 1; i <= n; i++)
                    if (m[i] != "" && index($6, m[i] "/") == 1) { found = 1; exit }
            }
            END { exit !found }
        ' "$d/maps" 2>/dev/null; then
            pids="$pids $pid"
        fi
    done
    set -- $pids
fi

captured=
for pid in "$@"; do
    if [ ! -d "$PROC/$pid" ]; then
        [ "$auto" = 1 ] || echo "capture-fixture: no process $pid" >&2
        continue
    fi
    for f in status limits maps smaps numa_maps cgroup; do
        copy "$PROC/$pid/$f" "$P/$pid/$f"
    done
    # A process that exited while it was read leaves a partial directory.
    if [ ! -s "$P/$pid/maps" ] || [ ! -s "$P/$pid/status" ]; then
        rm -rf "${P:?}/$pid"
        [ "$auto" = 1 ] || echo "capture-fixture: process $pid exited while it was read" >&2
        continue
    fi
    captured="$captured $pid"
done

# The hugetlb cgroup files: the hierarchy (a v1 mount with the hugetlb
# option, else a cgroup2 mount whose cgroup.controllers lists hugetlb), and
# for the cgroup of the reader and of each captured process, that cgroup and
# every ancestor up to the mount's root. Read under CAPTURE_FS (default /).
FSR=${CAPTURE_FS:-}
hmount='' hroot='' hv=''
if [ -e "$PROC/self/mountinfo" ]; then
    # "VERSION MOUNT-POINT ROOT" of each cgroup hierarchy that may hold
    # hugetlb, v1 first (mount points and roots keep their \040 escapes:
    # no spaces).
    while read -r v m r; do
        if [ "$v" = 1 ] || grep -qw hugetlb "$FSR$m/cgroup.controllers" 2>/dev/null; then
            hv=$v hmount=$m hroot=$r
            break
        fi
    done <<EOF
$(awk '
    { for (i = 7; i <= NF; i++) if ($i == "-") break }
    $(i + 1) == "cgroup" && ("," $(i + 3) ",") ~ /,hugetlb,/ { print 1, $5, $4 }
    $(i + 1) == "cgroup2" { print 2, $5, $4 }
' "$PROC/self/mountinfo" | sort -k1,1 -s)
EOF
fi
if [ -n "$hv" ]; then
    copy "$FSR$hmount/cgroup.controllers" "$dest/fs$hmount/cgroup.controllers"
    for cg in "$P"/self/cgroup "$P"/[0-9]*/cgroup; do
        [ -e "$cg" ] || continue
        if [ "$hv" = 1 ]; then
            path=$(awk -F: '("," $2 ",") ~ /,hugetlb,/ { print $3; exit }' "$cg")
        else
            path=$(awk -F: '$1 == "0" && $2 == "" { print $3; exit }' "$cg")
        fi
        [ -n "$path" ] || continue
        case $hroot in
        /) rel=$path ;;
        *) rel=${path#"$hroot"} ;;
        esac
        while :; do
            for f in "$FSR$hmount$rel"/hugetlb.*; do
                [ -e "$f" ] || continue
                copy "$f" "$dest/fs$hmount$rel/${f##*/}"
            done
            [ -z "$rel" ] || [ "$rel" = / ] && break
            rel=${rel%/*}
        done
    done
fi

echo "capture-fixture: captured into $dest (pids:${captured:- none})" >&2
