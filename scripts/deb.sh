#!/usr/bin/env bash
# Package the modules `make dist` built as Debian packages (cargo-deb, from crates.io, pinned, into
# target/tools): $CARGO_TARGET_DIR/dist/redis-lock_<version>-1_{amd64,arm64}.deb, each with
#   /usr/lib/redis/modules/libredis_lock.so   the dist module (glibc floor GLIBC_FLOOR, 2.17)
#   /etc/redis/modules/redis-lock.conf        `loadmodule` of it, a conffile, to be included
# and checks that the packaged module is make dist's file, and its glibc floor again.
# DIST_ARCHS picks the architectures.
set -euo pipefail
cd "$(dirname "$0")/.."
floor=${GLIBC_FLOOR:-2.17}
archs=${DIST_ARCHS:-x86_64 aarch64}
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out=$target_dir/dist
cargo_deb=target/tools/bin/cargo-deb
cargo_deb_version=3.8.0
if ! "$cargo_deb" --version 2>/dev/null | grep -qx "cargo-deb $cargo_deb_version"; then
    cargo install --locked --root target/tools --version "$cargo_deb_version" cargo-deb
fi
for arch in $archs; do
    triple=$arch-unknown-linux-gnu
    [ -f "$target_dir/$triple/release/libredis_lock.so" ] || {
        echo "no $triple build: run make dist first" >&2
        exit 1
    }
    # --no-build: the .so is the zig build of scripts/dist.sh (cargo-deb would build against
    # this machine's glibc); --no-strip: it has no debug info to strip.
    deb=$("$cargo_deb" -p redis-lock --no-build --no-strip --target "$triple" --output "$out" |
        tail -1)
    echo "$deb: $(du -k "$deb" | cut -f1) KiB"
    dpkg-deb --field "$deb" Package Version Architecture Depends
    dpkg-deb --contents "$deb" | awk '{print "  " $NF}' | grep -v '/$'
    unpacked=$(mktemp -d)
    dpkg-deb -x "$deb" "$unpacked"
    scripts/glibc-floor.sh "$unpacked/usr/lib/redis/modules/libredis_lock.so" "$floor"
    version=$(dpkg-deb --field "$deb" Version)
    cmp -s "$unpacked/usr/lib/redis/modules/libredis_lock.so" \
        "$out/libredis_lock-${version%-*}-$arch-linux-gnu.so" ||
        { echo "$deb does not carry make dist's $arch module" >&2; exit 1; }
    rm -rf "$unpacked"
done
