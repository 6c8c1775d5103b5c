#!/usr/bin/env bash
# Build the module as it was at an earlier revision, for the upgrade tests:
#   scripts/build-previous.sh <revision> <output .so>
# The revision's sources come from this clone's history (`git archive`) and are built in
# target/previous/ (kept, so a second run only copies). Exits 3, saying why, when the clone
# does not have the revision (a shallow clone: fetch it with `git fetch --unshallow`).
set -euo pipefail
rev=$1 out=$2
if [ -f "$out" ] && [ "$(cat "$out.rev" 2>/dev/null)" = "$rev" ]; then
    exit 0
fi
if ! git cat-file -e "$rev^{commit}" 2>/dev/null; then
    echo "build-previous: revision $rev is not in this clone; run 'git fetch --unshallow'" >&2
    exit 3
fi
src=target/previous/src-$rev
if [ ! -f "$src/Cargo.toml" ]; then
    rm -rf "$src" && mkdir -p "$src"
    git archive "$rev" | tar -x -C "$src"
fi
(cd "$src" && CARGO_TARGET_DIR="$PWD/../target" cargo build --release --lib --quiet -p redis-lock)
mkdir -p "$(dirname "$out")"
cp "target/previous/target/release/libredis_lock.so" "$out"
echo "$rev" > "$out.rev"
echo "built the module of $rev: $out"
