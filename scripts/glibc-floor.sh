#!/usr/bin/env bash
# Print the newest GLIBC symbol version a shared object needs, and fail if it is newer than the
# floor:  scripts/glibc-floor.sh <file.so> <floor, e.g. 2.17>
# objdump -T reads the dynamic symbols of an ELF of any architecture (elf64-little).
set -euo pipefail
so=$1 floor=$2
needs=$(objdump -T "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -1)
if [ -z "$needs" ]; then
    echo "$so: objdump -T shows no GLIBC symbol version" >&2
    exit 1
fi
echo "$(basename "$so"): needs GLIBC_$needs (floor $floor)"
if [ "$(printf '%s\n%s\n' "$needs" "$floor" | sort -V | tail -1)" != "$floor" ]; then
    echo "$so needs glibc $needs, newer than the floor $floor:" >&2
    objdump -T "$so" | grep -E "GLIBC_$needs\b" >&2
    exit 1
fi
