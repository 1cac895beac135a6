#!/usr/bin/env bash
# Logical shards at scale, for `make bench` (never part of `make test`), on a
# server with PostgreSQL's default max_connections (100) and
# max_locks_per_transaction (64), fsync and synchronous_commit on, for two
# templates: the 3 tables of tests/fixtures/shard_template.sql ("plain"), and
# issue 58's rich template, bench/rich_template.sql ("rich": foreign keys, a
# trigger, a view, a partitioned table with two partitions, row-level
# security, grants; every object owned by a role that is not a superuser):
# - CALL insta_id.create_shards_in_batches for 100, 1000 and 8192 shards,
#   each into a fresh database (ROUNDS times, alternating), then
#   shard_drift over all of them in one call, twice (the first call after
#   the shards are made sets the hint bits of what they wrote), and at 8192
#   over the first 1000 of them (a range) and a migration of one statement
#   over every shard, then the same statement as plain DDL on each shard
#   (what the migration's checks cost);
# - the floor: the same shards as plain DDL, pg_dump -s of a shard made by
#   insta_id with its names changed, one transaction per shard, for 100
#   shards into an empty database and 100 more into the 8192-shard one (what
#   PostgreSQL itself costs at that size);
# - pg_dump of the plain 8192-shard database, which locks every table in one
#   transaction: with the default lock table, then with
#   max_locks_per_transaction raised to what the tables need.
# Raw figures go to target/bench/shards-pgNN; bench/report.py reports them,
# with what else ran beside each call over all shards (activity-*.txt:
# autovacuum workers, the checkpointer, wait events, sampled each second)
# and the server's log of checkpoints and autovacuum (server.log): a first
# round's migration once took ten times its second's, unexplained.
#   ROUNDS=2 PG=18 bench/shards.sh
source "$(dirname "$0")/../scripts/dev/harness.sh"
source "$(dirname "$0")/../tests/checks.sh"
ROUNDS=${ROUNDS:-2}
# (SIZES: smaller ones to try the script out; the report reads 100, 1000 and 8192.)
SIZES=${SIZES:-100 1000 8192}; largest=${SIZES##* }
out="$repo/target/bench/shards-pg$PG"; rm -rf "$out"; mkdir -p "$out"
raw="$out/raw.tsv"; : >"$raw"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$raw"; echo "round $1  $2  $3"; }
stock=(--conf 'max_connections = 100' --conf 'fsync = on' --conf 'synchronous_commit = on' --conf 'full_page_writes = on'
       --conf 'log_checkpoints = on' --conf 'log_autovacuum_min_duration = 0')
cluster_destroy bench-shards
cluster_start bench-shards "${stock[@]}" --conf 'max_locks_per_transaction = 64'
trap 'stop_cluster bench-shards' EXIT
eval "$(cluster_env bench-shards)"
now() { date +%s.%N; }
# Each kind: its fixture, its template schema, its number of tables
# (partitions included) and a table a migration alters.
declare -A fixture=([plain]=$repo/tests/fixtures/shard_template.sql [rich]=$repo/bench/rich_template.sql)
declare -A template=([plain]=template [rich]=rich)
declare -A table_count=([plain]=3 [rich]=6) altered=([plain]=photos [rich]=orders)
fresh() { # $1: database, $2: plain or rich; insta_id and the template in it
  q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
  q -d "$1" -c "SET client_min_messages = error" -c "CREATE EXTENSION insta_id" -f "${fixture[$2]}" >/dev/null
}
# watched FILE COMMAND...: runs the command while sampling, each second,
# the server's other work into FILE.
watched() {
  local file=$1 sampler; shift
  while sleep 1; do
    q -d postgres -c "SELECT clock_timestamp()::time(0), a.backend_type, coalesce(a.wait_event_type || ':' || a.wait_event, 'on CPU'),
                             left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 60)
                      FROM pg_stat_activity a
                      WHERE a.pid <> pg_backend_pid() AND a.state IS DISTINCT FROM 'idle'
                        AND a.backend_type IN ('client backend', 'autovacuum worker', 'checkpointer', 'background writer')" >>"$file" || true
  done >/dev/null 2>&1 &  # (not the caller's output: a $(...) would wait for it)
  sampler=$!
  "$@"
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
}
timed() { # $1: round, $2: name, $3: database, $4...: psql's arguments
  local round=$1 name=$2 db=$3 t; shift 3
  t=$(now); q -d "$db" "$@" >/dev/null; record "$round" "$name" "$(echo "$(now) - $t" | bc)"
}

