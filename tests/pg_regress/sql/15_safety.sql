-- What a helper must never do, whoever calls it (issue 23's cases 4 to 8,
-- each of which 0.8.0 got wrong): write into another schema, lose rows a
-- policy hides, drop what it was not asked to, take a name for part of
-- another, cut a quoted template's names, or migrate another template's
-- shards. (Cases 1 to 3, a template owner's code run by a superuser:
-- 13_hostile.)
SET client_min_messages = warning;
SELECT count(*) >= 0 AS clean FROM (SELECT insta_id.drop_shard(shard_id, force => true) FROM insta_id.shards()) d;

-- Case 4: a shard whose schema is gone stops migrate, naming it; nothing is
-- written elsewhere, whatever the caller's search_path holds.
CREATE SCHEMA c4tmpl;
CREATE TABLE c4tmpl.t (v int);
SELECT insta_id.create_shards(401, 402, 'c4tmpl');
DROP SCHEMA insta402 CASCADE;
SET search_path = c4tmpl, public;
CALL insta_id.migrate('c4', 'c4tmpl', 'INSERT INTO t VALUES (1)');
\echo :LAST_ERROR_SQLSTATE
RESET search_path;
SELECT (SELECT count(*) FROM c4tmpl.t) AS template_rows, (SELECT count(*) FROM insta401.t) AS shard_401_rows;
SELECT schema_name FROM insta_id_admin.applied_migrations WHERE migration = 'c4' ORDER BY 1;
-- Unregistered, the shard is no longer the migration's: it finishes.
SELECT insta_id.drop_shard(402);
CALL insta_id.migrate('c4', 'c4tmpl', 'INSERT INTO t VALUES (1)');
SELECT count(*) AS pending FROM insta_id.pending_migrations() WHERE migration = 'c4';

-- Case 5: a delegated administrator whose shard table hides its rows from
-- it (FORCE ROW LEVEL SECURITY) cannot drop the shard as if it were empty.
CREATE ROLE insta_id_regress_dba;
SELECT insta_id.grant_shard_admin('insta_id_regress_dba');
SELECT insta_id.create_shard(409);
ALTER SCHEMA insta409 OWNER TO insta_id_regress_dba;
CREATE TABLE insta409.secrets (v text);
INSERT INTO insta409.secrets VALUES ('kept');
ALTER TABLE insta409.secrets OWNER TO insta_id_regress_dba;
ALTER TABLE insta409.secrets ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY hide ON insta409.secrets USING (false);
SET ROLE insta_id_regress_dba;
SELECT count(*) AS rows_it_sees FROM insta409.secrets;
SELECT insta_id.drop_shard(409);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT v FROM insta409.secrets;
SELECT insta_id.drop_shard(409, force => true);

-- drop_shard never drops another schema's objects: a view, a foreign key, a
-- column of the shard's type, an operator elsewhere make it refuse (2BP01),
-- with force.
SELECT insta_id.create_shard(410);
CREATE TYPE insta410.mood AS ENUM ('ok');
CREATE TABLE insta410.users (id int PRIMARY KEY);
CREATE VIEW public.c_users AS SELECT id FROM insta410.users;
CREATE TABLE public.c_refs (user_id int REFERENCES insta410.users, m insta410.mood);
-- (an operator of the shard's own on its function is the shard's; one
-- elsewhere on it is not)
CREATE FUNCTION insta410.same(int, int) RETURNS boolean LANGUAGE sql IMMUTABLE RETURN $1 = $2;
CREATE OPERATOR insta410.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = insta410.same);
CREATE OPERATOR public.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = insta410.same);
SELECT insta_id.drop_shard(410, force => true);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS still_there FROM pg_class WHERE relname IN ('c_users', 'c_refs', 'users') AND relnamespace IN
    ('public'::regnamespace, 'insta410'::regnamespace);
DROP VIEW public.c_users;
DROP TABLE public.c_refs;
DROP OPERATOR public.=== (int, int);
SELECT insta_id.drop_shard(410, force => true);

