#!/usr/bin/env bash
# Installs the hugeshm Debian package on this machine and checks it from the
# installed paths, then purges it again (also on failure):
#
#   /usr/bin/hugeshm status (and --json), hugeshm run finding
#   /usr/lib/hugeshm/libhugeshm-run.so and loading it into a real program
#   (and not into the program's children), the man pages (man -w), the bash
#   completion in a real bash, a C program built against the installed
#   header and library with pkg-config and run, systemd-analyze verify on
#   the installed units, promtool test rules on the installed rules.
#
# usage: scripts/check-deb.sh [DEB]   (default: target/debian/hugeshm_*.deb)
#
# Needs root and dpkg; refuses to run where a hugeshm package is already
# installed (it would remove it afterwards).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deb="${1:-}"
if [ -z "$deb" ]; then
    deb="$(ls -t "${CARGO_TARGET_DIR:-$root/target}"/debian/hugeshm_*.deb | head -n1)"
fi
[ -f "$deb" ] || { echo "check-deb.sh: no package $deb" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "check-deb.sh: needs root (dpkg -i)" >&2; exit 1; }
if dpkg-query -W -f='${Status}' hugeshm 2>/dev/null | grep -q installed; then
    echo "check-deb.sh: a hugeshm package is installed already; not touching it" >&2
    exit 1
fi

echo "== $deb"
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
contents="$(dpkg-deb --contents "$deb" | awk '{print $6}')"
for f in ./usr/bin/hugeshm ./usr/lib/libhugeshm.so ./usr/include/hugeshm.h \
    ./usr/lib/pkgconfig/hugeshm.pc ./usr/lib/hugeshm/libhugeshm-run.so ./usr/share/man/man1/hugeshm.1.gz \
    ./usr/share/man/man1/hugeshm-exporter.1.gz ./usr/share/bash-completion/completions/hugeshm \
    ./usr/share/zsh/vendor-completions/_hugeshm ./usr/share/fish/vendor_completions.d/hugeshm.fish \
    ./lib/systemd/system/hugeshm-apply.service ./lib/systemd/system/hugeshm-exporter.service \
    ./usr/share/hugeshm/prometheus/hugeshm.rules.yml ./usr/share/hugeshm/grafana/hugeshm.json \
    ./usr/share/doc/hugeshm/examples/plan.toml \
    ./usr/share/doc/hugeshm/docs/fleet.md; do
    grep -qxF "$f" <<<"$contents" || { echo "check-deb.sh: $f is not in the package" >&2; exit 1; }
done

work="$(mktemp -d /tmp/hugeshm-check-deb.XXXXXX)"
cleanup() {
    dpkg --purge hugeshm >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

echo "== dpkg -i"
dpkg -i "$deb"
# Run from the installed path, not the build tree.
cd "$work"
echo "== /usr/bin/hugeshm status"
/usr/bin/hugeshm --version
/usr/bin/hugeshm status --color never | head -n 12
/usr/bin/hugeshm status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["schema"] == 1 and "pools" in d, d.keys()'

echo "== the boot plan, as docs/fleet.md sets it up"
# The package ships the example, not /etc/hugeshm: the docs' install -D
# makes the directory. Only where the host has no plan of its own.
if [ ! -e /etc/hugeshm ]; then
    install -D -m 0644 /usr/share/doc/hugeshm/examples/plan.toml /etc/hugeshm/plan.toml
    /usr/bin/hugeshm apply --spec /etc/hugeshm/plan.toml --dry-run --color never | tail -n 3
    rm -r /etc/hugeshm
else
    echo "/etc/hugeshm exists on this host: left alone"
fi

echo "== hugeshm run: /usr/lib/hugeshm/libhugeshm-run.so"
env="$(/usr/bin/hugeshm run --target sh --prefault --print-env)"
grep -qxF "LD_PRELOAD=/usr/lib/hugeshm/libhugeshm-run.so" <<<"$env" || { echo "check-deb.sh: run --print-env: $env" >&2; exit 1; }
# The target (dash, as sh) has the library mapped; the cat it runs has not.
maps="$(/usr/bin/hugeshm run -- /bin/sh -c 'grep -c libhugeshm-run /proc/$$/maps; cat /proc/self/maps' )"
[ "$(head -n1 <<<"$maps")" -ge 1 ] || { echo "check-deb.sh: the library is not in the target: $maps" >&2; exit 1; }
if tail -n +2 <<<"$maps" | grep -q libhugeshm-run; then
    echo "check-deb.sh: the target's child loaded the library" >&2; exit 1
fi
echo "hugeshm run loads /usr/lib/hugeshm/libhugeshm-run.so into the target only"

echo "== man pages"
for page in hugeshm hugeshm-status hugeshm-apply hugeshm-exporter hugeshm-bench-prefault; do
    man -w "$page" >/dev/null || { echo "check-deb.sh: man $page not found" >&2; exit 1; }
done
man -w hugeshm-exporter

echo "== bash completion"
got="$(bash -c 'source /usr/share/bash-completion/completions/hugeshm
COMP_WORDS=(hugeshm exp); COMP_CWORD=1; COMP_LINE="hugeshm exp"; COMP_POINT=${#COMP_LINE}
_hugeshm hugeshm exp hugeshm; printf "%s\n" "${COMPREPLY[@]}"')"
[ "$got" = exporter ] || { echo "check-deb.sh: bash completes 'hugeshm exp' to '$got'" >&2; exit 1; }
echo "hugeshm exp<TAB> -> $got"

echo "== C library: pkg-config, header, libhugeshm.so"
cat >"$work/t.c" <<'C'
#include <hugeshm.h>
#include <stdio.h>
int main(void) {
    hugeshm_options *o = hugeshm_options_new();
    if (!o) return 1;
    hugeshm_options_free(o);
    printf("libhugeshm %s\n", hugeshm_version());
    return 0;
}
C
pkg-config --modversion hugeshm
# shellcheck disable=SC2046
cc -o "$work/t" "$work/t.c" $(pkg-config --cflags --libs hugeshm)
"$work/t"
ldd "$work/t" | grep libhugeshm

if command -v systemd-analyze >/dev/null 2>&1; then
    echo "== systemd-analyze verify"
    systemd-analyze verify /lib/systemd/system/hugeshm-apply.service /lib/systemd/system/hugeshm-exporter.service
    echo "units verified"
fi
if command -v promtool >/dev/null 2>&1; then
    echo "== promtool test rules"
    (cd /usr/share/hugeshm/prometheus && promtool test rules hugeshm.rules.test.yml)
fi

echo "== dpkg --purge"
dpkg --purge hugeshm
[ ! -e /usr/bin/hugeshm ] || { echo "check-deb.sh: /usr/bin/hugeshm left after purge" >&2; exit 1; }
echo "package checked and removed"
