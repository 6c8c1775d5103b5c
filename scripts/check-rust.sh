#!/usr/bin/env bash
# Exit 0 if cargo and a rustc at least as new as Cargo.toml's rust-version are on the PATH;
# otherwise say exactly what to run and exit 1. Debian's own rustc/cargo packages are older than
# the code needs: rustup installs a current Rust for the user, no root needed.
# CARGO_TOML replaces the manifest read (scripts/test-check-rust.sh uses it with a fake rustc).
set -uo pipefail
manifest=${CARGO_TOML:-"$(cd "$(dirname "$0")" && pwd)/../Cargo.toml"}
need=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$manifest" | head -n 1)
rustup_hint() {
    echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal" >&2
    echo "  . \"\$HOME/.cargo/env\"    # then re-run make" >&2
}
if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
    echo "cargo is missing: install Rust ${need:-(stable)} or newer with rustup:" >&2
    rustup_hint
    exit 1
fi
have=$(rustc --version 2>/dev/null | awk '{print $2}')
if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "${have:-0}" | sort -V | head -n 1)" != "$need" ]; then
    echo "Rust ${have:-(unknown)} is older than the $need this code needs." >&2
    if command -v rustup >/dev/null 2>&1; then
        echo "  rustup update stable" >&2
    else
        echo "Debian's rustc/cargo packages are too old; install a current Rust with rustup:" >&2
        rustup_hint
    fi
    exit 1
fi
exit 0
