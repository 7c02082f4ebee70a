#!/usr/bin/env bash
# Checks the RPM against the Debian package it was made from, and installs
# it into a scratch root:
#
#   rpm -qlp (the RPM's files) equals dpkg-deb -c (the .deb's files) with
#   the paths contrib/rpm/deb-to-rpm.sed maps; rpm --root DIR -i --nodeps
#   --noscripts into an empty directory; DIR/usr/bin/hugeshm --version from
#   there, and `hugeshm run --print-env` finding its preload library beside
#   it (DIR/usr/lib/hugeshm); the .pc file's libdir; rpm --root DIR -V.
#   The scratch root is removed, also on failure. Nothing is installed on
#   this host.
#
# usage: scripts/check-rpm.sh [RPM [DEB]]   (default: the newest
#        target/rpm/hugeshm-*.rpm and target/debian/hugeshm_*.deb)
#
# Needs rpm and dpkg-deb; not root.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
rpm="${1:-$(ls -t "$target_dir"/rpm/hugeshm-*.rpm 2>/dev/null | head -n1 || true)}"
deb="${2:-$(ls -t "$target_dir"/debian/hugeshm_*.deb 2>/dev/null | head -n1 || true)}"
[ -f "$rpm" ] || { echo "check-rpm.sh: no RPM (scripts/build-rpm.sh makes it)" >&2; exit 1; }
[ -f "$deb" ] || { echo "check-rpm.sh: no .deb to compare with" >&2; exit 1; }
fail() { echo "check-rpm.sh: $*" >&2; exit 1; }

echo "== $rpm"
rpm -qip "$rpm" | grep -E '^(Name|Version|Release|Architecture|License|Size|Summary) '
work="$(mktemp -d /tmp/hugeshm-check-rpm.XXXXXX)"
trap 'rm -rf "$work"' EXIT

echo "== rpm -qlp against dpkg-deb -c"
rpm -qlp "$rpm" | sort >"$work/rpm-files"
# Files and links of the .deb and its own directories (named hugeshm and
# below: not those the system owns), as the RPM names them.
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ || $6 ~ /\/hugeshm\// {print $6}' | sed 's#^\.##; s#/$##' |
    sed -f "$root/contrib/rpm/deb-to-rpm.sed" | sort >"$work/deb-files"
if ! diff -u "$work/deb-files" "$work/rpm-files"; then
    fail "the RPM's files differ from the .deb's (- .deb, + RPM)"
fi
echo "$(wc -l <"$work/rpm-files") files and directories of its own, the same as the .deb's"
for f in /usr/bin/hugeshm /usr/lib64/libhugeshm.so /usr/include/hugeshm.h \
    /usr/lib64/pkgconfig/hugeshm.pc /usr/lib/hugeshm/libhugeshm-run.so \
    /usr/share/man/man1/hugeshm.1.gz /usr/share/man/man8/hugeshm.8.gz \
    /usr/share/bash-completion/completions/hugeshm /usr/share/zsh/site-functions/_hugeshm \
    /usr/share/fish/vendor_completions.d/hugeshm.fish \
    /usr/lib/systemd/system/hugeshm-apply.service /usr/lib/systemd/system/hugeshm-exporter.service \
    /usr/share/hugeshm/prometheus/hugeshm.rules.yml /usr/share/hugeshm/grafana/hugeshm.json \
    /usr/share/doc/hugeshm/docs/fleet.md; do
    grep -qxF "$f" "$work/rpm-files" || fail "$f is not in the RPM"
done

echo "== rpm --root $work/root -i --nodeps --noscripts"
mkdir "$work/root"
rpm --root "$work/root" --dbpath /var/lib/rpm --initdb
rpm --root "$work/root" --dbpath /var/lib/rpm -i --nodeps --noscripts "$rpm"
rpm --root "$work/root" --dbpath /var/lib/rpm -q hugeshm
rpm --root "$work/root" --dbpath /var/lib/rpm -V --nodeps hugeshm || fail "rpm -V: files differ from the package"
installed="$(cd "$work/root" && find . -type f -not -path './var/lib/rpm/*' | sed 's#^\.##' | sort)"
diff -u <(grep -vxFf <(cd "$work/root" && find . -type d | sed 's#^\.##') "$work/rpm-files") <(echo "$installed") ||
    fail "the scratch root holds other files than rpm -qlp lists"
"$work/root/usr/bin/hugeshm" --version
env="$("$work/root/usr/bin/hugeshm" run --target sh --print-env)"
grep -qxF "LD_PRELOAD=$work/root/usr/lib/hugeshm/libhugeshm-run.so" <<<"$env" ||
    fail "hugeshm run does not find its library beside it: $env"
grep -qx 'libdir=${exec_prefix}/lib64' "$work/root/usr/lib64/pkgconfig/hugeshm.pc" ||
    fail "hugeshm.pc: $(grep libdir= "$work/root/usr/lib64/pkgconfig/hugeshm.pc")"
echo "RPM checked: $(wc -l <"$work/rpm-files") paths installed into a scratch root, hugeshm runs from there"
