#!/usr/bin/env bash
# Make sure what a make target needs is installed:
#   scripts/deps.sh build   Rust (new enough), a C toolchain for linking, libclang (bindgen):
#                           all `make build` / `make release` need, nothing for the tests
#   scripts/deps.sh dist    build + Python with venv (zig comes from PyPI) + objdump (make dist)
#   scripts/deps.sh test    build + redis-server, redis-cli (cluster tests), faketime (fault
#                           suite), a TrueType font (benchmark charts), Python with pip and venv
#                           (the Python client's tests and the matrix servers' wheels), Node.js
#                           20+ with npm (the TypeScript client's), PostgreSQL, MariaDB and the
#                           sqlite3 shell (the fenced-write tests, scripts/testdb.sh), Prometheus
#                           and its redis_exporter (the metrics suite); the default
#   scripts/deps.sh qemu    qemu-user, to run Debian's arm64 redis-server (make test-aarch64)
#   scripts/deps.sh bench   etcd (Debian's etcd-server), for the election benchmark's peer
#                           (make bench-election)
#   scripts/deps.sh --list MODE...   print "group package" for each check the MODEs make (tested
#                           by scripts/test-deps.sh), check nothing
# Several modes may be named: `scripts/deps.sh test qemu`.
# Installs with apt when run as root on Debian/Ubuntu; otherwise prints the exact command.
set -euo pipefail

list=no
if [ "${1:-}" = --list ]; then
    list=yes
    shift
fi
[ $# -gt 0 ] || set -- test
groups=build
for mode in "$@"; do
    case $mode in
        build) ;;
        dist | test | qemu | bench) groups="$groups $mode" ;;
        *) echo "usage: $0 [--list] build|dist|test|qemu|bench..." >&2; exit 2 ;;
    esac
done

missing_pkgs=()
here=$(cd "$(dirname "$0")" && pwd)
# need GROUP PACKAGE CHECK...: PACKAGE is missing when the command CHECK fails.
need() {
    local group=$1 pkg=$2
    shift 2
    case " $groups " in *" $group "*) ;; *) return 0 ;; esac
    if [ $list = yes ]; then
        echo "$group $pkg"
    elif ! "$@" >/dev/null 2>&1; then
        missing_pkgs+=("$pkg")
    fi
}
has() { command -v "$1"; }

# Rust new enough for Cargo.toml's rust-version (Debian's own cargo package is older); the
# check prints the rustup commands when it is not (scripts/test-check-rust.sh tests it).
if [ $list = yes ]; then
    echo "build rustup"
else
    "$here/check-rust.sh" || exit 1
fi
# Rust links through the system C compiler (cc), which a minimal Debian does not have.
need build build-essential has cc
# bindgen needs libclang itself (libclang.so / libclang-N.so), not libclang-cpp, which LLVM ships
# too (scripts/test-find-libclang.sh tests the check).
need build libclang-dev "$here/find-libclang.sh"
# make dist: zig and cargo-zigbuild in a virtual environment; objdump reads the glibc floor.
need dist python3 has python3
need dist python3-venv python3 -c 'import ensurepip, venv'
need dist binutils has objdump
need qemu qemu-user-static has qemu-aarch64-static
# The election benchmark measures etcd's concurrency.Election on an etcd of its own (loopback;
# the package's own service, where systemd starts it, listens on 2379, which the bench never uses).
need bench etcd-server has etcd
need test redis-server has redis-server
need test redis-tools has redis-cli
# The fault suite moves the server's clock with libfaketime; the benchmark's charts need a font.
need test faketime test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
need test fonts-dejavu-core test -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
need test python3 has python3
need test python3-pip python3 -m pip --version
# The Python client's tests run in a virtual environment (target/pyvenv).
need test python3-venv python3 -c 'import ensurepip, venv'
# The TypeScript client's tests (clients/node) need Node.js 20 or newer and npm: node-redis 6
# and ioredis 6 require Node 20; Debian 13's nodejs is 20, Debian 12's is 18, too old.
need test nodejs has node
need test npm has npm
# The fenced-write tests of every client start throwaway PostgreSQL and MariaDB servers
# (scripts/testdb.sh); the docs tests run the SQL snippets with psql, mariadb and sqlite3.
need test postgresql test -n "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null)"
need test postgresql-client has psql
need test mariadb-server-core test -x /usr/sbin/mariadbd
need test mariadb-server-core test -x /usr/bin/mariadb-install-db
need test mariadb-client-core has mariadb
need test sqlite3 has sqlite3
# The metrics suite (tests/prometheus.rs) starts Debian's Prometheus (with promtool) and
# redis_exporter on loopback ports of its own; where systemd starts the packages' services, they
# listen on 9090 and 9121, which the suite never uses.
need test prometheus has promtool
need test prometheus-redis-exporter has prometheus-redis-exporter
need test default-jdk-headless has javac
need test maven has mvn
if [ $list = no ] && [[ " $groups " == *" test "* ]] && command -v node >/dev/null 2>&1; then
    node_major=$(node -p 'process.versions.node.split(".")[0]')
    if [ "$node_major" -lt 20 ]; then
        echo "Node.js $(node --version) is too old for clients/node: install Node.js 20 or newer" >&2
        echo "  (Debian 13: apt-get install -y nodejs npm; elsewhere the nodejs.org or NodeSource packages)" >&2
        exit 1
    fi
fi

if [ $list = yes ] || [ ${#missing_pkgs[@]} -eq 0 ]; then
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
