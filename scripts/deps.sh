#!/usr/bin/env bash
# Make sure what building and testing need is installed: Rust (new enough), a C toolchain for
# linking, libclang (bindgen), redis-server,
# redis-cli (cluster tests), faketime (fault suite), a TrueType font (benchmark charts), Python
# with pip and venv (the Python client's tests), Node.js 20+ with npm (the TypeScript client's).
# Installs with apt when run as root on Debian/Ubuntu; otherwise prints the exact command.
set -euo pipefail

missing_pkgs=()
here=$(cd "$(dirname "$0")" && pwd)
# Rust new enough for Cargo.toml's rust-version (Debian's own cargo package is older); the
# check prints the rustup commands when it is not (scripts/test-check-rust.sh tests it).
"$here/check-rust.sh" || exit 1
# Rust links through the system C compiler (cc), which a minimal Debian does not have.
command -v cc >/dev/null 2>&1 || missing_pkgs+=(build-essential)
# bindgen needs libclang itself (libclang.so / libclang-N.so), not libclang-cpp, which LLVM ships
# too (scripts/test-find-libclang.sh tests the check).
"$here/find-libclang.sh" >/dev/null || missing_pkgs+=(libclang-dev)
command -v redis-server >/dev/null 2>&1 || missing_pkgs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing_pkgs+=(redis-tools)
# The fault suite moves the server's clock with libfaketime; the benchmark's charts need a font.
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing_pkgs+=(faketime)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing_pkgs+=(fonts-dejavu-core)
command -v python3 >/dev/null 2>&1 || missing_pkgs+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing_pkgs+=(python3-pip)
# The Python client's tests run in a virtual environment (target/pyvenv).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing_pkgs+=(python3-venv)
# The TypeScript client's tests (clients/node) need Node.js 20 or newer and npm: node-redis 6
# and ioredis 6 require Node 20; Debian 13's nodejs is 20, Debian 12's is 18, too old.
command -v node >/dev/null 2>&1 || missing_pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || missing_pkgs+=(npm)
command -v javac >/dev/null 2>&1 || missing_pkgs+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing_pkgs+=(maven)
if command -v node >/dev/null 2>&1; then
    node_major=$(node -p 'process.versions.node.split(".")[0]')
    if [ "$node_major" -lt 20 ]; then
        echo "Node.js $(node --version) is too old for clients/node: install Node.js 20 or newer" >&2
        echo "  (Debian 13: apt-get install -y nodejs npm; elsewhere the nodejs.org or NodeSource packages)" >&2
        exit 1
    fi
fi

if [ ${#missing_pkgs[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${missing_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}"
    # The Debian package may start a service on 6379; our tests never use that port.
else
    echo "missing packages: ${missing_pkgs[*]}" >&2
    echo "install them with:  sudo apt-get install -y ${missing_pkgs[*]}" >&2
    exit 1
fi
