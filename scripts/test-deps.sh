#!/usr/bin/env bash
# scripts/deps.sh's groups: `make build` / `make release` (deps.sh build) and `make dist` must not
# install what only the tests use; `deps.sh test` must still bring all of it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
test_only="redis-server redis-tools faketime fonts-dejavu-core python3-pip nodejs npm postgresql
mariadb-server-core sqlite3 prometheus prometheus-redis-exporter"
fail() { echo "deps: $*" >&2; exit 1; }
for mode in build dist; do
    listed=$("$here/deps.sh" --list $mode | awk '{print $2}')
    for pkg in $test_only; do
        ! grep -qx "$pkg" <<<"$listed" || fail "deps.sh $mode would install the test-only $pkg"
    done
done
! "$here/deps.sh" --list build | grep -qx 'build python3' || fail "building needs no Python"
listed=$("$here/deps.sh" --list test | awk '{print $2}')
for pkg in $test_only build-essential libclang-dev python3-venv; do
    grep -qx "$pkg" <<<"$listed" || fail "deps.sh test does not check $pkg"
done
echo "deps groups: ok"
