#!/usr/bin/env bash
# Builds the Debian package of hugeshm: target/debian/hugeshm_VERSION-1_ARCH.deb
#
# usage: scripts/build-deb.sh
#
# Needs cargo-deb (cargo install cargo-deb --locked --version 3.8.0; .ci/run
# installs it). What the package holds is [package.metadata.deb] in
# crates/hugeshm-cli/Cargo.toml; this script makes the files cargo-deb does
# not build itself: the C library with its header and pkg-config file
# (scripts/install-capi.sh, staged), the interposition library of `hugeshm
# run` (libhugeshm-run.so, from the hugeshm-run-preload crate; installed in
# /usr/lib/hugeshm/, where /usr/bin/hugeshm finds it as ../lib/hugeshm/), and
# the man pages and completions (`hugeshm generate`, from the clap
# definitions).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
out="$target_dir/dist"
assets="$out/deb-assets"

# The dist profile: the release build without debug info (Cargo.toml).
echo "== cargo build --profile dist -p hugeshm -p hugeshm-capi -p hugeshm-run-preload"
cargo build --profile dist --locked -p hugeshm -p hugeshm-capi -p hugeshm-run-preload
# The fault-injection hook (hugeshm-region's `test-hooks` feature: with
# HUGESHM_TEST_STOP_AT set, `create` sleeps at a step) is for the tests
# only; a shipped file that knows the variable was built with it.
for f in "$out/hugeshm" "$out/libhugeshm.so" "$out/libhugeshm.a" "$out/libhugeshm_run.so"; do
    if grep -qF HUGESHM_TEST_STOP_AT "$f"; then
        echo "build-deb.sh: $f has the test hook (HUGESHM_TEST_STOP_AT): built with hugeshm-region's test-hooks feature" >&2
        exit 1
    fi
done
rm -rf "$assets"
DESTDIR="$assets/capi" scripts/install-capi.sh --from "$out" /usr >/dev/null
install -D -m 0644 "$out/libhugeshm_run.so" "$assets/run/libhugeshm-run.so"
"$out/hugeshm" generate man --out "$assets/man" >/dev/null
# Debian policy: man pages gzipped (cargo-deb leaves files under target/ as
# they are); -n: no name or time stamp, the same bytes every build.
gzip -9n "$assets"/man/*.1
"$out/hugeshm" generate completions --out "$assets/completions" >/dev/null
echo "== cargo deb -p hugeshm --profile dist --no-build --strip"
cargo deb -p hugeshm --profile dist --no-build --locked --strip
