#!/usr/bin/env bash
# Profile-guided optimisation (PGO) of the module we build for use (docs/performance.md, "The
# build's code layout"):
#   scripts/pgo.sh build   $CARGO_TARGET_DIR/release/libredis_lock.so, built with the committed
#                          profile pgo/lock.profdata.gz (make release)
#   scripts/pgo.sh flags   print the rustc flag that applies the profile, or nothing where it
#                          cannot be used (scripts/dist.sh)
#   scripts/pgo.sh train   take that profile again: an instrumented build, scripts/pgo_train.py
#                          against $PGO_SERVER (default redis-server), merged by the toolchain's
#                          own llvm-profdata (rustup's llvm-tools) (make pgo)
# Only this crate gets the flag (cargo rustc), so the dependencies' builds stay shared with every
# other release build. The profile only moves code and inlining: the same source, the same
# behaviour. PGO=0 builds without it. The profile is read only by the LLVM it was taken with
# (pgo/llvm-version): with another, the build goes on without it and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work=$target_dir/pgo
# PGO_DIR: where the profile is kept (scripts/test-pgo.sh points it at a scratch copy).
profile_gz=${PGO_DIR:-pgo}/lock.profdata.gz
llvm_version_file=${PGO_DIR:-pgo}/llvm-version

llvm_version() { rustc -vV | sed -n 's/^LLVM version: //p'; }
major() { cut -d. -f1 <<<"$1"; }

# The profile, unpacked under target/, if this toolchain can read it; else a note on stderr.
usable_profile() {
    if [ "${PGO:-1}" = 0 ]; then
        echo "pgo: PGO=0: building without the profile" >&2
        return 1
    fi
    if [ ! -f "$profile_gz" ]; then
        echo "pgo: no $profile_gz: building without a profile (make pgo takes one)" >&2
        return 1
    fi
    local taken have
    taken=$(cat "$llvm_version_file" 2>/dev/null || echo unknown)
    have=$(llvm_version)
    if [ "$(major "$taken")" != "$(major "$have")" ]; then
        echo "pgo: the profile was taken with LLVM $taken, this rustc has LLVM $have:" \
            "building without it (make pgo takes one with this toolchain)" >&2
        return 1
    fi
    # Named by its checksum: a new profile is a new flag, so cargo rebuilds with it.
    local unpacked
    unpacked=$work/lock-$(sha256sum "$profile_gz" | cut -c1-16).profdata
    if [ ! -f "$unpacked" ]; then
        mkdir -p "$work"
        gzip -dc "$profile_gz" >"$unpacked.tmp"
        mv "$unpacked.tmp" "$unpacked"
    fi
    echo "-Cprofile-use=$unpacked"
}

build() {
    local flag log
    if ! flag=$(usable_profile); then
        cargo build --release --lib -p redis-lock
        return
    fi
    log=$work/build.log
    cargo rustc --release --lib -p redis-lock -- "$flag" 2>&1 | tee "$log"
    local stale
    stale=$(grep -c "hash mismatch" "$log" || true)
    if [ "$stale" -gt 0 ]; then
        echo "pgo: $stale functions changed since the profile was taken (their code is laid" \
            "out as without it); make pgo takes a new one" >&2
    fi
}

llvm_profdata() {
    local tool
    tool=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata
    if [ ! -x "$tool" ] && command -v rustup >/dev/null 2>&1; then
        rustup component add llvm-tools >&2
    fi
    if [ ! -x "$tool" ]; then
        echo "pgo: no $tool: install rustup's llvm-tools (rustup component add llvm-tools)" >&2
        return 1
    fi
    echo "$tool"
}

train() {
    local server=${PGO_SERVER:-redis-server} profdata gen raw port pid
    command -v "$server" >/dev/null || { echo "pgo: no $server (make deps installs it)" >&2; exit 1; }
    command -v python3 >/dev/null || { echo "pgo: no python3 (make deps installs it)" >&2; exit 1; }
    profdata=$(llvm_profdata)
    gen=$work/gen
    raw=$work/raw
    rm -rf "$raw"
    mkdir -p "$raw"
    cargo rustc --release --lib -p redis-lock --target-dir "$gen" -- -Cprofile-generate="$raw"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
        --loadmodule "$gen/release/libredis_lock.so" --logfile "$work/server.log" &
    pid=$!
    trap 'kill "$pid" 2>/dev/null || true' EXIT
    # The training sends SHUTDOWN NOSAVE at the end: the profile is written as the server exits.
    python3 scripts/pgo_train.py "$port" "$pid"
    wait "$pid" || true
    trap - EXIT
    ls "$raw"/*.profraw >/dev/null 2>&1 || { echo "pgo: the server wrote no profile ($work/server.log)" >&2; exit 1; }
    "$profdata" merge -o "$work/lock.profdata" "$raw"/*.profraw
    mkdir -p "$(dirname "$profile_gz")"
    gzip -9nc "$work/lock.profdata" >"$profile_gz"
    llvm_version >"$llvm_version_file"
    echo "pgo: $profile_gz taken on $("$server" --version | awk '{print $1, $2, $3}') (LLVM $(llvm_version))"
}

case ${1:-} in
    build) build ;;
    flags) usable_profile || true ;;
    train) train ;;
    *) echo "usage: $0 build|flags|train" >&2; exit 2 ;;
esac