# drift ROUND KIND N NAME: shard_drift over all N shards in one call, its
# time and the WAL the server wrote meanwhile (NAME_wal). Called twice:
# the first call after the shards are made is the first to read the
# catalog rows they wrote, and sets their hint bits (with data checksums,
# each page written whole to the WAL: 300 MB at 8192 rich shards); a
# DBA's later call does not pay that.
drift() {
  local round=$1 kind=$2 n=$3 name=$4 db="$2_$3" t lsn drifted
  lsn=$(q -d "$db" -c "SELECT pg_current_wal_insert_lsn()")
  t=$(now)
  drifted=$(watched "$out/activity-$round-$kind-$name.txt" q -d "$db" -c "SELECT count(*) FROM insta_id.shard_drift('${template[$kind]}')")
  [ "$drifted" = 0 ] || echo "$kind $name/$n: shards differ" >&2
  record "$round" "$kind/$name/$n" "$(echo "$(now) - $t" | bc)"
  record "$round" "$kind/${name}_wal/$n" "$(q -d "$db" -c "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn')")"
}

# The floor: shard 0 as pg_dump -s prints it, its schema and shard number
# changed to rawN and N, for shards 1 to 100, a transaction each; as the
# objects' owner (no ALTER ... OWNER TO each), without pg_dump's settings
# and comments.
floor_of() { # $1: plain or rich
  fresh floor_src "$1"
  q -d floor_src -c "SELECT insta_id.create_shards(0, 0, '${template[$1]}')" >/dev/null
  local owner one
  owner=$(q -d floor_src -c "SELECT DISTINCT relowner::regrole FROM pg_class WHERE relnamespace = 'insta0'::regnamespace")
  one=$(pg_dump -s -n insta0 floor_src \
    | grep -vE '^(--|SET |SELECT pg_catalog\.set_config|\\(un)?restrict |CREATE SCHEMA |ALTER .* OWNER TO [^;]*;$)')
  for ((s = 1; s <= 100; s++)); do
    echo "BEGIN;"
    echo "CREATE SCHEMA raw$s AUTHORIZATION $owner;"
    echo "SET LOCAL ROLE $owner;"
    sed -E "s/\binsta0\b/raw$s/g; s/next_id\(0, /next_id($s, /g" <<<"$one"
    echo "COMMIT;"
  done >"$out/raw_ddl_$1.sql"
  q -d postgres -c "DROP DATABASE floor_src"
}
for kind in plain rich; do floor_of $kind; done
# migrate_floor DATABASE TABLE COLUMN: a migration's statement as plain
# DDL on each shard, as psql would run it at its best: a shard's
# transaction in one round trip (\;), committed without waiting for its
# WAL, and one wait at the end, as migrate commits and waits.
migrate_floor() {
  echo "SET synchronous_commit = off;"
  q -d "$1" -c "SELECT format('BEGIN\; SET LOCAL ROLE %I\; ALTER TABLE %I.%I ADD COLUMN %I int\; COMMIT;',
                              o.rolname, g.schema_name, '$2', '$3')
                FROM insta_id_admin.shard_registry g
                JOIN pg_class c ON c.oid = to_regclass(format('%I.%I', g.schema_name, '$2'))
                JOIN pg_roles o ON o.oid = c.relowner
                ORDER BY g.shard_id"
  echo "SET synchronous_commit = on; BEGIN; SELECT pg_current_xact_id(); COMMIT;"
}

for ((round = 1; round <= ROUNDS; round++)); do
  for kind in plain rich; do
    fresh "raw_$kind" "$kind"
    timed "$round" "$kind/raw_ddl/100" "raw_$kind" -f "$out/raw_ddl_$kind.sql"
    for n in $SIZES; do
      db="${kind}_$n"
      fresh "$db" "$kind"
      timed "$round" "$kind/create/$n" "$db" -c "CALL insta_id.create_shards_in_batches(0, $((n - 1)), '${template[$kind]}')"
      drift "$round" "$kind" "$n" drift
      drift "$round" "$kind" "$n" drift_again
    done
    # (a range of 1000 of them: the plans a range gets differ from all's;
    # one was quadratic, 11.7 s where all 8192 took 8)
    t=$(now)
    drifted=$(q -d "${kind}_$largest" -c "SELECT count(*) FROM insta_id.shard_drift('${template[$kind]}', 0, 999)")
    [ "$drifted" = 0 ] || echo "$kind drift of 1000 of $largest: shards differ" >&2
    record "$round" "$kind/drift_range/1000" "$(echo "$(now) - $t" | bc)"
    watched "$out/activity-$round-$kind-migrate.txt" timed "$round" "$kind/migrate/$largest" "${kind}_$largest" -c "SET client_min_messages = warning" \
      -c "CALL insta_id.migrate('bench_$round', '${template[$kind]}', 'ALTER TABLE ${altered[$kind]} ADD COLUMN bench_$round int')"
    # (its floor: migrate_floor, above)
    migrate_floor "${kind}_$largest" "${altered[$kind]}" "floor_$round" >"$out/migrate_floor_$kind.sql"
    timed "$round" "$kind/migrate_floor/$largest" "${kind}_$largest" -f "$out/migrate_floor_$kind.sql"
    # (The last round's 8192-shard databases stay, for the checks and pg_dump below.)
  done
