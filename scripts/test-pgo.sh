#!/usr/bin/env bash
# scripts/pgo.sh's decision whether a release build uses the profile, on scratch copies of pgo/:
# the profile of this toolchain's LLVM is used; another LLVM's, a missing one or PGO=0 build
# without it and say so. And the committed profile unpacks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "pgo: $*" >&2; exit 1; }
gzip -t "$here/../pgo/lock.profdata.gz" || fail "the committed profile is not a gzip file"
llvm=$(rustc -vV | sed -n 's/^LLVM version: //p')
# case NAME LLVM-VERSION-OR-none [VAR=VALUE...]: prints the flag pgo.sh gave, its note in $tmp/err.
case_flag() {
    local name=$1 version=$2
    shift 2
    mkdir -p "$tmp/$name"
    if [ "$version" != none ]; then
        cp "$here/../pgo/lock.profdata.gz" "$tmp/$name/"
        echo "$version" >"$tmp/$name/llvm-version"
    fi
    env PGO_DIR="$tmp/$name" CARGO_TARGET_DIR="$tmp/target-$name" "$@" \
        "$here/pgo.sh" flags 2>"$tmp/err"
}
flag=$(case_flag same "$llvm")
[[ $flag == -Cprofile-use=*/lock-*.profdata ]] || fail "this LLVM's profile: no flag (got '$flag')"
[ -s "${flag#-Cprofile-use=}" ] || fail "the flag names an empty or missing file: $flag"
for refused in "other 1.0.0" "missing none" "off $llvm PGO=0"; do
    read -r name version setting <<<"$refused"
    flag=$(case_flag "$name" "$version" ${setting:+"$setting"})
    [ -z "$flag" ] || fail "$name: expected no flag, got '$flag'"
    grep -q "without" "$tmp/err" || fail "$name: no flag, and no note saying so"
done
echo "pgo: 4 cases ok"
