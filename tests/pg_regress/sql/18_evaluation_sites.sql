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
SELECT count(*) AS pending FROM insta_id.pending_migrations() WHERE migration LIKE 'site\_%';
SELECT format('SELECT insta_id.add_id_column(%L) AS id_sequence', c.oid::regclass)
FROM pg_class c WHERE c.relnamespace = 'insta601'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname \gexec
-- adopt_id_column's widening of a serial column in every table of a shard
-- (a rewrite: CHECKs, index expressions, generated columns evaluated).
SET ROLE insta_id_regress_site;
SELECT format('ALTER TABLE %s ADD COLUMN k serial', c.oid::regclass)
FROM pg_class c WHERE c.relnamespace = 'insta601'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname \gexec
RESET ROLE;
SELECT format('SELECT count(*) AS adopted_in_steps FROM insta_id.adopt_id_column(%L, %L)', c.oid::regclass, 'k')
FROM pg_class c WHERE c.relnamespace = 'insta601'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname \gexec
SELECT insta_id.drop_shard(603, force => true);
SELECT insta_id.lock_shard_for_move(602), pg_advisory_unlock_all();
-- shard_drift over the shards, and drop_shard's check that a shard is
-- empty (it reads every table through the gate; not empty: 55000).
SELECT count(*) >= 0 AS drift_read FROM insta_id.shard_drift('sites_tmpl');
\set VERBOSITY terse
SELECT insta_id.drop_shard(602);
\set VERBOSITY default

-- Nothing ran with rights its owner lacks, and every site ran.
SELECT site, who, superuser FROM evaluation_sites.seen WHERE superuser OR who <> 'insta_id_regress_site';
SELECT s.site, s.planted, EXISTS (SELECT FROM evaluation_sites.seen n WHERE n.site = s.site) AS ran
FROM evaluation_sites.sites s ORDER BY s.site;
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'insta_id_regress_site';

-- Code of the owner that leaves temporary objects behind: a domain
-- pg_temp.text would check every later text value of the superuser's
-- session with the owner's code (types resolve through pg_temp first). The
-- restricted operation refuses temporary tables, not types: insta_id
-- refuses any temporary object left (42501), and nothing of it remains.
-- (Planted by an index expression the copy folds, once the superuser has
-- set a flag: not into this session when the role makes the template.)
SET ROLE insta_id_regress_site;
CREATE SCHEMA temp_tmpl;
CREATE FUNCTION evaluation_sites.plant_temporary() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('evaluation_sites.plant_temporary', true) = 'on'
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_type y WHERE y.typnamespace = pg_catalog.pg_my_temp_schema() AND y.typname = 'text') THEN
        EXECUTE 'CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (evaluation_sites.note(''temporary_domain'') = 0)';
    END IF;
    RETURN 1;
END $$;
CREATE FUNCTION evaluation_sites.planted(int) RETURNS int LANGUAGE sql IMMUTABLE
AS 'SELECT evaluation_sites.plant_temporary() + $1';
CREATE TABLE temp_tmpl.t (v int);
CREATE INDEX ON temp_tmpl.t ((v + evaluation_sites.planted(0)));
RESET ROLE;
SET evaluation_sites.plant_temporary = on;
-- (PostgreSQL 15.20 refuses the type itself, 18.6 makes it and insta_id
-- refuses it: 42501 both)
\set VERBOSITY sqlstate
SELECT insta_id.create_shards(607, 607, 'temp_tmpl');
\set VERBOSITY default
SELECT 'x'::text AS a_text_value;
SELECT count(*) AS temporary_domains FROM pg_type WHERE typnamespace = pg_my_temp_schema() AND typtype = 'd';
SELECT site, who, superuser FROM evaluation_sites.seen WHERE site = 'temporary_domain';
RESET evaluation_sites.plant_temporary;
DROP SCHEMA temp_tmpl CASCADE;

