-- Logical shards: the registry and the DDL helpers.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
SELECT insta_id.create_shard(1);
-- Names from users are quoted, never interpreted.
SELECT insta_id.create_shard(2, 'Robert''); DROP TABLE x; --');
SELECT insta_id.create_shard(3, 'Shard Three');
SELECT insta_id.create_shard(4, 'Ünïcødé_шард');
SELECT shard_id, schema_name, tables FROM insta_id.shards() ORDER BY shard_id;
SELECT nspname FROM pg_namespace WHERE nspname IN ('insta1', 'Robert''); DROP TABLE x; --', 'Shard Three', 'Ünïcødé_шард') ORDER BY 1;

-- add_id_column: a sequence of its own, OWNED BY the column, the shard from the registry.
CREATE TABLE "Shard Three"."Photos; x" (caption text);
INSERT INTO "Shard Three"."Photos; x" VALUES ('existing row');
SELECT insta_id.add_id_column('"Shard Three"."Photos; x"');
\d "Shard Three"."Photos; x"
INSERT INTO "Shard Three"."Photos; x" (caption) VALUES ('new') RETURNING insta_id.shard_id(id), insta_id.seq_id(id) > 1 AS after_existing_row;
SELECT caption, insta_id.shard_id(id) AS shard FROM "Shard Three"."Photos; x" ORDER BY id;
-- Idempotent.
SELECT insta_id.add_id_column('"Shard Three"."Photos; x"');
-- An integer column with data becomes bigint; its NULLs get IDs.
CREATE TABLE insta1.likes (id int, v int);
INSERT INTO insta1.likes VALUES (NULL, 1);
SELECT insta_id.add_id_column('insta1.likes', 'id');
SELECT format_type(atttypid, atttypmod), attnotnull FROM pg_attribute WHERE attrelid = 'insta1.likes'::regclass AND attname = 'id';
SELECT insta_id.shard_id(id) FROM insta1.likes;
-- DROP TABLE takes the sequence with it.
DROP TABLE insta1.likes;
SELECT count(*) AS leftover_sequences FROM pg_class WHERE relname = 'likes_id_seq';

-- Refusals, each with its SQLSTATE, none leaving anything behind.
CREATE TABLE insta1.t (id text, other bigint DEFAULT 7);
SELECT insta_id.add_id_column('insta1.t', 'id');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.add_id_column('insta1.t', 'other');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.add_id_column('insta1.t', 'fresh', 9);
SELECT insta_id.add_id_column('insta1.t', 'fresh', 1);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE public.outside (x int);
SELECT insta_id.add_id_column('public.outside');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.add_id_column('public.outside', 'id', 99);
SELECT insta_id.create_shard(8192);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_shard(1, 'elsewhere');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_shard(5, 'insta1');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_shard(5, 'public');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS registry_rows FROM insta_id_admin.shard_registry;

-- create_shards: a copy of every template table per shard, with its own next_id columns.
CREATE SCHEMA template;
CREATE TABLE template.users (name text NOT NULL UNIQUE);
SELECT insta_id.add_id_column('template.users', 'id', 0);
ALTER TABLE template.users ADD PRIMARY KEY (id);
CREATE TABLE template.photos (user_id bigint NOT NULL REFERENCES template.users (id) ON DELETE CASCADE,
                              caption text CHECK (length(caption) < 100));
SELECT insta_id.add_id_column('template.photos', 'id', 0);
CREATE INDEX ON template.photos (user_id);
SELECT insta_id.create_shards(10, 12, 'template');
SELECT shard_id, schema_name, tables FROM insta_id.shards() WHERE shard_id >= 10 ORDER BY 1;
\d insta11.photos
WITH u AS (INSERT INTO insta11.users (name) VALUES ('ann') RETURNING id)
INSERT INTO insta11.photos (user_id, caption) SELECT id, 'hi' FROM u
RETURNING insta_id.shard_id(id) AS photo_shard, insta_id.shard_id(user_id) AS user_shard;
-- Foreign keys point inside each shard (terse: the error would print an ID).
\set VERBOSITY terse
INSERT INTO insta12.photos (user_id, caption) SELECT id, 'x' FROM insta11.users;
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
-- All or nothing: shard 15 exists, so 13 and 14 are not created either.
SELECT insta_id.create_shard(15);
SELECT insta_id.create_shards(13, 15, 'template');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS shards_13_14 FROM insta_id.shards() WHERE shard_id IN (13, 14);
SELECT count(*) AS schemas_13_14 FROM pg_namespace WHERE nspname IN ('insta13', 'insta14');
SELECT insta_id.create_shards(20, 21, 'no_such_schema');
\echo :LAST_ERROR_SQLSTATE
CREATE SCHEMA bad_template;
CREATE TABLE bad_template.t (id serial);
SELECT insta_id.create_shards(20, 21, 'bad_template');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS shards_20_and_up FROM insta_id.shards() WHERE shard_id >= 20;

