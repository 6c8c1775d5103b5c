# Shared by scripts/install/<client>.sh (make test-install-<client>): each follows its client's
# README into a fresh project outside the repository, as a new user would, and runs the
# README's example against a real server. Source it from bash with `set -euo pipefail`.
#   repo                 the repository's root
#   readme_block F NAME  the README code block after <!-- install-test: NAME --> (readme_block.py)
#   fresh_project        a new empty directory outside the repository, removed on exit; sets $project
#   start_server         redis-server (LOCK_TEST_SERVER, default redis-server) with the module
#                        (LOCK_MODULE, default the debug build) on a free loopback port; sets $port,
#                        stopped by PID on exit
#   on_port TEXT         TEXT with the README's 6379 replaced by $port
#   pass MESSAGE         prints "install-test <client>: MESSAGE"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
client=$(basename "$0" .sh)
_cleanup=()
trap 'for c in "${_cleanup[@]}"; do eval "$c"; done' EXIT

fail() { echo "install-test $client: $*" >&2; exit 1; }
pass() { echo "install-test $client: $*"; }
readme_block() { "$repo/scripts/install/readme_block.py" "$1" "$2"; }
on_port() { printf '%s' "$1" | sed "s/6379/$port/g"; }

fresh_project() {
    project=$(mktemp -d "${TMPDIR:-/tmp}/redis-lock-install-$client.XXXXXX")
    _cleanup+=("rm -rf '$project'")
}

start_server() {
    local server=${LOCK_TEST_SERVER:-redis-server}
    local module=${LOCK_MODULE:-$repo/target/debug/libredis_lock.so}
    [ -f "$module" ] || fail "no module at $module (make build)"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/redis-lock-install-server.XXXXXX")
    "$server" --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
        --logfile "$dir/server.log" --loadmodule "$module" &
    local pid=$!
    _cleanup+=("kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf '$dir'")
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$dir/server.log" >&2; fail "the server exited"; }
        sleep 0.1
    done
    fail "no PONG on port $port"
}
