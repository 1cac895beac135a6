-- drop_shard never drops what lies outside the shard (issue 40), with force
-- or without: whatever DROP SCHEMA ... CASCADE would take along outside it,
-- by any kind of dependency and of any kind of object, is refused (2BP01)
-- and named; nothing is dropped. (The race with a CREATE in the shard:
-- tests/isolation/specs/drop_shard_create.spec.)
SET client_min_messages = warning;
\set SHOW_CONTEXT never
SELECT insta_id.create_shard(s) FROM generate_series(40, 43) s;
CREATE SCHEMA outside;
-- A partition in another schema (an automatic dependency), with rows.
CREATE TABLE insta40.events (at int) PARTITION BY RANGE (at);
CREATE TABLE outside.events_2020 PARTITION OF insta40.events FOR VALUES FROM (0) TO (100);
INSERT INTO insta40.events VALUES (1);
SELECT insta_id.drop_shard(40, force => true);
\echo :LAST_ERROR_SQLSTATE
-- A column outside of the shard's collation (a column, not its table).
CREATE COLLATION insta41.c FROM "C";
CREATE TABLE outside.keep (k int, v text COLLATE insta41.c);
SELECT insta_id.drop_shard(41);
\echo :LAST_ERROR_SQLSTATE
-- A statistics object outside on the shard's table, a text search
-- configuration outside using its dictionary, a view outside on its
-- function, a cast (schemaless) through its function.
CREATE TABLE insta42.t (a int, b int);
CREATE STATISTICS outside.t_ab ON a, b FROM insta42.t;
CREATE TEXT SEARCH DICTIONARY insta42.d (TEMPLATE = simple);
CREATE TEXT SEARCH CONFIGURATION outside.cfg (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION outside.cfg ALTER MAPPING FOR asciiword WITH insta42.d;
CREATE FUNCTION insta42.f(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1';
CREATE VIEW outside.v AS SELECT insta42.f(1) AS x;
CREATE TYPE insta42.e AS ENUM ('a');
CREATE FUNCTION insta42.e_int(insta42.e) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1';
CREATE CAST (insta42.e AS int) WITH FUNCTION insta42.e_int(insta42.e);
SELECT insta_id.drop_shard(42, force => true);
\echo :LAST_ERROR_SQLSTATE
-- Operators and their families: an operator class outside whose family
-- member is the shard's operator.
CREATE FUNCTION insta43.lt(int, int) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT $1 < $2';
CREATE OPERATOR insta43.<<< (LEFTARG = int, RIGHTARG = int, FUNCTION = insta43.lt);
CREATE OPERATOR FAMILY outside.fam USING btree;
ALTER OPERATOR FAMILY outside.fam USING btree ADD OPERATOR 1 insta43.<<< (int, int);
SELECT insta_id.drop_shard(43);
\echo :LAST_ERROR_SQLSTATE

-- Default privileges for the shard's schema, which any role may set for
-- its own objects there: the shard's (they go with it), never a refusal.
CREATE ROLE insta_id_regress_nobody;
SET ROLE insta_id_regress_nobody;
ALTER DEFAULT PRIVILEGES IN SCHEMA insta40 GRANT SELECT ON TABLES TO PUBLIC;
RESET ROLE;

-- Nothing was dropped, every shard is still registered.
SELECT count(*) AS rows_outside FROM outside.events_2020;
SELECT attname FROM pg_attribute WHERE attrelid = 'outside.keep'::regclass AND attnum > 0 ORDER BY attnum;
SELECT count(*) AS outside_objects FROM pg_depend d
WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = 'outside'::regnamespace;
SELECT string_agg(shard_id::text, ' ' ORDER BY shard_id) AS registered FROM insta_id.shards() WHERE shard_id BETWEEN 40 AND 43;

-- What lies inside goes: partitions, TOAST tables, indexes, sequences, a
-- publication's hold on the shard's tables and schema (the publication
-- stays), once what lies outside is gone.
DROP TABLE outside.events_2020;
CREATE TABLE insta40.events_2021 PARTITION OF insta40.events FOR VALUES FROM (100) TO (200);
CREATE TABLE insta40.docs (id bigserial PRIMARY KEY, body text);
SET client_min_messages = error;  -- (whatever wal_level is)
CREATE PUBLICATION shard_pub FOR TABLES IN SCHEMA insta41;
SET client_min_messages = warning;
ALTER PUBLICATION shard_pub ADD TABLE insta40.docs;
ALTER TABLE outside.keep DROP COLUMN v;
DROP STATISTICS outside.t_ab;
DROP TEXT SEARCH CONFIGURATION outside.cfg;
DROP VIEW outside.v;
DROP CAST (insta42.e AS int);
DROP OPERATOR FAMILY outside.fam USING btree;
SELECT insta_id.drop_shard(s, force => true) FROM generate_series(40, 43) s;
SELECT count(*) AS shards_left FROM insta_id.shards() WHERE shard_id BETWEEN 40 AND 43;
SELECT pubname FROM pg_publication WHERE pubname = 'shard_pub';
SELECT count(*) AS outside_objects FROM pg_depend d
WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = 'outside'::regnamespace;
SELECT count(*) AS default_privileges_left FROM pg_default_acl WHERE defaclrole = 'insta_id_regress_nobody'::regrole;
DROP ROLE insta_id_regress_nobody;
DROP PUBLICATION shard_pub;
DROP SCHEMA outside CASCADE;
