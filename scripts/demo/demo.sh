#!/usr/bin/env bash
# The demo behind `make demo`: a throwaway cluster of the newest supported
# PostgreSQL with no server configuration at all (insta_id is not preloaded:
# the duplicate guard is server-wide anyway), four logical shards
# (schemas insta1..insta4, like Instagram's) made from a template with
# insta_id.create_shards, a table in each whose id DEFAULT mints IDs with that
# shard's number, rows inserted with RETURNING id, and the IDs decoded.
# Stops the cluster at the end; DEMO_KEEP=1 leaves it running.
source "$(dirname "$0")/../dev/harness.sh"

cluster_start demo
eval "$(cluster_env demo)"
trap '[ "${DEMO_KEEP:-0}" = 1 ] || cluster_stop demo' EXIT
echo "== $(psql -X -qtA -d postgres -c "SELECT version()" | cut -d, -f1), shared_preload_libraries = '$(psql -X -qtA -d postgres -c "SHOW shared_preload_libraries")'"

PGOPTIONS="-c client_min_messages=warning" psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS insta_demo" -c "CREATE DATABASE insta_demo"
psql -X -q -v ON_ERROR_STOP=1 -d insta_demo <<'SQL'
\pset footer off
SET client_min_messages = warning;
CREATE EXTENSION insta_id;
\echo
\echo '== A template table, and four logical shards made from it: schemas insta1..insta4'
CREATE SCHEMA template;
CREATE TABLE template.photos (owner text NOT NULL, caption text);
SELECT insta_id.add_id_column('template.photos', 'id', 0) AS id_sequence;
ALTER TABLE template.photos ADD PRIMARY KEY (id);
SELECT insta_id.create_shards(1, 4, 'template') AS shards_created;
SELECT shard_id, schema_name, tables FROM insta_id.shards() ORDER BY shard_id;
SELECT n.nspname AS shard_schema, pg_get_expr(d.adbin, d.adrelid) AS id_default
FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'photos' AND n.nspname LIKE 'insta%' ORDER BY 1;

\echo '== INSERT ... RETURNING id'
INSERT INTO insta1.photos (owner, caption) VALUES ('kevin', 'first post') RETURNING id, owner;
INSERT INTO insta3.photos (owner, caption) VALUES ('mike', 'a dog'), ('mike', 'a cat') RETURNING id, owner;
INSERT INTO insta4.photos (owner, caption) SELECT 'bot', 'photo ' || g FROM generate_series(1, 1000) g;
INSERT INTO insta2.photos (owner, caption) VALUES ('amy', 'sunset') RETURNING id, owner;

\echo '== Decoded with insta_id.id_parts: time, logical shard, sequence % 1024'
SELECT p.id, d.created_at, d.shard_id, d.seq_id, p.owner
FROM (SELECT * FROM insta1.photos UNION ALL SELECT * FROM insta2.photos
      UNION ALL SELECT * FROM insta3.photos
      UNION ALL (SELECT * FROM insta4.photos ORDER BY id DESC LIMIT 2)) p,
     insta_id.id_parts(p.id) d
ORDER BY p.id;

\echo '== IDs of the last minute, found through the primary key with insta_id.min_id'
EXPLAIN (COSTS OFF) SELECT count(*) FROM insta4.photos WHERE id >= insta_id.min_id(now() - interval '1 minute');
SELECT count(*) AS photos_last_minute FROM insta4.photos WHERE id >= insta_id.min_id(now() - interval '1 minute');
\echo '== 1000 rows inserted by one statement into one shard: all IDs distinct, spread over milliseconds'
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       count(DISTINCT insta_id.created_at(id)) AS milliseconds
FROM insta4.photos;
\echo '== How far the duplicate guard reaches: shared = every session of this server (in every configuration)'
SELECT insta_id.guard_mode() AS duplicate_guard;
\echo '== The durable high-water mark (this database''s sequence insta_id_mark.high_water, in the WAL): after a restart, a failover, a restore or pg_upgrade, even with the clock behind, IDs continue above it'
SELECT insta_id.high_water_mark() >= max(insta_id.created_at(id)) AS mark_covers_every_id,
       insta_id.high_water_mark() - max(insta_id.created_at(id)) AS reserved_ahead
FROM insta4.photos;
\echo '== What the guard did (insta_id.guard_stats()): 20,000 IDs from one sequence in one statement hit the ceiling of 1024 a millisecond, and waited'
SELECT count(insta_id.next_id(4, 'insta4.photos_id_seq')) AS burst FROM generate_series(1, 20000);
SELECT sequence, issued, waits, round(wait_time::numeric, 1) AS wait_ms, borrowed_ms, refused
FROM insta_id.guard_stats() WHERE database = current_database() ORDER BY issued DESC;
SQL

if [ "${DEMO_KEEP:-0}" = 1 ]; then
  echo "The demo cluster is still running. Connect with:"
  echo "  $(cluster_env demo | sed 's/^export //') psql -d insta_demo"
  echo "Stop it with: make stop PG=$PG"
fi
