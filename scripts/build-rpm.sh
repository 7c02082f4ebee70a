#!/usr/bin/env bash
# Builds the RPM of hugeshm beside the Debian package, from the same files:
# target/rpm/hugeshm-VERSION-1.ARCH.rpm (Oracle Linux, RHEL, Fedora).
#
# usage: scripts/build-rpm.sh [DEB]   (default: the newest target/debian/hugeshm_*.deb;
#                                     scripts/build-deb.sh is run when there is none)
#
# Needs rpmbuild (Debian's `rpm` package) and dpkg-deb. The files are the
# .deb's, unpacked (the same stripped binary, C library, header,
# pkg-config file, run library, man pages, completions, units, rules,
# dashboard and docs: nothing is built twice), moved to the paths Oracle
# Linux and RHEL use (contrib/rpm/deb-to-rpm.sed: units in
# /usr/lib/systemd/system, the C library and its .pc in /usr/lib64, zsh
# completions in site-functions); the .pc file's libdir follows. The spec
# is contrib/rpm/hugeshm.spec; scripts/check-rpm.sh checks the result.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
deb="${1:-}"
if [ -z "$deb" ]; then
    deb="$(ls -t "$target_dir"/debian/hugeshm_*.deb 2>/dev/null | head -n1 || true)"
    if [ -z "$deb" ]; then
        scripts/build-deb.sh
        deb="$(ls -t "$target_dir"/debian/hugeshm_*.deb | head -n1)"
    fi
fi
[ -f "$deb" ] || { echo "build-rpm.sh: no package $deb" >&2; exit 1; }
command -v rpmbuild >/dev/null || { echo "build-rpm.sh: no rpmbuild (apt-get install rpm)" >&2; exit 1; }

version="$(dpkg-deb -f "$deb" Version)"
version="${version%-*}"
url="$(dpkg-deb -f "$deb" Homepage)"
arch="$(rpm --eval '%{_arch}')"
out="$target_dir/rpm"
work="$out/build"
stage="$work/stage"
rm -rf "$work"
mkdir -p "$stage" "$out"

echo "== $deb -> $stage"
dpkg-deb -x "$deb" "$stage"
# Move each file where deb-to-rpm.sed puts it; drop the directories left empty.
(cd "$stage" && find . -type f -o -type l) | sed 's#^\.##' | sort >"$work/deb-files"
while read -r f; do
    to="$(sed -f contrib/rpm/deb-to-rpm.sed <<<"$f")"
    if [ "$to" != "$f" ]; then
        mkdir -p "$(dirname "$stage$to")"
        mv "$stage$f" "$stage$to"
    fi
done <"$work/deb-files"
find "$stage" -depth -type d -empty -delete
pc="$stage/usr/lib64/pkgconfig/hugeshm.pc"
sed -i 's#^libdir=.*#libdir=${exec_prefix}/lib64#' "$pc"
grep -qx 'libdir=${exec_prefix}/lib64' "$pc" || { echo "build-rpm.sh: $pc has no libdir line" >&2; exit 1; }

# The file list: every file, and hugeshm's own directories (those named
# hugeshm and below them: removed with the package; none the system owns),
# man pages and docs marked as such.
{
    (cd "$stage" && find . -type d) | sed 's#^\.##' | grep -E '/hugeshm(/|$)' | sed 's#^#%dir #'
    (cd "$stage" && find . -type f -o -type l) | sed 's#^\.##' | sort | while read -r f; do
        case "$f" in
            /usr/share/man/*) echo "%doc $f" ;;
            /usr/share/doc/*) echo "%doc $f" ;;
            *) echo "$f" ;;
        esac
    done
} >"$work/files"

echo "== rpmbuild -bb contrib/rpm/hugeshm.spec ($version, $arch)"
rpmbuild -bb --quiet \
    --define "_topdir $work/top" \
    --define "_rpmdir $out" \
    --define "_build_name_fmt %{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}.rpm" \
    --define "hugeshm_version $version" \
    --define "hugeshm_stage $stage" \
    --define "hugeshm_files $work/files" \
    --define "hugeshm_url ${url:-https://example.invalid/hugeshm}" \
    --target "$arch" \
    contrib/rpm/hugeshm.spec
rpm="$out/hugeshm-$version-1.$arch.rpm"
[ -f "$rpm" ] || { echo "build-rpm.sh: rpmbuild made no $rpm" >&2; exit 1; }
rm -rf "$work"
echo "$rpm"