-- create_shards_in_batches: commits every shards_per_commit shards, so any
-- number of shards fits a stock lock table; calling it again skips the shards
-- that exist (a registered shard counts as complete: it was registered in
-- the transaction that made its tables).
SET client_min_messages = notice;
CALL insta_id.create_shards_in_batches(50, 54, 'template', shards_per_commit => 2);
SELECT insta_id.create_shard(56);
CALL insta_id.create_shards_in_batches(50, 57, 'template');
SET client_min_messages = warning;
SELECT shard_id, tables FROM insta_id.shards() WHERE shard_id BETWEEN 50 AND 57 ORDER BY 1;
INSERT INTO insta57.users (name) VALUES ('bo') RETURNING insta_id.shard_id(id);
SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'insta57.photos'::regclass;
-- Not inside a transaction block: PostgreSQL forbids its COMMIT there (2D000); nothing is made.
BEGIN;
CALL insta_id.create_shards_in_batches(60, 61, 'template');
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS shards_60_61 FROM insta_id.shards() WHERE shard_id IN (60, 61);
CALL insta_id.create_shards_in_batches(60, 61, 'template', shards_per_commit => 0);
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.create_shards_in_batches(60, 61, 'no_such_schema');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.create_shards_in_batches(60, 8192, 'template');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.create_shards_in_batches(NULL, 61, 'template');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.create_shards_in_batches(61, 60, 'template');
\echo :LAST_ERROR_SQLSTATE
-- One bad shard in a batch and none is made (every schema is made, then
-- every copy: the schema insta61 that exists stops it before any copy).
CREATE SCHEMA insta61;
SELECT insta_id.create_shards(60, 61, 'template');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS shards_60_61, (SELECT count(*) FROM pg_namespace WHERE nspname = 'insta60') AS schema_60
FROM insta_id.shards() WHERE shard_id IN (60, 61);
DROP SCHEMA insta61;
SELECT insta_id._create_copies(NULL, ARRAY[60]);
\echo :LAST_ERROR_SQLSTATE
-- create_shards refuses, before making anything, a range whose locks would not
-- fit in the server's lock table (the message has the numbers: sqlstate only here).
\set VERBOSITY sqlstate
SELECT insta_id.create_shards(100, 8191, 'template');
\set VERBOSITY default
SELECT count(*) AS shards_from_100 FROM insta_id.shards() WHERE shard_id >= 100;

-- shard_drift: how shards differ from their template. None right after
-- create_shards (shards 10-12; the others here were made empty on purpose).
SELECT * FROM insta_id.shard_drift('template') WHERE shard_id BETWEEN 10 AND 12;
-- A change made to the template and every shard alike is no drift either.
ALTER TABLE template.photos ADD COLUMN taken_at timestamptz DEFAULT now();
DO $$ BEGIN FOR s IN 10..12 LOOP
  EXECUTE format('ALTER TABLE insta%s.photos ADD COLUMN taken_at timestamptz DEFAULT now()', s);
END LOOP; END $$;
SELECT count(*) AS drift FROM insta_id.shard_drift('template') WHERE shard_id BETWEEN 10 AND 12;
-- Each kind of difference.
ALTER TABLE insta10.photos ADD COLUMN extra int;
ALTER TABLE insta10.users ALTER COLUMN name DROP NOT NULL;
DROP INDEX insta11.photos_user_id_idx;
ALTER TABLE insta11.photos DROP CONSTRAINT photos_caption_check;
GRANT SELECT ON insta12.users TO PUBLIC;
ALTER TABLE insta12.photos ALTER COLUMN taken_at SET DEFAULT clock_timestamp();
ALTER TABLE insta12.users ENABLE ROW LEVEL SECURITY;
CREATE POLICY own ON insta12.users USING (name = current_user);
SELECT * FROM insta_id.shard_drift('template') WHERE shard_id BETWEEN 10 AND 12;
SELECT shard_id, object, difference FROM insta_id.shard_drift('template') WHERE shard_id = 1 ORDER BY object LIMIT 2;
SELECT insta_id.shard_drift('no_such_schema');
\echo :LAST_ERROR_SQLSTATE
-- The same for a range of shards: only those; a range outside 0..8191,
-- upside down or NULL is refused.
SELECT shard_id, count(*) AS differences FROM insta_id.shard_drift('template', 11, 12) GROUP BY 1 ORDER BY 1;
SELECT count(*) AS differences FROM insta_id.shard_drift('template', 10, 10);
\set VERBOSITY sqlstate
SELECT insta_id.shard_drift('template', -1, 5);
SELECT insta_id.shard_drift('template', 0, 8192);
SELECT insta_id.shard_drift('template', 5, 4);
SELECT insta_id.shard_drift('template', NULL, 4);
\set VERBOSITY default
ALTER TABLE template.photos DROP COLUMN taken_at;
DO $$ BEGIN FOR s IN 10..12 LOOP
  EXECUTE format('ALTER TABLE insta%s.photos DROP COLUMN taken_at', s);
