-- Least privilege at every place PostgreSQL evaluates code (issue 40): the
-- sites of tests/fixtures/evaluation_sites.sql, planted by the application
-- role in a template whose schema the DBA owns and lets it CREATE in (as an
-- ORM's migrations need), and in its shards. A superuser runs every helper
-- over them: no site may run with rights its owner lacks, and every site
-- must have run, as its owner, or this test proves nothing.
SET client_min_messages = warning;
\set SHOW_CONTEXT never
CREATE ROLE insta_id_regress_site;
SELECT format('GRANT CREATE ON DATABASE %I TO insta_id_regress_site', current_database()) \gexec
CREATE SCHEMA sites_tmpl;
GRANT USAGE, CREATE ON SCHEMA sites_tmpl TO insta_id_regress_site;
SET ROLE insta_id_regress_site;
\getenv fixtures INSTA_ID_FIXTURES
\set ECHO none
\i :fixtures/evaluation_sites.sql
\set ECHO all
SELECT evaluation_sites.plant('sites_tmpl', 'template') AS planted_in_template;
RESET ROLE;

-- The copy: every object made by the one owner of the template's objects,
-- the schema given to the template schema's owner, with its grants.
SELECT insta_id.create_shards(601, 601, 'sites_tmpl');
CALL insta_id.create_shards_in_batches(602, 603, 'sites_tmpl', 1);
SELECT n.nspname, n.nspowner::regrole, n.nspacl FROM pg_namespace n
WHERE n.nspname IN ('sites_tmpl', 'insta601', 'insta603') ORDER BY 1;
SELECT DISTINCT insta_id._object_owner(d.classid, d.objid)::regrole AS owner_of_every_copied_object
FROM pg_depend d WHERE d.refclassid = 'pg_namespace'::regclass
  AND d.refobjid IN ('insta601'::regnamespace, 'insta603'::regnamespace) AND d.deptype = 'n';
-- What the copy evaluated (CHECK validated, index expressions and
-- predicates folded, the materialized view filled), and as whom.
SELECT DISTINCT site, who, superuser FROM evaluation_sites.seen ORDER BY 1;

-- The sites a copy refuses, planted in each shard and, the copies made, in
-- the template too (so that its migrations reach them).
SET ROLE insta_id_regress_site;
SELECT s AS schema, evaluation_sites.plant(s, 'shard') AS planted
FROM unnest('{sites_tmpl,insta601,insta602,insta603}'::name[]) s;
RESET ROLE;
\set VERBOSITY terse
SELECT insta_id.create_shards(604, 604, 'sites_tmpl');
\set VERBOSITY default

-- Every site reached by a migration of its own, run by the superuser over
-- the template and its three shards; then add_id_column's rewrite of every
-- table of a shard, a shard dropped, one locked for a move.
SELECT format('CALL insta_id.migrate(%L, %L, %L)', 'site_' || site, 'sites_tmpl', exercise)
FROM evaluation_sites.sites ORDER BY site \gexec
SELECT count(*) AS pending FROM insta_id.pending_migrations WHERE migration LIKE 'site\_%';
SELECT format('SELECT insta_id.add_id_column(%L) AS id_sequence', c.oid::regclass)
FROM pg_class c WHERE c.relnamespace = 'insta601'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname \gexec
SELECT insta_id.drop_shard(603, force => true);
SELECT insta_id.lock_shard_for_move(602), pg_advisory_unlock_all();

-- Nothing ran with rights its owner lacks, and every site ran.
SELECT site, who, superuser FROM evaluation_sites.seen WHERE superuser OR who <> 'insta_id_regress_site';
SELECT s.site, s.planted, EXISTS (SELECT FROM evaluation_sites.seen n WHERE n.site = s.site) AS ran
FROM evaluation_sites.sites s ORDER BY s.site;
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'insta_id_regress_site';

-- Without SET CONSTRAINTS a deferred trigger would fire at COMMIT, after the
-- security-restricted operation, as the caller: PostgreSQL refuses (42501).
CALL insta_id.migrate('site_deferred_at_commit', 'sites_tmpl', 'INSERT INTO s_deferred VALUES (2)');
\echo :LAST_ERROR_SQLSTATE

-- A schema whose objects have several owners: whoever ran its statements,
-- one owner's code would run with another's rights. Refused before anything
-- is made (42501), naming the objects of each owner.
CREATE SCHEMA mixed_tmpl;
CREATE TABLE mixed_tmpl.t (v int);
CREATE FUNCTION mixed_tmpl.dba_helper() RETURNS int LANGUAGE sql AS 'SELECT 1';
ALTER TABLE mixed_tmpl.t OWNER TO insta_id_regress_site;
SELECT insta_id.create_shards(605, 605, 'mixed_tmpl');
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.migrate('mixed', 'mixed_tmpl', 'INSERT INTO t VALUES (1)');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS nothing_made FROM insta_id.shard_registry WHERE shard_id = 605;
SELECT count(*) AS nothing_recorded FROM insta_id.migrations WHERE name = 'mixed';
-- Given to one role, which may create in the schema (itself staying the
-- DBA's): copied, and migrated as that role.
ALTER FUNCTION mixed_tmpl.dba_helper() OWNER TO insta_id_regress_site;
GRANT USAGE, CREATE ON SCHEMA mixed_tmpl TO insta_id_regress_site;
SELECT insta_id.create_shards(605, 605, 'mixed_tmpl');
CALL insta_id.migrate('mixed', 'mixed_tmpl', 'INSERT INTO t VALUES (current_user = ''insta_id_regress_site'')::int');
SELECT v AS ran_as_the_owner FROM insta605.t;
-- An owner of the objects who may not create in the template's schema
-- (nor, then, in a copy of it): refused before anything is made.
CREATE SCHEMA closed_tmpl;
CREATE TABLE closed_tmpl.t (v int);
ALTER TABLE closed_tmpl.t OWNER TO insta_id_regress_site;
SELECT insta_id.create_shards(606, 606, 'closed_tmpl');
\echo :LAST_ERROR_SQLSTATE

SELECT insta_id.drop_shard(s, force => true) FROM unnest('{601,602,605}'::int[]) s;
DELETE FROM insta_id.applied_migrations WHERE migration LIKE 'site\_%' OR migration = 'mixed';
DELETE FROM insta_id.migrations WHERE name LIKE 'site\_%' OR name = 'mixed';
DROP SCHEMA sites_tmpl, mixed_tmpl, closed_tmpl, evaluation_sites CASCADE;
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_site', current_database()) \gexec
DROP ROLE insta_id_regress_site;
