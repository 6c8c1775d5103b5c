#!/usr/bin/env bash
# The Python client's README followed as a new user would: a fresh virtual environment in a
# fresh project outside the repository, the README's install block run as written from the
# repository's root (it names ./clients/python), then the README's example run in the project
# against a real server, its output checked. Needs PyPI (setuptools for the build, redis-py).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

readme="$repo/clients/python/README.md"
started=$SECONDS
fresh_project
python3 -m venv "$project/.venv"
# shellcheck disable=SC1091
source "$project/.venv/bin/activate"
(cd "$repo" && bash -euo pipefail -c "$(readme_block "$readme" install)") >"$project/pip.log" 2>&1 \
    || { cat "$project/pip.log" >&2; fail "the README's install block failed"; }

start_server
on_port "$(readme_block "$readme" example)" >"$project/example.py"
output=$(cd "$project" && python example.py) || fail "the README's example failed"
echo "$output"
grep -q "^sold one, 99 left (token [0-9]\+)$" <<<"$output" || fail "unexpected output: $output"
pass "installed and ran the README's example in $((SECONDS - started)) s"