-- Case 6: a body naming the template in any spelling is refused; a name
-- that merely contains the template's is not.
CREATE SCHEMA c6tmpl;
CREATE TABLE c6tmpl.audit (v int);
CREATE FUNCTION c6tmpl.log() RETURNS void LANGUAGE sql AS 'INSERT INTO "c6tmpl".audit VALUES (1)';
SELECT insta_id.create_shards(406, 406, 'c6tmpl');
\echo :LAST_ERROR_SQLSTATE
CREATE OR REPLACE FUNCTION c6tmpl.log() RETURNS void LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'INSERT INTO C6TMPL /* x */ . audit VALUES (1)'; END $$;
SELECT insta_id.create_shards(406, 406, 'c6tmpl');
\echo :LAST_ERROR_SQLSTATE
DROP SCHEMA c6tmpl CASCADE;
CREATE SCHEMA t;
CREATE TABLE t.events (id int);
CREATE FUNCTION t.last_event() RETURNS int LANGUAGE sql SET search_path = t AS 'SELECT max(evt.id) FROM events evt';
SELECT insta_id.create_shards(406, 406, 't');
SELECT insta406.last_event(), (SELECT proconfig FROM pg_proc WHERE oid = 'insta406.last_event()'::regprocedure);

-- Case 7: a quoted template's statistics keep their names; a CHECK naming
-- its table names the copy's in each copy, and one naming the template's
-- is a difference shard_drift finds.
CREATE SCHEMA "Tmpl";
CREATE TABLE "Tmpl".users (a int, b int);
CREATE STATISTICS "Tmpl".users_stats ON a, b FROM "Tmpl".users;
CREATE TABLE "Tmpl".refs (r oid CONSTRAINT refs_r_check CHECK (r <> '"Tmpl".users'::regclass));
SELECT insta_id.create_shards(407, 408, 'Tmpl');
SELECT stxname FROM pg_statistic_ext WHERE stxnamespace = 'insta407'::regnamespace;
SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'insta407.refs'::regclass;
ALTER TABLE insta408.refs DROP CONSTRAINT refs_r_check, ADD CONSTRAINT refs_r_check CHECK (r <> '"Tmpl".users'::regclass);
SELECT shard_id, object FROM insta_id.shard_drift('Tmpl');

-- Case 8: two templates; a migration reaches its own template's shards only.
CREATE SCHEMA ta;
CREATE TABLE ta.a (v int);
CREATE SCHEMA tb;
CREATE TABLE tb.b (v int);
SELECT insta_id.create_shards(411, 411, 'ta'), insta_id.create_shards(412, 412, 'tb');
SELECT shard_id, template_schema FROM insta_id.shards() WHERE shard_id IN (411, 412) ORDER BY 1;
CALL insta_id.migrate('a1', 'ta', 'ALTER TABLE a ADD COLUMN x int');
SELECT schema_name FROM insta_id_admin.applied_migrations WHERE migration = 'a1' ORDER BY 1;
SELECT shard_id, migration FROM insta_id.pending_migrations() WHERE migration = 'a1';
SELECT attname FROM pg_attribute WHERE attrelid = 'insta411.a'::regclass AND attname = 'x';

-- A template's populated materialized view: the copy is filled too (by
-- REFRESH, as its owner), not left empty.
CREATE SCHEMA mtmpl;
CREATE TABLE mtmpl.t (v int);
CREATE MATERIALIZED VIEW mtmpl.m AS SELECT 41 + 1 AS answer;
CREATE MATERIALIZED VIEW mtmpl.unfilled AS SELECT 1 AS one WITH NO DATA;
SELECT insta_id.create_shards(413, 413, 'mtmpl');
SELECT answer FROM insta413.m;
SELECT relname, relispopulated FROM pg_class WHERE relnamespace = 'insta413'::regnamespace AND relkind = 'm' ORDER BY 1;

SELECT count(*) >= 0 AS clean FROM (SELECT insta_id.drop_shard(shard_id, force => true) FROM insta_id.shards()) d;
DELETE FROM insta_id_admin.applied_migrations;
DELETE FROM insta_id_admin.migrations;
DROP SCHEMA c4tmpl, t, "Tmpl", ta, tb, mtmpl CASCADE;
DROP OWNED BY insta_id_regress_dba;
DROP ROLE insta_id_regress_dba;
