#!/usr/bin/env bash
# The Rust check of scripts/deps.sh against fake toolchains: none, Debian 12's 1.63, the minimum,
# a newer one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '[package]\nrust-version = "1.85"\n' > "$tmp/Cargo.toml"
check() { # expected(ok|refused) rustc-version-or-none description
    local want=$1 version=$2 what=$3 bin="$tmp/bin-$2"
    mkdir -p "$bin"
    if [ "$version" != none ]; then
        printf '#!/bin/sh\necho "rustc %s (fake)"\n' "$version" > "$bin/rustc"
        printf '#!/bin/sh\nexit 0\n' > "$bin/cargo"
        chmod +x "$bin/rustc" "$bin/cargo"
    fi
    # Only the fake toolchain and the basic tools: no real cargo, rustc or rustup.
    mkdir -p "$tmp/tools"
    for tool in sed head sort printf awk; do
        ln -sf "$(command -v "$tool")" "$tmp/tools/$tool"
    done
    if PATH="$bin:$tmp/tools" CARGO_TOML="$tmp/Cargo.toml" "$BASH" "$here/check-rust.sh" 2>"$tmp/err"; then got=ok; else got=refused; fi
    if [ "$got" != "$want" ]; then
        echo "check-rust: $what: expected $want, got $got" >&2
        cat "$tmp/err" >&2
        exit 1
    fi
    if [ "$got" = refused ] && ! grep -q "sh.rustup.rs" "$tmp/err"; then
        echo "check-rust: $what: refused without saying how to install Rust" >&2
        exit 1
    fi
}
check refused none "no Rust at all"
check refused 1.63.0 "Debian 12's rustc"
check ok 1.85.0 "the minimum"
check ok 1.95.0 "a newer Rust"
echo "check-rust: 4 cases ok"