END LOOP; END $$;

-- A copy carries the template's grants (schema, tables, columns, next_id
-- sequences) and replica identity: the application role that may write to
-- the template may write to every shard.
CREATE ROLE insta_id_regress_app;
GRANT USAGE ON SCHEMA template TO insta_id_regress_app;
GRANT SELECT, INSERT ON template.users TO insta_id_regress_app;
GRANT UPDATE (name) ON template.users TO insta_id_regress_app;
SELECT format('GRANT USAGE ON SEQUENCE %s TO insta_id_regress_app', pg_get_serial_sequence('template.users', 'id')) \gexec
ALTER TABLE template.photos REPLICA IDENTITY FULL;
SELECT insta_id.create_shards(90, 90, 'template');
SELECT has_schema_privilege('insta_id_regress_app', 'insta90', 'USAGE') AS schema_usage,
       has_table_privilege('insta_id_regress_app', 'insta90.users', 'INSERT') AS users_insert,
       has_column_privilege('insta_id_regress_app', 'insta90.users', 'name', 'UPDATE') AS name_update,
       has_sequence_privilege('insta_id_regress_app', pg_get_serial_sequence('insta90.users', 'id'), 'USAGE') AS seq_usage,
       (SELECT relreplident FROM pg_class WHERE oid = 'insta90.photos'::regclass) AS photos_replica_identity;
SELECT count(*) AS drift FROM insta_id.shard_drift('template') WHERE shard_id = 90;
SET ROLE insta_id_regress_app;
INSERT INTO insta90.users (name) VALUES ('app') RETURNING insta_id.shard_id(id);
RESET ROLE;
-- A template holding what a copy would leave out is refused, naming it (0A000).
-- (Every kind: 12_templates.)
CREATE TYPE template.span AS RANGE (subtype = int4);
SELECT insta_id.create_shards(91, 91, 'template');
\echo :LAST_ERROR_SQLSTATE
DROP TYPE template.span;
SELECT insta_id.drop_shard(90, true);
REVOKE ALL ON SCHEMA template FROM insta_id_regress_app;
REVOKE ALL ON template.users FROM insta_id_regress_app;
SELECT format('REVOKE ALL ON SEQUENCE %s FROM insta_id_regress_app', pg_get_serial_sequence('template.users', 'id')) \gexec
DROP ROLE insta_id_regress_app;
ALTER TABLE template.photos REPLICA IDENTITY DEFAULT;

-- drop_shard refuses while the shard has rows, unless forced.
SELECT insta_id.drop_shard(11);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_shard(11, force => true);
SELECT insta_id.drop_shard(12);
SELECT insta_id.drop_shard(12);
\echo :LAST_ERROR_SQLSTATE
SELECT shard_id FROM insta_id.shards() WHERE shard_id >= 10 ORDER BY 1;
SELECT count(*) FROM pg_namespace WHERE nspname IN ('insta11', 'insta12');

-- adopt_shard registers a restored schema after checking its next_id columns.
CREATE SCHEMA moved;
CREATE SEQUENCE moved.s;
CREATE TABLE moved.t (id bigint DEFAULT insta_id.next_id(30, 'moved.s'));
SELECT insta_id.adopt_shard('moved', 31);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.adopt_shard('moved', 30);
SELECT shard_id, schema_name FROM insta_id.shards() WHERE shard_id = 30;

-- lock_shard_for_move marks a shard as being moved for the session (what
-- insta_id.migrate does then: tests/tap/t/008_move.pl, with real sessions); it names
-- the shard's schema, and refuses a shard that is not here.
SELECT insta_id.lock_shard_for_move(30) AS schema_name,
       (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = insta_id._move_lock_key() AND objid = 30
          AND objsubid = 3 AND pid = pg_backend_pid()) AS locks_held;
SELECT insta_id._unlock(insta_id._move_lock_key(), 30) AS released;
SELECT insta_id.lock_shard_for_move(31);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.lock_shard_for_move(8192);
\echo :LAST_ERROR_SQLSTATE

-- Only superusers, and roles granted EXECUTE, may create or drop shards.
CREATE ROLE insta_id_regress_user;
SET ROLE insta_id_regress_user;
SELECT insta_id.create_shard(40);
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.create_shards_in_batches(40, 41, 'template');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_shard(1, true);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) > 0 AS can_read_registry FROM insta_id.shards();
RESET ROLE;
DROP ROLE insta_id_regress_user;
