#!/usr/bin/env bash
# A throwaway database server for the fenced-write tests of every client, started the same way
# for all five languages (one implementation of "start a database"):
#
#   scripts/testdb.sh start postgres|mariadb DIR [OWNER_PID]
#       Creates DIR (must not exist or be empty), initialises a data directory in it, starts the
#       server on a free 127.0.0.1 port and returns once it accepts connections. Prints, one per
#       line: PID=<server pid> PORT=<port> USER=<user> DATABASE=<db> URL=<url>.
#       With OWNER_PID, a watcher stops the server (by its PID) once that process is gone, so a
#       test runner killed mid-run leaves no server behind.
#   scripts/testdb.sh stop DIR
#       Stops the server started in DIR (by the PID in DIR/server.pid), waits for it, removes DIR.
#
# Users: PostgreSQL user "postgres" (trust), database "postgres"; MariaDB user "lock" (no
# password), database "test". The servers refuse to run as root, so as root they run as the
# "postgres" system user when it exists, else "nobody". Logs: DIR/server.log.
set -euo pipefail

die() { echo "testdb: $*" >&2; exit 1; }

pg_bin() {
    local d
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/postgres" ] && { echo "$d"; return; }
    done
    command -v postgres >/dev/null 2>&1 && { dirname "$(command -v postgres)"; return; }
    die "PostgreSQL is not installed: apt-get install -y postgresql"
}

run_as_user() {
    if [ "$(id -u)" != 0 ]; then echo ""; return; fi
    if getent passwd postgres >/dev/null; then echo postgres; else echo nobody; fi
}

# exec_as: the prefix that runs a command as the server's user (empty when not root). setpriv
# execs (runuser would fork), so the PID a caller gets is the server's own.
exec_as=()
set_user() {
    local user=$1
    [ -n "$user" ] && exec_as=(setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups --)
    return 0
}

free_port() {
    local port
    while :; do
        port=$((20000 + RANDOM % 30000))
        # A port nobody listens on; the server's own bind is the final word (start retries).
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
}

# wait_for DIR PID WHAT CHECK...: until CHECK succeeds; fails when PID exits or after 60 s.
wait_for() {
    local dir=$1 pid=$2 what=$3
    shift 3
    local i
    for i in $(seq 1 600); do
        "$@" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true # nothing else would stop it: no watcher yet
    die "$what did not start in 60 s; see $dir/server.log"
}

# init_failed DIR WHAT: keep WHAT's log, drop the half-made data directory so the next attempt
# starts afresh (mariadb-install-db has crashed once here while other servers were starting).
init_failed() {
    local dir=$1 what=$2
    echo "testdb: $what failed:" >&2
    tail -n 5 "$dir/init.log" >&2 || true
    rm -rf "$dir/data"
}

start_postgres() {
    local dir=$1 user=$2 port=$3 bin
    bin=$(pg_bin)
    if [ ! -d "$dir/data" ]; then
        "${exec_as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync \
            >"$dir/init.log" 2>&1 || { init_failed "$dir" initdb; return 1; }
    fi
    # A durable-enough, fast server: fsync off (the data is thrown away), no TCP but loopback.
    setsid "${exec_as[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
        -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
        -c full_page_writes=off -c max_connections=100 -c shared_buffers=16MB \
        >"$dir/server.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$dir/server.pid"
    wait_for "$dir" "$pid" PostgreSQL "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres ||
        return 1
    echo "PID=$pid"
    echo "PORT=$port"
    echo "USER=postgres"
    echo "DATABASE=postgres"
    echo "URL=postgresql://postgres@127.0.0.1:$port/postgres"
}

