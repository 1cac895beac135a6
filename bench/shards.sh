#!/usr/bin/env bash
# Logical shards at scale, for `make bench` (never part of `make test`), on a
# server with PostgreSQL's default max_connections (100) and
# max_locks_per_transaction (64), fsync and synchronous_commit on:
# - CALL insta_id.create_shards_in_batches for 100, 1000 and 8192 shards of
#   the 3-table template of tests/fixtures/shard_template.sql, each into a
#   fresh database (ROUNDS times, alternating), then shard_drift over all of
#   them in one call;
# - the floor: the same three tables per shard written as plain DDL (what
#   pg_dump would print for a shard), one transaction per shard, for 100
#   shards into an empty database and 100 more into the 8192-shard one (what
#   PostgreSQL itself costs at that size);
# - pg_dump of the 8192-shard database, which locks every table in one
#   transaction: with the default lock table, then with
#   max_locks_per_transaction raised to what the tables need.
# Raw figures go to target/bench/shards-pgNN; bench/report.py reports them.
#   ROUNDS=2 PG=18 bench/shards.sh
source "$(dirname "$0")/../scripts/dev/harness.sh"
source "$(dirname "$0")/../tests/checks.sh"
ROUNDS=${ROUNDS:-2}
out="$repo/target/bench/shards-pg$PG"; rm -rf "$out"; mkdir -p "$out"
raw="$out/raw.tsv"; : >"$raw"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$raw"; echo "round $1  $2  $3"; }
stock=(--conf 'max_connections = 100' --conf 'fsync = on' --conf 'synchronous_commit = on' --conf 'full_page_writes = on')
cluster_destroy bench-shards
cluster_start bench-shards "${stock[@]}" --conf 'max_locks_per_transaction = 64'
trap 'stop_cluster bench-shards' EXIT
eval "$(cluster_env bench-shards)"
now() { date +%s.%N; }
fresh() { # $1: database; insta_id and the template in it
  q -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
  q -d "$1" -c "SET client_min_messages = error" -c "CREATE EXTENSION insta_id" \
    -f "$repo/tests/fixtures/shard_template.sql" >/dev/null
}

# Plain DDL of one shard of the template, with its next_id defaults: the floor.
raw_ddl=$out/raw_ddl.sql
for ((s = 1; s <= 100; s++)); do cat <<SQL
BEGIN;
CREATE SCHEMA raw$s;
CREATE SEQUENCE raw$s.users_id_seq CACHE 32;
CREATE TABLE raw$s.users (name text NOT NULL, id bigint NOT NULL DEFAULT insta_id.next_id($s, 'raw$s.users_id_seq') PRIMARY KEY,
  written_at timestamptz NOT NULL DEFAULT clock_timestamp());
ALTER SEQUENCE raw$s.users_id_seq OWNED BY raw$s.users.id;
CREATE SEQUENCE raw$s.photos_id_seq CACHE 32;
CREATE TABLE raw$s.photos (user_id bigint NOT NULL REFERENCES raw$s.users (id), caption text,
  id bigint NOT NULL DEFAULT insta_id.next_id($s, 'raw$s.photos_id_seq') PRIMARY KEY);
CREATE INDEX ON raw$s.photos (user_id);
ALTER SEQUENCE raw$s.photos_id_seq OWNED BY raw$s.photos.id;
CREATE SEQUENCE raw$s.likes_id_seq CACHE 32;
CREATE TABLE raw$s.likes (photo_id bigint NOT NULL, user_id bigint NOT NULL, UNIQUE (photo_id, user_id),
  id bigint NOT NULL DEFAULT insta_id.next_id($s, 'raw$s.likes_id_seq'));
ALTER SEQUENCE raw$s.likes_id_seq OWNED BY raw$s.likes.id;
COMMIT;
SQL
done >"$raw_ddl"

for ((round = 1; round <= ROUNDS; round++)); do
  fresh shards_raw
  t=$(now); q -d shards_raw -f "$raw_ddl" >/dev/null; record "$round" raw_ddl/100 "$(echo "$(now) - $t" | bc)"
  for n in 100 1000 8192; do
    fresh "shards_$n"
    t=$(now)
    q -d "shards_$n" -c "CALL insta_id.create_shards_in_batches(0, $((n - 1)), 'template')" 2>/dev/null
    record "$round" "create/$n" "$(echo "$(now) - $t" | bc)"
    t=$(now)
    [ "$(q -d "shards_$n" -c "SELECT count(*) FROM insta_id.shard_drift('template')")" = 0 ] || echo "drift/$n: shards differ" >&2
    record "$round" "drift/$n" "$(echo "$(now) - $t" | bc)"
  done
done
t=$(now); q -d shards_8192 -f "$raw_ddl" >/dev/null; record 1 raw_ddl_at_8192/100 "$(echo "$(now) - $t" | bc)"
check "8192 shards, each with its 3 tables" \
  "$(q -d shards_8192 -c "SELECT count(*) FROM insta_id.shards() WHERE tables = 3")" 8192

# pg_dump of 8192 shards: it takes a lock on every table it dumps, in one transaction.
tables=$(q -d shards_8192 -c "SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace <> 'pg_catalog'::regnamespace AND relnamespace <> 'information_schema'::regnamespace")
processes=$(q -d shards_8192 -c "SELECT current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int
  + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int
  + coalesce(current_setting('autovacuum_worker_slots', true), current_setting('autovacuum_max_workers'))::int + 1")
dump_err=$(pg_dump -Fc -f "$out/shards.dump" shards_8192 2>&1 >/dev/null | head -n 1 || true)
record 1 dump/tables "$tables"
record 1 dump/processes "$processes"
echo "$dump_err" >"$out/dump_default.txt"
# What the tables need (each holds a lock until the dump ends), rounded up to 64, with room for the rest.
need=$(( ((tables + 1000) / processes + 63) / 64 * 64 ))
cluster_start bench-shards "${stock[@]}" --conf "max_locks_per_transaction = $need"
t=$(now)
pg_dump -Fc -f "$out/shards.dump" shards_8192
record 1 dump/seconds "$(echo "$(now) - $t" | bc)"
record 1 dump/max_locks "$need"
record 1 dump/bytes "$(stat -c %s "$out/shards.dump")"
rm -f "$out/shards.dump"
{
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(sed -nE 's/^model name\s*: //p' /proc/cpuinfo | head -n1)"
  echo "postgres: $(q -d postgres -c 'SELECT version()')"
  echo "insta_id: $(q -d shards_100 -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'"), guard $(q -d shards_100 -c 'SELECT insta_id.guard_mode()'); rounds: $ROUNDS; date: $(date -u +%Y-%m-%d)"
} >"$out/machine.txt"
finish
