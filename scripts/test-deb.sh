#!/usr/bin/env bash
# Install the redis-lock .deb of `make deb` on this machine (dpkg -i, needs root), start a
# redis-server that includes the installed /etc/redis/modules/redis-lock.conf on a free loopback
# port, check that it loaded the installed module and serves LOCK.*, then purge the package.
#   scripts/test-deb.sh [<package.deb>]   (default: this machine's architecture from make deb)
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")
arch=$(dpkg --print-architecture)
deb=${1:-$(ls -t "$target_dir"/dist/redis-lock_*_"$arch".deb 2>/dev/null | head -1)}
module=/usr/lib/redis/modules/libredis_lock.so
snippet=/etc/redis/modules/redis-lock.conf
fail() { echo "test-deb: $*" >&2; exit 1; }
[ -n "$deb" ] && [ -f "$deb" ] || fail "no redis-lock .deb for $arch: run make deb first"
[ "$(id -u)" = 0 ] || fail "dpkg -i needs root"
command -v redis-server >/dev/null || fail "no redis-server (scripts/deps.sh test)"
if dpkg-query -W -f '${Status}' redis-lock 2>/dev/null | grep -q 'installed'; then
    fail "redis-lock is already installed here; not touching it (dpkg --purge redis-lock first)"
fi

tmp=$(mktemp -d "$target_dir/test-deb.XXXXXX")
pid=
cleanup() {
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    dpkg --purge redis-lock >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT

dpkg -i "$deb" >/dev/null
[ -f "$module" ] || fail "$module not installed"
grep -qx "loadmodule $module" "$snippet" || fail "$snippet does not load $module"
dpkg-query -W -f '${Conffiles}\n' redis-lock | grep -q "$snippet" || fail "$snippet is no conffile"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp" --save '' --appendonly no \
    --logfile "$tmp/server.log" --include "$snippet" &
pid=$!
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do
    [ "$(cli PING 2>/dev/null)" = PONG ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; fail "the server exited"; }
    sleep 0.1
done
[ "$(cli PING)" = PONG ] || fail "no PONG on port $port"
cli MODULE LIST | grep -qx "$module" || { cli MODULE LIST >&2; fail "the module loaded is not $module"; }
token=$(cli LOCK.ACQUIRE deb:check alice 10000)
[[ $token =~ ^[0-9]+$ ]] || fail "LOCK.ACQUIRE answered '$token', not a fencing token"
[ "$(cli LOCK.FENCE deb:check)" = "$token" ] || fail "LOCK.FENCE is not alice's token"
[ "$(cli LOCK.RELEASE deb:check alice)" = 1 ] || fail "LOCK.RELEASE did not release"
echo "$(basename "$deb"): installed, $(redis-server --version | awk '{print $3}') on port $port loaded $module, LOCK.ACQUIRE gave token $token"
cli SHUTDOWN NOSAVE >/dev/null 2>&1 || true
wait "$pid" 2>/dev/null || true
pid=
dpkg --purge redis-lock >/dev/null
[ ! -e "$module" ] && [ ! -e "$snippet" ] || fail "files left after dpkg --purge"
echo "purged: $module and $snippet removed"
