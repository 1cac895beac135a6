-- A hostile template owner (issue 23): decoys of pg_catalog's functions and
-- operators, generated from the catalog (tests/fixtures/decoys.sql, so a
-- new call to a built-in is covered without anyone listing it), planted in
-- the template and in a shard by the application role, each logging who
-- called it, with the same and with more specific argument types (those
-- compete with pg_catalog's whatever the search_path order). A superuser
-- then runs every helper over them: no decoy may run with a superuser's
-- rights. (A move over such a shard: tests/tap/t/008_move.pl.)
SET client_min_messages = warning;
CREATE ROLE insta_id_regress_app;
SELECT format('GRANT CREATE ON DATABASE %I TO insta_id_regress_app', current_database()) \gexec
SET ROLE insta_id_regress_app;
\getenv fixtures INSTA_ID_FIXTURES
\set ECHO none
\i :fixtures/decoys.sql
\set ECHO all
CREATE SCHEMA htmpl;
CREATE TABLE htmpl.users (name text NOT NULL, email text, CHECK (length(name) > 0));
CREATE INDEX ON htmpl.users (lower(name));
CREATE VIEW htmpl.names AS SELECT upper(name) AS n FROM htmpl.users WHERE name <> '';
CREATE MATERIALIZED VIEW htmpl.counts AS SELECT count(*) AS n FROM htmpl.users;
CREATE FUNCTION htmpl.touch_extra() RETURNS trigger LANGUAGE plpgsql
AS $$ BEGIN PERFORM hostile.note('touch_extra'); RETURN NEW; END $$;
-- (a stored setting built to break out of a pasted ALTER FUNCTION ... SET)
SET search_path = htmpl, "x;ALTER/**/ROLE/**/insta_id_regress_app/**/SUPERUSER;--";
CREATE FUNCTION htmpl.touch() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$ BEGIN NEW.email := lower(NEW.email); RETURN NEW; END $$;
RESET search_path;
CREATE TRIGGER touch BEFORE INSERT ON htmpl.users FOR EACH ROW EXECUTE FUNCTION htmpl.touch();
RESET ROLE;
SELECT insta_id.add_id_column('htmpl.users', 'id', 0);
ALTER TABLE htmpl.users OWNER TO insta_id_regress_app;
ALTER SEQUENCE htmpl.users_id_seq OWNER TO insta_id_regress_app;
SET ROLE insta_id_regress_app;
-- (functions only: a template with operators is refused, below)
SELECT hostile.plant('htmpl', operators => false) > 3000 AS decoys_planted;
RESET ROLE;

-- The decoys work: a superuser who puts the template ahead of pg_catalog is caught.
SET search_path = htmpl, pg_catalog;
SELECT lower('X');
RESET search_path;
SELECT who, superuser, called FROM hostile.log WHERE superuser;
TRUNCATE hostile.log;

-- Every helper, by a superuser, over the hostile template and its shards.
SELECT insta_id.create_shards(301, 302, 'htmpl');
CALL insta_id.create_shards_in_batches(303, 304, 'htmpl', 1);
-- (the copy carries the decoys into every shard)
SELECT count(*) > 1000 AS decoys_in_a_shard FROM pg_proc WHERE pronamespace = 'insta301'::regnamespace;
-- Operators too, planted in the shard by its owner, and in the template:
-- which a copy then refuses (0A000: a copy does not hold operators), before
-- it reads anything with the template on search_path.
SET ROLE insta_id_regress_app;
SELECT hostile.plant('insta301') > 500 AS operators_planted, hostile.plant('htmpl') > 500 AS operators_in_template;
RESET ROLE;
\set VERBOSITY terse
SELECT insta_id.create_shards(306, 306, 'htmpl');
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SET search_path = public, pg_catalog;
CALL insta_id.migrate('h1', 'htmpl', 'ALTER TABLE users ADD COLUMN note text; UPDATE users SET note = lower(name)');
RESET search_path;
SELECT count(*) AS differences FROM insta_id.shard_drift('htmpl');
SET ROLE insta_id_regress_app;
INSERT INTO insta301.users (name, email) VALUES ('a', 'A@X') RETURNING insta_id.shard_id(id), email;
RESET ROLE;
CREATE TABLE insta301.extra (id int, v int);
ALTER TABLE insta301.extra OWNER TO insta_id_regress_app;
INSERT INTO insta301.extra VALUES (NULL, 1);
CREATE TRIGGER touch BEFORE UPDATE ON insta301.extra FOR EACH ROW EXECUTE FUNCTION insta301.touch_extra();
SELECT insta_id.add_id_column('insta301.extra');
SELECT insta_id.drop_shard(302, force => true);
SELECT insta_id.lock_shard_for_move(301), pg_advisory_unlock_all();
SELECT count(*) AS materialized_rows FROM insta301.counts;

-- Nothing ran as the superuser; the application role's own code ran as itself.
SELECT who, superuser, called FROM hostile.log WHERE superuser OR who <> 'insta_id_regress_app';
SELECT count(*) > 0 AS owner_code_ran_as_owner FROM hostile.log WHERE who = 'insta_id_regress_app';
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'insta_id_regress_app';
SELECT proconfig FROM pg_proc WHERE proname = 'touch' AND pronamespace = 'insta301'::regnamespace;

-- adopt_shard by a superuser over a shard of the hostile template.
DELETE FROM insta_id_admin.shard_registry WHERE shard_id = 303;
SELECT insta_id.adopt_shard('insta303', 303);
SELECT who, superuser, called FROM hostile.log WHERE superuser OR who <> 'insta_id_regress_app';

-- A schema named $user: search_path would read it as the role's name, so
-- statements would run in another schema. Refused.
SELECT insta_id.create_shard(305, '$user');
CREATE TABLE "$user".t (v int);
SELECT insta_id.add_id_column('"$user".t');
\echo :LAST_ERROR_SQLSTATE
-- So is drop_shard's check that its tables are empty (a read through the
-- gate, in that schema); with force nothing is read.
SELECT insta_id.drop_shard(305);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_shard(305, force => true);

SELECT insta_id.drop_shard(s, force => true) FROM generate_series(301, 304) s WHERE s <> 302;
DELETE FROM insta_id_admin.migrations WHERE name = 'h1';
DELETE FROM insta_id_admin.applied_migrations WHERE migration = 'h1';
DROP SCHEMA htmpl, hostile CASCADE;
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_app', current_database()) \gexec
DROP ROLE insta_id_regress_app;
