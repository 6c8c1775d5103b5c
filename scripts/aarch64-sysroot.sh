#!/usr/bin/env bash
# Unpack Debian's arm64 redis-server and the libraries it links into target/aarch64/sysroot, for
# qemu-aarch64-static -L (make test-aarch64). apt-get runs with a private state under
# target/aarch64/apt (arm64 package lists, no dpkg status), so the machine's own apt setup and
# architectures stay untouched; the .debs are only unpacked (dpkg-deb -x), never installed.
# Prints the sysroot's redis-server; does nothing when it is there already.
set -euo pipefail
root=$(realpath -m target/aarch64)
sysroot=$root/sysroot
server=$sysroot/usr/bin/redis-server
if [ -x "$sysroot/usr/bin/redis-check-rdb" ] && [ -L "$server" ]; then
    echo "$server"
    exit 0
fi
# redis-server is a symlink to redis-check-rdb (in redis-tools), which acts as the server when
# argv[0] names redis-server. Its libraries (readelf -d), then theirs: libsystemd0's,
# libgcrypt20's and libjemalloc2's. The module links only libc (scripts/glibc-floor.sh).
packages="redis-server redis-tools libc6 libatomic1 liblzf1 libjemalloc2 libssl3 libsystemd0
    libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1 libstdc++6 libgcc-s1"
apt=$root/apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$root/debs"
: > "$apt/status"
opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
    -o Dir::State::Lists="$apt/lists" -o Dir::State::status="$apt/status"
    -o Dir::Cache="$apt/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${opts[@]}" -qq update
# shellcheck disable=SC2086
(cd "$root/debs" && apt-get "${opts[@]}" -qq download $packages)
rm -rf "$sysroot"
mkdir -p "$sysroot"
for deb in "$root"/debs/*_arm64.deb; do
    dpkg-deb -x "$deb" "$sysroot"
done
[ -x "$sysroot/usr/bin/redis-check-rdb" ] || { echo "no arm64 redis-check-rdb unpacked" >&2; exit 1; }
echo "$server"