-- A type named like pg_catalog's (a domain regclass over regclass) in a
-- schema where another role may create: add_id_column's statements name
-- pg_catalog's types, never one resolved through the schema; and the gate
-- refuses (42501) to run anything with that schema first on search_path
-- while another role's objects are in it, naming them.
CREATE SCHEMA regclass_tmpl;
GRANT USAGE, CREATE ON SCHEMA regclass_tmpl TO insta_id_regress_site;
CREATE TABLE regclass_tmpl.t (v int);
INSERT INTO regclass_tmpl.t VALUES (1), (2);
SET ROLE insta_id_regress_site;
CREATE DOMAIN regclass_tmpl.regclass AS pg_catalog.regclass CHECK (evaluation_sites.note('regclass_domain') = 0);
RESET ROLE;
SELECT insta_id.add_id_column('regclass_tmpl.t', 'id', 9);
\echo :LAST_ERROR_SQLSTATE
SELECT pg_get_expr(d.adbin, d.adrelid) AS id_default FROM pg_attrdef d WHERE d.adrelid = 'regclass_tmpl.t'::regclass;
SELECT site, who, superuser FROM evaluation_sites.seen WHERE site = 'regclass_domain';
DROP SCHEMA regclass_tmpl CASCADE;

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
SELECT count(*) AS nothing_made FROM insta_id_admin.shard_registry WHERE shard_id = 605;
SELECT count(*) AS nothing_recorded FROM insta_id_admin.migrations WHERE name = 'mixed';
-- Given to one role, which may create in the schema (itself staying the
-- DBA's): copied, and migrated as that role.
ALTER FUNCTION mixed_tmpl.dba_helper() OWNER TO insta_id_regress_site;
GRANT USAGE, CREATE ON SCHEMA mixed_tmpl TO insta_id_regress_site;
SELECT insta_id.create_shards(605, 605, 'mixed_tmpl');
CALL insta_id.migrate('mixed', 'mixed_tmpl', 'INSERT INTO t VALUES (current_user = ''insta_id_regress_site'')::int');
SELECT v AS ran_as_the_owner FROM insta605.t;
-- An owner of the objects who may not create in the template's schema
-- (nor, then, in a copy of it), with USAGE or without: refused before
-- anything is made.
CREATE SCHEMA closed_tmpl;
CREATE TABLE closed_tmpl.t (v int);
ALTER TABLE closed_tmpl.t OWNER TO insta_id_regress_site;
SELECT insta_id.create_shards(606, 606, 'closed_tmpl');
\echo :LAST_ERROR_SQLSTATE
GRANT USAGE ON SCHEMA closed_tmpl TO insta_id_regress_site;
SELECT insta_id.create_shards(606, 606, 'closed_tmpl');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS nothing_made FROM pg_namespace WHERE nspname = 'insta606';
-- Code elsewhere that the schema's objects use, owned by another role (a
-- trigger function attached by a role granted TRIGGER, a CHECK calling
-- another's function): it would run as the objects' owner. Refused, named.
CREATE SCHEMA other_code;
CREATE FUNCTION other_code.positive(int) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT $1 > 0';
CREATE TABLE closed_tmpl.u (v int CHECK (other_code.positive(v)));
ALTER TABLE closed_tmpl.u OWNER TO insta_id_regress_site;
GRANT CREATE ON SCHEMA closed_tmpl TO insta_id_regress_site;
SELECT insta_id._code_owner('closed_tmpl') AS superusers_code_counts_not;
CREATE ROLE insta_id_regress_other_coder;
ALTER FUNCTION other_code.positive(int) OWNER TO insta_id_regress_other_coder;
SELECT insta_id.create_shards(606, 606, 'closed_tmpl');
\echo :LAST_ERROR_SQLSTATE
DROP SCHEMA other_code CASCADE;
DROP ROLE insta_id_regress_other_coder;

SELECT insta_id.drop_shard(s, force => true) FROM unnest('{601,602,605}'::int[]) s;
DELETE FROM insta_id_admin.applied_migrations WHERE migration LIKE 'site\_%' OR migration = 'mixed';
DELETE FROM insta_id_admin.migrations WHERE name LIKE 'site\_%' OR name = 'mixed';
DROP SCHEMA sites_tmpl, mixed_tmpl, closed_tmpl, evaluation_sites CASCADE;
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_site', current_database()) \gexec
DROP ROLE insta_id_regress_site;
