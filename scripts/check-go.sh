#!/usr/bin/env bash
# The Go client (clients/go) needs Go 1.26 (its go.mod, as go-redis v9.23's). A go from 1.21 on
# fetches that toolchain itself from the Go module proxy when GOTOOLCHAIN allows it (auto, Go's
# default); with none, an older one, or GOTOOLCHAIN=local, say what to do.
set -euo pipefail
need="the Go client's tests and benchmark need Go 1.26"
if ! command -v go >/dev/null 2>&1; then
    echo "missing: go ($need)" >&2
    echo "install Go 1.26+, or any Go 1.21+ (Debian 13: sudo apt-get install -y golang-go) with" >&2
    echo "GOTOOLCHAIN=auto, which then fetches Go 1.26 from the Go module proxy" >&2
    exit 1
fi
version=$(go env GOVERSION 2>/dev/null || true) # go1.26.8
minor=$(echo "$version" | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
if [ -n "$minor" ] && [ "$minor" -ge 26 ]; then
    exit 0
fi
if [ -n "$minor" ] && [ "$minor" -ge 21 ] && [ "$(go env GOTOOLCHAIN)" != local ]; then
    exit 0 # go fetches Go 1.26 when it reads go.mod
fi
echo "go is ${version:-unknown}: $need" >&2
echo "install Go 1.26+, or run with GOTOOLCHAIN=auto on Go 1.21+ (it fetches Go 1.26 from the Go module proxy)" >&2
exit 1
