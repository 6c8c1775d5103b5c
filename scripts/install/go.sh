#!/usr/bin/env bash
# make test-install-go: follows clients/go/README.md's install into a new module outside the
# repository, as a new user would, and runs its example against a real server. The README's
# blocks run as written, but for /path/to/redis-lock (rewritten to this repository's root) and
# the example's port 6379 (the test server's). Go modules come from the Go module cache, or the
# Go module proxy the first time (go-redis and its dependencies, checked against go.sum).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
started=$SECONDS
readme="$repo/clients/go/README.md"
"$repo/scripts/check-go.sh"

fresh_project
install=$(readme_block "$readme" install)
example=$(readme_block "$readme" example)
run=$(readme_block "$readme" run)
grep -q /path/to/redis-lock <<<"$install" || fail "the install block names no /path/to/redis-lock"
cd "$project"
bash -euo pipefail -c "${install//\/path\/to\/redis-lock/$repo}" || fail "the install block failed"
grep -q "github.com/redis-lock/redis-lock/clients/go v0.0.0" go.mod || fail "go.mod does not require the client"

start_server
on_port "$example" >main.go
out=$(bash -euo pipefail -c "$run") || fail "the example failed: $out"
[ "$out" = "99 true <nil>" ] || fail "the example printed '$out', want '99 true <nil>'"
pass "the README's install and example ran in $project ($((SECONDS - started)) s)"
