# insta_id: every task a target. The README's two commands are `make demo`
# and `make test`; both run `make setup` first, which installs what is
# missing and is quick when nothing is.

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
PG_MAJOR  := $(shell $(PG_CONFIG) --version 2>/dev/null | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
export PG_CONFIG
export PATH := $(HOME)/.cargo/bin:$(PATH)

# initdb and postgres refuse root: pgrx's test harness then runs them as postgres.
ifeq ($(shell id -u),0)
PGRX_TEST_USER := postgres
else
PGRX_TEST_USER := $(shell id -un)
endif
PGRX_TEST_DATA := $(CURDIR)/target/pgrx-test-data


.PHONY: all setup build install demo stop test test-rust test-pg test-regress \
        test-upgrade test-shards test-fleet test-concurrency installcheck bench package lint clean \
        cluster-demo

all: build

## setup: install Debian packages, cargo-pgrx 0.18.0 and pgrx's config if missing
setup:
	@scripts/setup.sh

build: setup
	cargo build --release

## install: build and install into the server of PG_CONFIG (sudo if needed)
install: setup
	@scripts/install.sh

## demo: a throwaway cluster, a few logical shards, IDs inserted and decoded
demo: install
	@scripts/demo.sh

## cluster-demo: 3 servers, 300 logical shards, PL/Proxy routing
cluster-demo: install
	@scripts/fleet_demo.sh

## stop: stop the demo cluster if it was left running (DEMO_KEEP=1)
stop:
	@scripts/cluster.sh stop --name demo

## test: every suite; fails on the first failure
test: setup test-rust test-pg install test-regress test-upgrade test-shards test-fleet test-concurrency
	@echo "make test: all suites passed"

test-rust:
	cargo test --lib --no-default-features --features pg$(PG_MAJOR)

test-pg:
	@mkdir -p $(PGRX_TEST_DATA)
	@if [ "$$(id -u)" = 0 ]; then chown $(PGRX_TEST_USER) $(PGRX_TEST_DATA); fi
	CARGO_PGRX_TEST_RUNAS=$(PGRX_TEST_USER) CARGO_PGRX_TEST_PGDATA=$(PGRX_TEST_DATA) \
		cargo pgrx test pg$(PG_MAJOR)

test-regress:
	@tests/regress.sh

test-upgrade:
	@tests/upgrade.sh

test-shards:
	@tests/shards.sh

test-fleet:
	@tests/fleet.sh

test-concurrency:
	@tests/concurrency.sh

## installcheck: pg_regress suite against a running server you point PG* at
installcheck:
	@tests/regress.sh --existing

## bench: benchmarks against a throwaway cluster; writes BENCHMARKS.md
bench: install
	@bench/run.sh

## package: a directory tree ready to copy onto a server (target/release/insta_id-pgNN)
package: setup
	cargo pgrx package --pg-config $(PG_CONFIG)
	@scripts/install.sh --copy-frozen-only target/release/insta_id-pg$(PG_MAJOR)

lint: setup
	cargo fmt --all -- --check
	cargo clippy --all-targets --no-default-features --features "pg$(PG_MAJOR) pg_test" -- -D warnings

clean:
	-@for c in target/clusters/*; do [ -d "$$c" ] && scripts/cluster.sh stop --name "$$(basename $$c)"; done
	cargo clean
