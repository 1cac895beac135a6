#!/usr/bin/env bash
# TAP tests (tests/tap/t/*.pl) on PostgreSQL's own TAP framework: what needs
# servers, sessions, restarts or a clock (CONTRIBUTING.md says why this
# framework). The modules (PostgreSQL::Test::Cluster, background_psql,
# poll_query_until) come from Debian's postgresql-server-dev-15 and drive the
# version under test (PG or PG_CONFIG) through its install_path.
#   tests/tap.sh [t/NNN_name.pl ...]   default: every test
# As root, initdb and postgres refuse to run: prove then runs as postgres.
source "$(dirname "$0")/../scripts/harness.sh"
modules=/usr/lib/postgresql/15/lib/pgxs/src/test/perl
[ -f "$modules/PostgreSQL/Test/Cluster.pm" ] || { echo "tap.sh: $modules is missing: scripts/setup.sh tap" >&2; exit 1; }
out="$repo/target/tap/pg$PG"
rm -rf "$out"; mkdir -p "$out"
tests=("$@"); [ ${#tests[@]} -gt 0 ] || mapfile -t tests < <(cd "$repo/tests/tap" && ls t/*.pl)
run=(); [ "$(id -u)" = 0 ] && { chown -R postgres "$out"; run=(sudo -u postgres); }
status=0
(cd "$repo/tests/tap" && "${run[@]}" env PATH="$PGBIN:$PATH" PG_CONFIG="$PG_CONFIG" TESTDIR="$out" \
   PG_REGRESS="$("$PG_CONFIG" --pkglibdir)/pgxs/src/test/regress/pg_regress" \
   PERL5LIB="$modules:$repo/tests/tap" prove --timer "${tests[@]}") || status=$?
faketime_cleanup
[ $status = 0 ] || find "$out" -name 'regress_log_*' -exec tail -n 40 {} + 2>/dev/null
echo "tap on PostgreSQL $PG: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
