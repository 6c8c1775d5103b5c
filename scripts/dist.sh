#!/usr/bin/env bash
# Build the release module for Linux x86-64 and aarch64 against an old glibc, so the .so loads on
# old distributions too (Debian 12's own build needs its glibc 2.34+), and refuse a .so that
# needs a newer glibc than the floor:
#   scripts/dist.sh   -> $CARGO_TARGET_DIR/dist/libredis_lock-<version>-<arch>-linux-gnu.so
# Zig is the cross linker and libc (PyPI: ziglang, cargo-zigbuild, into target/distvenv); the
# Rust standard libraries of both targets come from rustup. DIST_ARCHS picks the architectures,
# GLIBC_FLOOR the glibc (2.17: CentOS 7's, and the first glibc with aarch64).
# DIST_CHECK_BUILD=1 makes the same build with debug assertions, which registers LOCK.DEBUG, into
# $CARGO_TARGET_DIR/dist-check/ (never shipped): `make test-dist` runs tests/panics.rs on it, so
# panic containment is tested with the unwinder zig links (the dist .so links no libgcc_s).
set -euo pipefail
cd "$(dirname "$0")/.."
here=scripts
floor=${GLIBC_FLOOR:-2.17}
archs=${DIST_ARCHS:-x86_64 aarch64}
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out=$target_dir/dist
cargo_dir=$target_dir
if [ "${DIST_CHECK_BUILD:-0}" = 1 ]; then
    out=$target_dir/dist-check
    cargo_dir=$target_dir/dist-check/cargo
    export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
fi
venv=target/distvenv
zig_pins=(ziglang==0.17.1 cargo-zigbuild==0.24.1)

# Zig and cargo-zigbuild, pinned, in a virtual environment of their own.
if ! "$venv/bin/pip" freeze 2>/dev/null | grep -qx "${zig_pins[1]}" ||
    ! "$venv/bin/pip" freeze 2>/dev/null | grep -qx "${zig_pins[0]}"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${zig_pins[@]}"
fi
export PATH=$PWD/$venv/bin:$PATH

# The Rust standard library of each target.
installed=$(rustup target list --installed 2>/dev/null || true)
for arch in $archs; do
    if ! grep -qx "$arch-unknown-linux-gnu" <<<"$installed"; then
        if command -v rustup >/dev/null; then
            rustup target add "$arch-unknown-linux-gnu"
        else
            echo "no Rust standard library for $arch-unknown-linux-gnu and no rustup to add it" >&2
            exit 1
        fi
    fi
done

# bindgen (redis-module's build script) parses redismodule.h with the system's libclang for the
# target: give it zig's headers of that target, in the order `zig cc` itself searches them.
# cargo-zigbuild passes them as `-Xclang -c-isystem` after `-nostdinc`, and with only those
# Debian 12's libclang 14 does not find the header's <sys/types.h>; plain -isystem, put first,
# does.
"$here/find-libclang.sh" >/dev/null || { echo "bindgen needs libclang (scripts/deps.sh)" >&2; exit 1; }
zig_includes() {
    python3 -m ziglang cc -target "$1" -E -v -x c /dev/null -o /dev/null 2>&1 |
        sed -n '/#include <...> search starts here:/,/End of search list/p' |
        sed -n 's/^ //p' | while read -r dir; do printf -- '-isystem %s ' "$(realpath "$dir")"; done
}
# ZIG_GLOBAL_CACHE_DIR keeps zig's compiled glibc stubs under target/ with the rest.
export ZIG_GLOBAL_CACHE_DIR=$target_dir/zig-cache

# No profile-guided layout here (scripts/pgo.sh): a profile names functions by symbols that
# carry a hash of the target and the build settings, and pgo/ describes the host's `make
# release`, not these cross builds; applied here it would match none of them.

mkdir -p "$out"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
for arch in $archs; do
    triple=$arch-unknown-linux-gnu
    includes=$(zig_includes "$arch-linux-gnu.$floor")
    [ -n "$includes" ] || { echo "zig cc printed no include paths for $arch" >&2; exit 1; }
    echo "== $triple, glibc $floor"
    # No debug info in the shipped file (debug = 1 in the release profile is for the benchmark's
    # profiles): 1.3 MB instead of 17 MB.
    env "BINDGEN_EXTRA_CLANG_ARGS_$triple=$includes" CARGO_PROFILE_RELEASE_STRIP=debuginfo \
        CARGO_TARGET_DIR="$cargo_dir" \
        cargo zigbuild --release --lib -p redis-lock --target "$triple.$floor"
    so=$out/libredis_lock-$version-$arch-linux-gnu.so
    cp "$cargo_dir/$triple/release/libredis_lock.so" "$so"
    "$here/glibc-floor.sh" "$so" "$floor"
done
cd "$out"
[ "${DIST_CHECK_BUILD:-0}" = 1 ] || sha256sum libredis_lock-"$version"-*.so > SHA256SUMS
ls -l libredis_lock-"$version"-*.so
