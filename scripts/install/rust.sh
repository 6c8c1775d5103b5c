#!/usr/bin/env bash
# The Rust client's README followed as a new user would: a fresh Cargo project outside the
# repository whose Cargo.toml gets the README's install block (its path dependency
# `redis-lock/clients/rust` rewritten to this checkout's "$repo/clients/rust", the only
# change), the README's example as src/main.rs, built and run against a real server, its
# output checked. Needs the crates.io index (or a warm ~/.cargo). Cargo builds into the
# project's own target directory unless CARGO_TARGET_DIR is set: 75 s on 2 loaded cores into
# its own, 4 s into a warm shared one (the first time there: 55 s).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

readme="$repo/clients/rust/README.md"
started=$SECONDS
fresh_project
install=$(readme_block "$readme" install)
grep -q '"redis-lock/clients/rust"' <<<"$install" || fail "the install block names no redis-lock/clients/rust"
mkdir -p "$project/src"
cat >"$project/Cargo.toml" <<TOML
[package]
name = "install-test"
version = "0.1.0"
edition = "2021"

${install//\"redis-lock\/clients\/rust\"/\"$repo/clients/rust\"}
TOML

start_server
on_port "$(readme_block "$readme" example)" >"$project/src/main.rs"
(cd "$project" && cargo build --quiet) >"$project/build.log" 2>&1 \
    || { cat "$project/build.log" >&2; fail "the README's example did not build"; }
built=$((SECONDS - started))
output=$(cd "$project" && cargo run --quiet) || fail "the README's example failed"
echo "$output"
grep -q "^sold one, 99 left (token [0-9]\+)$" <<<"$output" || fail "unexpected output: $output"
grep -q "^released: true$" <<<"$output" || fail "unexpected output: $output"
pass "installed and ran the README's example in $((SECONDS - started)) s (built in $built s)"
