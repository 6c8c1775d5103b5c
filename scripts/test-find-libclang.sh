#!/usr/bin/env bash
# The libclang check of scripts/deps.sh, on fake library trees: only libclang-cpp must count as
# missing (the trap a fresh Debian with LLVM's runtime fell into), libclang.so or libclang-N.so
# as present, from a directory or from the ldconfig cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
empty="$tmp/empty-ldconfig"
: > "$empty"
check() { # expected(found|missing) description dirs [ldconfig-file]
    local want=$1 what=$2 dirs=$3 ldc=${4:-$empty}
    if LIBCLANG_DIRS="$dirs" LDCONFIG_LIST="$ldc" "$here/find-libclang.sh" >/dev/null; then got=found; else got=missing; fi
    if [ "$got" != "$want" ]; then
        echo "find-libclang: $what: expected $want, got $got" >&2
        exit 1
    fi
}
mkdir -p "$tmp/cpp-only" "$tmp/versioned" "$tmp/plain" "$tmp/nothing"
touch "$tmp/cpp-only/libclang-cpp.so.14"
touch "$tmp/versioned/libclang-cpp.so.14" "$tmp/versioned/libclang-14.so.1"
touch "$tmp/plain/libclang.so.1"
check missing "only libclang-cpp" "$tmp/cpp-only"
check missing "no library" "$tmp/nothing"
check found "libclang-14.so.1" "$tmp/versioned"
check found "libclang.so.1" "$tmp/plain"
printf '\tlibclang-cpp.so.14 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libclang-cpp.so.14\n' > "$tmp/ldc-cpp"
printf '\tlibclang-14.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libclang-14.so.1\n' > "$tmp/ldc-real"
check missing "ldconfig lists only libclang-cpp" "$tmp/nothing" "$tmp/ldc-cpp"
check found "ldconfig lists libclang-14" "$tmp/nothing" "$tmp/ldc-real"
echo "find-libclang: 6 cases ok"
