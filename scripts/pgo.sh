#!/usr/bin/env bash
# Profile-guided optimisation (PGO) of `make release` (docs/performance.md, "The build's code
# layout"):
#   scripts/pgo.sh build    $CARGO_TARGET_DIR/release/libredis_lock.so, built with the committed
#                           profile pgo/lock.profdata.gz where it describes this build
#   scripts/pgo.sh flags    print the rustc flag that applies the profile, or nothing (and why,
#                           on stderr) where it does not describe this build
#   scripts/pgo.sh current  exit 1 if pgo/manifest names other Cargo.toml / Cargo.lock files
#                           than these (scripts/test-pgo.sh: a change to either retakes it)
#   scripts/pgo.sh describe print what this build's symbols depend on (the manifest's lines)
#   scripts/pgo.sh train    take the profile again: an instrumented build driven by
#                           scripts/pgo_train.py on $PGO_SERVER (default redis-server), merged by
#                           the toolchain's own llvm-profdata (rustup's llvm-tools) (make pgo)
# A profile names functions by their symbols, which carry a hash of the toolchain, the package
# and its dependencies: it describes only a build by the same rustc from the same Cargo.toml and
# Cargo.lock, for the host, with the release profile (pgo/manifest records them). Any other
# build goes without it, and says so. Only this crate gets the flag (cargo rustc), so the
# dependencies' builds stay shared with every other release build. The profile only moves code
# and inlining: the same source, the same behaviour. PGO=0 builds without it.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
work=$target_dir/pgo
# PGO_DIR: where the profile is kept (scripts/test-pgo.sh points it at scratch copies).
pgo_dir=${PGO_DIR:-pgo}
profile_gz=$pgo_dir/lock.profdata.gz
manifest=$pgo_dir/manifest
pid=

# What a build's symbols depend on, one line each (the manifest's format).
describe() {
    rustc -vV
    sha256sum Cargo.toml Cargo.lock
}

# The profile, unpacked under target/, if it describes this build; else why not, on stderr.
usable_profile() {
    if [ "${PGO:-1}" = 0 ]; then
        echo "pgo: PGO=0: building without the profile" >&2
        return 1
    fi
    if [ ! -f "$profile_gz" ] || [ ! -f "$manifest" ]; then
        echo "pgo: no profile in $pgo_dir/: building without one (make pgo takes one)" >&2
        return 1
    fi
    local differs
    differs=$(diff <(describe) "$manifest" | sed -n 's/^> //p' | head -n 3 | tr '\n' ';')
    if [ -n "$differs" ]; then
        echo "pgo: the profile was taken with another toolchain or Cargo.toml/Cargo.lock" \
            "($manifest: $differs): building without it (make pgo takes one for this build)" >&2
        return 1
    fi
    # Named by its checksum: a new profile is a new flag, so cargo rebuilds with it.
    local unpacked tmp
    unpacked=$work/lock-$(sha256sum "$profile_gz" | cut -c1-16).profdata
    if [ ! -f "$unpacked" ]; then
        mkdir -p "$work"
        tmp=$(mktemp "$work/unpack.XXXXXX")
        if ! gzip -dc "$profile_gz" >"$tmp"; then
            rm -f "$tmp"
            echo "pgo: cannot unpack $profile_gz: building without it" >&2
            return 1
        fi
        mv "$tmp" "$unpacked"
    fi
    echo "-Cprofile-use=$unpacked"
}

build() {
    local flag
    if ! flag=$(usable_profile); then
        cargo build --release --lib -p redis-lock
        return
    fi
    echo "pgo: building with $profile_gz" >&2
    local log=$work/build.log
    cargo rustc --release --lib -p redis-lock -- "$flag" 2>&1 | tee "$log"
    local stale
    stale=$(grep -c "hash mismatch" "$log" || true)
    if [ "$stale" -gt 0 ]; then
        echo "pgo: $stale functions changed since the profile was taken (their code is laid" \
            "out as without it); make pgo takes a new one" >&2
    fi
}

current() {
    if ! diff <(sha256sum Cargo.toml Cargo.lock) <(grep -E ' Cargo\.(toml|lock)$' "$manifest"); then
        echo "pgo: $manifest was taken with other Cargo.toml/Cargo.lock files: run make pgo" \
            "and commit pgo/" >&2
        return 1
    fi
}

llvm_profdata() {
    local tool
    tool=$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata
    if [ ! -x "$tool" ]; then
        echo "pgo: no $tool: install rustup's llvm-tools (rustup component add llvm-tools)" >&2
        return 1
    fi
    echo "$tool"
}

# The instrumented server, by PID: given 10 s to exit after its SHUTDOWN, then stopped.
stop_server() {
    [ -n "$pid" ] || return 0
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=
}

train() {
    local server=${PGO_SERVER:-redis-server} profdata gen raw port
    command -v "$server" >/dev/null || { echo "pgo: no $server (make deps installs it)" >&2; exit 1; }
    command -v python3 >/dev/null || { echo "pgo: no python3 (make deps installs it)" >&2; exit 1; }
    profdata=$(llvm_profdata)
    gen=$work/gen
    raw=$work/raw
    rm -rf "$raw"
    mkdir -p "$raw"
    cargo rustc --release --lib -p redis-lock --target-dir "$gen" -- -Cprofile-generate="$raw"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # LLVM_PROFILE_FILE would send the counts elsewhere than -Cprofile-generate's directory.
    env -u LLVM_PROFILE_FILE "$server" --port "$port" --bind 127.0.0.1 --save "" \
        --appendonly no --dir "$work" --loadmodule "$gen/release/libredis_lock.so" \
        --logfile "$work/server.log" &
    pid=$!
    trap 'kill "$pid" 2>/dev/null || true' EXIT
    # The training ends with SHUTDOWN NOSAVE: the counts are written as the server exits.
    python3 scripts/pgo_train.py "$port" "$pid"
    stop_server
    trap - EXIT
    ls "$raw"/*.profraw >/dev/null 2>&1 || { echo "pgo: the server wrote no profile ($work/server.log)" >&2; exit 1; }
    "$profdata" merge -o "$work/lock.profdata" "$raw"/*.profraw
    mkdir -p "$pgo_dir"
    gzip -9nc "$work/lock.profdata" >"$profile_gz.tmp"
    mv "$profile_gz.tmp" "$profile_gz"
    describe >"$manifest"
    echo "pgo: $profile_gz taken on $("$server" --version | awk '{print $1, $2, $3}'), $(rustc -V)"
}

case ${1:-} in
    build) build ;;
    flags) usable_profile || true ;;
    current) current ;;
    describe) describe ;;
    train) train ;;
    *) echo "usage: $0 build|flags|current|describe|train" >&2; exit 2 ;;
esac
