#!/usr/bin/env bash
# TAP tests (tests/tap/t/*.pl) on PostgreSQL's own TAP framework: what needs
# servers, sessions, restarts or a clock (CONTRIBUTING.md says why this
# framework). The modules (PostgreSQL::Test::Cluster, background_psql,
# poll_query_until) come from Debian's postgresql-server-dev (harness.sh's PG_DEBIAN) and drive the
# version under test (PG or PG_CONFIG) through its install_path.
#   tests/tap.sh [name ...]   t/NNN_<name>.pl; default: every test
# PG_UPGRADE_FROM, PG_MOVE_FROM, PG_MOVE_NOT_PRELOADED=<pg_config>: the other
# installations of t/004_pg_upgrade.pl and t/008_move.pl (skipped without).
# As root, initdb and postgres refuse to run: prove then runs as postgres.
source "$(dirname "$0")/../scripts/dev/harness.sh"
modules=$(pg_debian_dir)/lib/pgxs/src/test/perl
[ -f "$modules/PostgreSQL/Test/Cluster.pm" ] || { echo "tap.sh: $modules is missing: scripts/dev/setup.sh tap" >&2; exit 1; }
# One directory a run, named by its tests: make test runs suites side by
# side, two of them on one version (scripts/dev/lanes.sh).
out="$repo/target/tap/pg$PG-$(IFS=-; echo "${*:-all}")"
rm -rf "$out"; mkdir -p "$out"
# Ports reserved in one place for every run (PostgreSQL::Test::Cluster
# takes a lock file a port), so that side-by-side runs never pick the same.
ports="$repo/target/tap/portlock"; mkdir -p "$ports"
tests=()
for name in "${@:-*}"; do
  found=("$repo"/tests/tap/t/[0-9][0-9][0-9]_$name.pl)
  [ -f "${found[0]}" ] || { echo "tap.sh: no test t/NNN_$name.pl" >&2; exit 2; }
  tests+=("${found[@]#"$repo/tests/tap/"}")
done
# What tests read from the environment (sudo would drop it): the other
# installations some tests need, and the size of a run.
pass=()
# (LD_PRELOAD and BUSY_FSYNC_MS: scripts/dev/busy.sh's slow disk)
for v in PG_UPGRADE_FROM PG_MOVE_FROM PG_MOVE_NOT_PRELOADED SECONDS_PER_RUN SECONDS_OF_LOAD SMITH_QUERIES SMITH_SEED LD_PRELOAD BUSY_FSYNC_MS; do
  [ -z "${!v:-}" ] || pass+=("$v=${!v}")
done
run=(); [ "$(id -u)" = 0 ] && { chown -R postgres "$out" "$ports"; run=(sudo -u postgres); }
status=0
(cd "$repo/tests/tap" && "${run[@]}" env PATH="$PGBIN:$PATH" PG_CONFIG="$PG_CONFIG" TESTDIR="$out" PG_TEST_PORT_DIR="$ports" \
   INSTA_ID_VERSION="$(insta_id_version)" "${pass[@]}" \
   PG_REGRESS="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress" \
   PERL5LIB="$modules:$repo/tests/tap" prove --timer --verbose "${tests[@]}") 2>&1 | tee "$out/prove.log" || status=$?
faketime_cleanup
if [ $status != 0 ]; then
  find "$out" -name 'regress_log_*' -exec tail -n 40 {} + 2>/dev/null || true
  # Last, so that the tail of a CI log names what failed.
  echo "tap on PostgreSQL $PG: what failed:"
  grep -E '^(not ok|t/.*(Wstat|Failed)|  Failed test)|Dubious|Bailout called|^Failed [0-9]+/' "$out/prove.log" | tail -n 30 || true
fi
echo "tap on PostgreSQL $PG: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
