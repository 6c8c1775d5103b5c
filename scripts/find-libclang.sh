#!/usr/bin/env bash
# Print the libclang that bindgen would load (libclang.so* or libclang-N.so*), exit 1 if none.
# libclang-cpp.so* (which LLVM also ships) is not it: bindgen cannot use it.
# LIBCLANG_DIRS (space-separated) replaces the directories searched, and LDCONFIG_LIST a file
# standing in for `ldconfig -p`, so scripts/test-find-libclang.sh can test this on fake trees.
set -uo pipefail

is_libclang() {
    case "$(basename "$1")" in
        libclang-cpp*) return 1 ;;
        libclang.so*|libclang-[0-9]*.so*) return 0 ;;
        *) return 1 ;;
    esac
}

if [ -n "${LDCONFIG_LIST:-}" ]; then
    listing=$(cat "$LDCONFIG_LIST")
else
    listing=$(ldconfig -p 2>/dev/null || true)
fi
while read -r path; do
    if [ -n "$path" ] && is_libclang "$path"; then
        echo "$path"
        exit 0
    fi
done < <(printf '%s\n' "$listing" | awk '/=>/ {print $NF}')

dirs=${LIBCLANG_DIRS:-"/usr/lib/llvm-*/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib"}
for dir in $dirs; do
    for path in $dir/libclang*.so*; do
        if [ -e "$path" ] && is_libclang "$path"; then
            echo "$path"
            exit 0
        fi
    done
done
exit 1
