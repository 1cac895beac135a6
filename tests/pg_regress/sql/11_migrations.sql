-- insta_id.migrate: one named change applied to a template and every
-- registered shard, one transaction per schema, recorded per schema;
-- idempotent, resumable, inherited by later shards. Concurrent runners and
-- lock_timeout retries need real sessions: tests/tap/t/005_shards.pl.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
-- Only this file's shards: migrate changes every registered shard.
SELECT count(*) >= 0 AS dropped FROM (SELECT insta_id.drop_shard(shard_id, force => true) FROM insta_id.shards()) d;
CREATE SCHEMA mt;
CREATE TABLE mt.posts (body text NOT NULL);
SELECT insta_id.add_id_column('mt.posts', 'id', 0);
ALTER TABLE mt.posts ADD PRIMARY KEY (id);
SELECT insta_id.create_shards(101, 103, 'mt');

-- A migration: the template first, then shards 101..103, each recorded.
SET client_min_messages = notice;
CALL insta_id.migrate('0001_posts_title', 'mt',
    $$ALTER TABLE posts ADD COLUMN title text NOT NULL DEFAULT ''; CREATE INDEX posts_title_idx ON posts (title)$$);
SELECT schema_name, migration FROM insta_id_admin.applied_migrations ORDER BY 1, 2;
SELECT name, template_schema, statements FROM insta_id_admin.migrations;
SELECT count(*) AS drift FROM insta_id.shard_drift('mt');
INSERT INTO insta102.posts (body, title) VALUES ('hello', 'first') RETURNING insta_id.shard_id(id);
-- Running it again changes nothing.
CALL insta_id.migrate('0001_posts_title', 'mt',
    $$ALTER TABLE posts ADD COLUMN title text NOT NULL DEFAULT ''; CREATE INDEX posts_title_idx ON posts (title)$$);
-- The same name never means other statements.
CALL insta_id.migrate('0001_posts_title', 'mt', $$ALTER TABLE posts ADD COLUMN other int$$);
\echo :LAST_ERROR_SQLSTATE
SET client_min_messages = warning;

-- Shards created later have every migration the template had.
SELECT insta_id.create_shards(104, 104, 'mt');
CALL insta_id.create_shards_in_batches(105, 106, 'mt', 1);
SELECT schema_name FROM insta_id_admin.applied_migrations WHERE migration = '0001_posts_title' AND schema_name LIKE 'insta%' ORDER BY 1;
SELECT count(*) AS drift FROM insta_id.shard_drift('mt');
SELECT count(*) AS pending FROM insta_id.pending_migrations();

-- Each schema's statements run with it first on search_path, then the caller's path.
SET search_path = public, pg_catalog;
CALL insta_id.migrate('0002_where', 'mt', $$CREATE TABLE where_am_i AS SELECT current_setting('search_path') AS path$$);
RESET search_path;
SELECT path FROM mt.where_am_i UNION ALL SELECT path FROM insta105.where_am_i;

-- A failing shard stops the run there, naming it, with the original SQLSTATE;
-- the schemas before it keep the migration, the rest are pending; once fixed,
-- calling it again goes on from there.
ALTER TABLE insta103.posts ADD COLUMN views int;
CALL insta_id.migrate('0003_views', 'mt', $$ALTER TABLE posts ADD COLUMN views bigint NOT NULL DEFAULT 0$$);
\echo :LAST_ERROR_SQLSTATE
SELECT migration, shard_id FROM insta_id.pending_migrations() ORDER BY 1, 2;
SELECT count(*) AS shard_103_unchanged FROM pg_attribute WHERE attrelid = 'insta103.posts'::regclass AND attname = 'views' AND atttypid = 'int'::regtype;
ALTER TABLE insta103.posts DROP COLUMN views;
SET client_min_messages = notice;
CALL insta_id.migrate('0003_views', 'mt', $$ALTER TABLE posts ADD COLUMN views bigint NOT NULL DEFAULT 0$$);
SET client_min_messages = warning;
SELECT count(*) AS pending FROM insta_id.pending_migrations();
SELECT count(*) AS drift FROM insta_id.shard_drift('mt');

-- Failing on the template changes nothing and records nothing.
CALL insta_id.migrate('0004_broken', 'mt', $$ALTER TABLE no_such_table ADD COLUMN x int$$);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS recorded FROM insta_id_admin.migrations WHERE name = '0004_broken';

-- Statements that cannot run in a transaction are refused (25001) with the rule:
CALL insta_id.migrate('0005_title_body_idx', 'mt', $$CREATE INDEX CONCURRENTLY posts_body_idx ON posts (body)$$);
\echo :LAST_ERROR_SQLSTATE
-- run them shard by shard from outside, then record them in their IF NOT EXISTS form.
SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS posts_body_idx ON %I.posts (body)', s)
FROM (SELECT 'mt' AS s UNION ALL SELECT schema_name FROM insta_id.shards()) x ORDER BY s \gexec
CALL insta_id.migrate('0005_title_body_idx', 'mt', $$CREATE INDEX IF NOT EXISTS posts_body_idx ON posts (body)$$);
SELECT count(*) AS pending FROM insta_id.pending_migrations();
SELECT count(*) AS drift FROM insta_id.shard_drift('mt');

-- Bad arguments, each refused before anything is done.
CALL insta_id.migrate(NULL, 'mt', 'SELECT 1');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.migrate('', 'mt', 'SELECT 1');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.migrate('x', 'mt', 'SELECT 1', lock_retries => -1);
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.migrate('x', 'mt', 'SELECT 1', lock_timeout => 'soon');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.migrate('x', 'no_such_schema', 'SELECT 1');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.migrate('x', 'insta101', 'SELECT 1');
\echo :LAST_ERROR_SQLSTATE
-- Inside a transaction block COMMIT is impossible: refused before anything runs.
BEGIN;
CALL insta_id.migrate('0006_in_block', 'mt', 'CREATE TABLE in_block ()');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS recorded FROM insta_id_admin.migrations WHERE name = '0006_in_block';
-- Not for PUBLIC.
CREATE ROLE insta_id_regress_migrator;
SET ROLE insta_id_regress_migrator;
CALL insta_id.migrate('0007', 'mt', 'SELECT 1');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) > 0 AS reads_history FROM insta_id.applied_migrations();
SELECT count(*) > 0 AS reads_names FROM insta_id.migrations();
SELECT count(*) AS reads_pending FROM insta_id.pending_migrations();
SELECT count(*) FROM insta_id_admin.applied_migrations;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE insta_id_regress_migrator;

-- drop_shard takes its history with it.
SELECT insta_id.drop_shard(106, force => true);
SELECT count(*) FROM insta_id_admin.applied_migrations WHERE schema_name = 'insta106';
