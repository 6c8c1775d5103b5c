#!/usr/bin/env bash
# clients/node/README.md's install, followed as written on a fresh machine: a copy of the
# repository's clients/node as a fresh clone has it (tracked files only: no node_modules, no
# dist), the README's build lines run in that clone's root, its install lines in a new project
# (with /path/to/redis-lock rewritten to the clone), then its node-redis and ioredis examples.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

fresh_project
clone=$project/redis-lock
app=$project/app
mkdir -p "$clone" "$app"
(cd "$repo" && git ls-files -z clients/node | xargs -0 cp --parents -t "$clone")
readme=$clone/clients/node/README.md
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

# The README names the tarball npm pack makes: it must carry package.json's version.
version=$(node -p 'require(process.argv[1]).version' "$clone/clients/node/package.json")
for block in build install; do
    grep -q "redis-lock-client-$version\.tgz" <<<"$(readme_block "$readme" "$block")" ||
        fail "the README's $block lines do not name redis-lock-client-$version.tgz (package.json's version)"
done

(cd "$clone" && bash -euo pipefail -c "$(readme_block "$readme" build)") || fail "the build lines failed"
[ -f "$clone/redis-lock-client-$version.tgz" ] || fail "npm pack made no redis-lock-client-$version.tgz"
cd "$app"
npm init -y >/dev/null
for block in install install-ioredis; do
    bash -euo pipefail -c "$(readme_block "$readme" "$block" | sed "s|/path/to/redis-lock|$clone|g")" ||
        fail "the $block lines failed"
done

start_server
for example in example example-ioredis; do
    on_port "$(readme_block "$readme" "$example")" >"$example.mjs"
    out=$(timeout 60 node "$example.mjs" 2>&1) || fail "$example.mjs failed: $out"
    for line in "left 9" "released true"; do
        grep -qx "$line" <<<"$out" || fail "$example.mjs printed no '$line': $out"
    done
    grep -qE '^token [0-9]+$' <<<"$out" || fail "$example.mjs printed no token: $out"
    pass "$example.mjs: $(tr '\n' ' ' <<<"$out")"
done
