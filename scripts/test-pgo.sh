#!/usr/bin/env bash
# scripts/pgo.sh's decision whether a release build uses the profile, on scratch copies of pgo/:
# a profile whose manifest describes this build is used; one taken with another rustc or
# another Cargo.lock, a missing one, or PGO=0 build without it and say so. Then the committed
# manifest must name this Cargo.toml and Cargo.lock (a change to either retakes the profile).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "pgo: $*" >&2; exit 1; }
gzip -t "$here/../pgo/lock.profdata.gz" || fail "the committed profile is not a gzip file"
"$here/pgo.sh" describe >"$tmp/this-build"
# case_flag NAME SED-EDIT-OF-THE-MANIFEST-OR-none [VAR=VALUE]: the flag pgo.sh printed; its
# note goes to $tmp/err.
case_flag() {
    local name=$1 edit=$2
    shift 2
    mkdir -p "$tmp/$name"
    if [ "$edit" != none ]; then
        cp "$here/../pgo/lock.profdata.gz" "$tmp/$name/"
        sed "$edit" "$tmp/this-build" >"$tmp/$name/manifest"
    fi
    env -u PGO PGO_DIR="$tmp/$name" CARGO_TARGET_DIR="$tmp/target-$name" "$@" \
        "$here/pgo.sh" flags 2>"$tmp/err"
}
flag=$(case_flag same "")
[[ $flag == -Cprofile-use=*/lock-*.profdata ]] || fail "this build's profile: no flag (got '$flag')"
[ -s "${flag#-Cprofile-use=}" ] || fail "the flag names an empty or missing file: $flag"
refused() { # NAME SED-EDIT-OR-none [VAR=VALUE]
    local name=$1
    flag=$(case_flag "$@")
    [ -z "$flag" ] || fail "$name: expected no flag, got '$flag'"
    grep -q "without" "$tmp/err" || fail "$name: no flag, and no note saying so"
}
refused rustc 's/^release: .*/release: 1.0.0/'
refused deps 's/^[0-9a-f]*  Cargo.lock$/0000  Cargo.lock/'
refused missing none
refused off "" PGO=0
"$here/pgo.sh" current || fail "the committed profile was taken with other Cargo files"
echo "pgo: 5 cases ok, the committed manifest is current"
