#!/usr/bin/env bash
# Builds and installs the hugeshm C library (crates/hugeshm-capi):
#
#   PREFIX/lib/libhugeshm.so, PREFIX/lib/libhugeshm.a
#   PREFIX/include/hugeshm.h
#   PREFIX/lib/pkgconfig/hugeshm.pc
#
# usage: scripts/install-capi.sh [--from DIR] [--libdir DIR] [PREFIX]
#
#   PREFIX        where to install (default /usr/local)
#   --libdir DIR  libraries and pkgconfig/ there (default PREFIX/lib)
#   --from DIR    install libhugeshm.so/.a already built in DIR (e.g.
#                 target/debug/deps) instead of `cargo build --release`
#   DESTDIR=...   stage under DESTDIR (hugeshm.pc still says PREFIX)
#
# Then: cc prog.c $(pkg-config --cflags --libs hugeshm)
# (with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not a default
# pkg-config directory; at run time the library must be found too: ldconfig,
# LD_LIBRARY_PATH or -Wl,-rpath,PREFIX/lib).
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
    exit "${1:-2}"
}

from=""
libdir=""
prefix=""
while [ $# -gt 0 ]; do
    case "$1" in
    --from) from="${2:?--from needs a directory}"; shift 2 ;;
    --libdir) libdir="${2:?--libdir needs a directory}"; shift 2 ;;
    -h | --help) usage 0 ;;
    -*) echo "install-capi.sh: unknown option $1" >&2; usage ;;
    *)
        [ -z "$prefix" ] || usage
        prefix="$1"; shift ;;
    esac
done
prefix="${prefix:-/usr/local}"
case "$prefix" in
/*) ;;
*) prefix="$(pwd)/$prefix" ;;
esac
libdir="${libdir:-$prefix/lib}"
includedir="$prefix/include"
destdir="${DESTDIR:-}"

root="$(cd "$(dirname "$0")/.." && pwd)"
crate="$root/crates/hugeshm-capi"

if [ -z "$from" ]; then
    echo "== cargo build --release -p hugeshm-capi"
    (cd "$root" && cargo build --release -p hugeshm-capi)
    target_dir="${CARGO_TARGET_DIR:-$root/target}"
    from="$target_dir/release"
fi
for f in libhugeshm.so libhugeshm.a; do
    if [ ! -f "$from/$f" ]; then
        echo "install-capi.sh: $from/$f not found" >&2
        exit 1
    fi
done

version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")"
if [ -z "$version" ]; then
    echo "install-capi.sh: no [workspace.package] version in $root/Cargo.toml" >&2
    exit 1
fi

echo "== installing hugeshm $version into ${destdir}$prefix"
install -d "$destdir$libdir" "$destdir$libdir/pkgconfig" "$destdir$includedir"
install -m 0755 "$from/libhugeshm.so" "$destdir$libdir/libhugeshm.so"
install -m 0644 "$from/libhugeshm.a" "$destdir$libdir/libhugeshm.a"
install -m 0644 "$crate/include/hugeshm.h" "$destdir$includedir/hugeshm.h"

# Paths under the prefix stay relative to ${prefix}, as pkg-config files do.
pc_libdir="$libdir"
[ "$libdir" = "$prefix/lib" ] && pc_libdir='${exec_prefix}/lib'
pc_includedir='${prefix}/include'
sed -e "s|@PREFIX@|$prefix|g" \
    -e "s|@LIBDIR@|$pc_libdir|g" \
    -e "s|@INCLUDEDIR@|$pc_includedir|g" \
    -e "s|@VERSION@|$version|g" \
    "$crate/hugeshm.pc.in" >"$destdir$libdir/pkgconfig/hugeshm.pc"
chmod 0644 "$destdir$libdir/pkgconfig/hugeshm.pc"

for f in "$libdir/libhugeshm.so" "$libdir/libhugeshm.a" "$includedir/hugeshm.h" \
    "$libdir/pkgconfig/hugeshm.pc"; do
    echo "installed $destdir$f"
done

# Refresh the loader cache for the system directories it knows.
if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then
    case "$libdir" in
    /usr/lib | /usr/lib64 | /usr/local/lib | /usr/local/lib64) ldconfig ;;
    esac
fi