done
for kind in plain rich; do
  timed 1 "$kind/raw_ddl_at_$largest/100" "${kind}_$largest" -f "$out/raw_ddl_$kind.sql"
done
for kind in plain rich; do
  check "$largest shards of the $kind template, each with its ${table_count[$kind]} tables" \
    "$(q -d "${kind}_$largest" -c "SELECT count(*) FROM insta_id.shards() WHERE tables = ${table_count[$kind]}")" "$largest"
  check "the $kind template's migration on every shard" \
    "$(q -d "${kind}_$largest" -c "SELECT count(*) FROM insta_id_admin.applied_migrations WHERE migration = 'bench_$ROUNDS'")" $((largest + 1))
  check "its floor's column on every shard" \
    "$(q -d "${kind}_$largest" -c "SELECT count(*) FROM pg_attribute WHERE attname = 'floor_$ROUNDS' AND NOT attisdropped")" "$largest"
done
for kind in plain rich; do
  for n in $SIZES; do [ "$n" = "$largest" ] || q -d postgres -c "DROP DATABASE ${kind}_$n"; done
  q -d postgres -c "DROP DATABASE raw_$kind"
done
q -d postgres -c "DROP DATABASE rich_$largest"

# pg_dump of 8192 shards: it takes a lock on every table it dumps, in one
# transaction; before PostgreSQL 18 on every sequence too (its pg_dump
# reads each with a SELECT, whose lock lasts until the dump ends).
user_rels="relnamespace <> 'pg_catalog'::regnamespace AND relnamespace <> 'information_schema'::regnamespace"
tables=$(q -d plain_$largest -c "SELECT count(*) FROM pg_class WHERE relkind IN ('r', 'p') AND $user_rels")
locked=$(q -d plain_$largest -c "SELECT count(*) FROM pg_class WHERE (relkind IN ('r', 'p')
  OR (relkind = 'S' AND current_setting('server_version_num')::int < 180000)) AND $user_rels")
processes=$(q -d plain_$largest -c "SELECT current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int
  + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int
  + coalesce(current_setting('autovacuum_worker_slots', true), current_setting('autovacuum_max_workers'))::int + 1")
dump_err=$(pg_dump -Fc -f "$out/shards.dump" plain_$largest 2>&1 >/dev/null | head -n 1 || true)
record 1 dump/tables "$tables"
record 1 dump/locked "$locked"
record 1 dump/processes "$processes"
echo "$dump_err" >"$out/dump_default.txt"
# What they need (each holds a lock until the dump ends), rounded up to 64, with room for the rest.
need=$(( ((locked + 1000) / processes + 63) / 64 * 64 ))
cluster_start bench-shards "${stock[@]}" --conf "max_locks_per_transaction = $need"
t=$(now)
pg_dump -Fc -f "$out/shards.dump" plain_$largest
record 1 dump/seconds "$(echo "$(now) - $t" | bc)"
record 1 dump/max_locks "$need"
record 1 dump/bytes "$(stat -c %s "$out/shards.dump")"
rm -f "$out/shards.dump"
{
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(sed -nE 's/^model name\s*: //p' /proc/cpuinfo | head -n1)"
  echo "postgres: $(q -d postgres -c 'SELECT version()')"
  echo "insta_id: $(q -d plain_$largest -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'"), guard $(q -d plain_$largest -c 'SELECT insta_id.guard_mode()'); rounds: $ROUNDS; date: $(date -u +%Y-%m-%d)"
} >"$out/machine.txt"
cp "$(cluster_dir bench-shards)/server.log" "$out/server.log"
finish