start_mariadb() {
    local dir=$1 user=$2 port=$3
    command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ||
        die "MariaDB is not installed: apt-get install -y mariadb-server-core"
    local mariadbd=/usr/sbin/mariadbd
    [ -x "$mariadbd" ] || mariadbd=$(command -v mariadbd)
    local as_user=()
    [ -n "$user" ] && as_user=(--user="$user")
    # MariaDB's bootstrap names temporary tables by process id in $TMPDIR: a shared /tmp lets
    # another setup with the same pid (another namespace) remove ours. Each server has its own.
    mkdir -p "$dir/tmp"
    [ -n "$user" ] && chown "$user" "$dir/tmp"
    export TMPDIR="$dir/tmp"
    if [ ! -d "$dir/data" ]; then
        mariadb-install-db --no-defaults --datadir="$dir/data" "${as_user[@]}" \
            --auth-root-authentication-method=normal --skip-test-db \
            >"$dir/init.log" 2>&1 || { init_failed "$dir" mariadb-install-db; return 1; }
    fi
    cat >"$dir/init.sql" <<'SQL'
CREATE DATABASE IF NOT EXISTS test;
CREATE USER IF NOT EXISTS 'lock'@'%';
CREATE USER IF NOT EXISTS 'lock'@'localhost';
GRANT ALL ON *.* TO 'lock'@'%';
GRANT ALL ON *.* TO 'lock'@'localhost';
SQL
    [ -n "$user" ] && chown -R "$user" "$dir"
    setsid "$mariadbd" --no-defaults "${as_user[@]}" --datadir="$dir/data" --port="$port" \
        --bind-address=127.0.0.1 --tmpdir="$dir/tmp" --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
        --init-file="$dir/init.sql" --skip-name-resolve --innodb-flush-log-at-trx-commit=0 \
        --innodb-buffer-pool-size=32M --innodb-log-file-size=16M --skip-log-bin \
        --max-connections=200 >"$dir/server.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$dir/server.pid"
    wait_for "$dir" "$pid" MariaDB grep -q "ready for connections" "$dir/server.log" || return 1
    echo "PID=$pid"
    echo "PORT=$port"
    echo "USER=lock"
    echo "DATABASE=test"
    echo "URL=mysql://lock@127.0.0.1:$port/test"
}

# watch OWNER DIR: stops DIR's server once OWNER has exited.
watch_owner() {
    local owner=$1 dir=$2
    (
        while kill -0 "$owner" 2>/dev/null && [ -f "$dir/server.pid" ]; do sleep 1; done
        [ -f "$dir/server.pid" ] && stop "$dir"
    ) >/dev/null 2>&1 </dev/null &
    disown
}

start() {
    local kind=$1 dir=$2 owner=${3:-}
    mkdir -p "$dir"
    [ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
    local user
    user=$(run_as_user)
    [ -n "$user" ] && chown "$user" "$dir"
    set_user "$user"
    local attempt port
    # The port is free when picked; another process may take it before the server binds.
    for attempt in 1 2 3 4 5; do
        port=$(free_port)
        case $kind in
            postgres) start_postgres "$dir" "$user" "$port" && break ;;
            mariadb) start_mariadb "$dir" "$user" "$port" && break ;;
            *) die "unknown database '$kind' (postgres or mariadb)" ;;
        esac
        [ "$attempt" = 5 ] && die "$kind did not start; see $dir/server.log and $dir/init.log"
    done
    [ -n "$owner" ] && watch_owner "$owner" "$dir"
    return 0
}

stop() {
    local dir=$1 pid
    pid=$(cat "$dir/server.pid" 2>/dev/null || true)
    rm -f "$dir/server.pid"
    if [ -n "$pid" ]; then
        # SIGINT: PostgreSQL's fast shutdown; MariaDB shuts down on SIGTERM. KILL after 20 s.
        kill -INT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
        local i
        for i in $(seq 1 200); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}

case ${1:-} in
    start) [ $# -ge 3 ] || die "usage: $0 start postgres|mariadb DIR [OWNER_PID]"; start "$2" "$3" "${4:-}" ;;
    stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
    *) die "usage: $0 start postgres|mariadb DIR [OWNER_PID] | stop DIR" ;;
esac
