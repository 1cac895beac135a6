#!/usr/bin/env bash
# The clients applications use, against a throwaway cluster (not preloaded,
# as a new user runs it): each example of examples/ runs its own tests in a
# fresh database.
# - psycopg 3: INSERT ... RETURNING one row and executemany, COPY, decoding,
#   create_shards_in_batches in autocommit mode (2D000 in a transaction)
# - SQLAlchemy 2: a mapped class, RETURNING, a batched flush (sentinel column);
#   tables with identity keys and rows adopted by adopt_id_column
# - Django 5.2: migrations make the template and the shards; create() and
#   bulk_create() get the database-made primary keys; routing by shard; an
#   app's identity keys adopted by a migration (examples/django/legacy)
# - node-postgres: ids as exact strings or BigInt, ids in JSON, fetchPhoto
# - the Django and SQLAlchemy JSON endpoints served over HTTP on loopback to
#   node's fetch and JSON.parse (examples/node/fetch_photo.js): ids exact
# - the README's (and docs/') code blocks are copies of those examples
# Versions are pinned in examples/requirements.txt and examples/node/package.json;
# scripts/dev/setup.sh clients installs them (target/clients-venv, examples/node/node_modules).
source "$(dirname "$0")/../scripts/dev/harness.sh"
source "$(dirname "$0")/checks.sh"
python=$repo/target/clients-venv/bin/python
[ -x "$python" ] && [ -d "$repo/examples/node/node_modules/pg" ] \
  || { echo "the clients are not installed: scripts/dev/setup.sh clients" >&2; exit 1; }

# Preloaded before 17 and not on 17+, so that make test (15 and 18) runs the
# examples against both kinds of server.
if [ "$PG" -lt 17 ]; then start_cluster clients --preload; else start_cluster clients; fi
trap 'stop_cluster clients' EXIT

# run NAME DATABASE DIR COMMAND...: the example's suite; its output on failure.
run() {
  local name=$1 db=$2 dir=$3 out rc=0; shift 3
  out=$(cd "$repo/examples/$dir" && PGDATABASE=$db "$@" 2>&1) || rc=$?
  check "$name: its tests pass" "$rc" 0
  [ "$rc" = 0 ] || echo "$out" | tail -40
  echo "$out" | grep -E '^(Ran [0-9]+ tests|# pass|# fail)' | sed 's/^/     /'
}
fresh_db() { # $1: name; $2: with examples/schema.sql
  q -d postgres -c "CREATE DATABASE $1"
  [ -z "${2:-}" ] || q -d "$1" -f "$repo/examples/schema.sql" >/dev/null
}

fresh_db psycopg schema
run "psycopg $("$python" -c 'import psycopg; print(psycopg.__version__)')" psycopg psycopg \
  "$python" -m unittest -v test_photos

fresh_db sqlalchemy
run "SQLAlchemy $("$python" -c 'import sqlalchemy; print(sqlalchemy.__version__)')" sqlalchemy sqlalchemy \
  "$python" -m unittest -v test_photos

# Django's test runner makes (and drops) test_django; its migrations make the shards.
run "Django $("$python" -c 'import django; print(django.__version__)')" django django \
  "$python" manage.py test -v 2 --noinput

fresh_db node schema
run "node-postgres $(node -p 'require("./examples/node/node_modules/pg/package.json").version') on node $(node --version)" \
  node node node --test

rc=0; out=$("$python" "$repo/tests/doc_examples.py" "$repo" 2>&1) || rc=$?
check "the docs' code blocks are copies of the examples" "$rc" 0
echo "$out" | grep -v '^ok' | sed 's/^/     /'
finish
