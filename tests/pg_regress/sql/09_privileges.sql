-- Who may do what (README, "Who may do what"): a role without rights is
-- refused every helper with 42501 (every setting: 05_settings); a delegated shard
-- administrator may not take over another role's schema; names built to
-- break quoting are handled verbatim by every helper.
SET client_min_messages = warning;
CREATE ROLE insta_id_regress_nobody;
CREATE ROLE insta_id_regress_admin;
CREATE ROLE insta_id_regress_other;
-- (as README, "Who may do what": one statement, and CREATE on the database)
SELECT insta_id.grant_shard_admin('insta_id_regress_admin');
SELECT format('GRANT CREATE ON DATABASE %I TO insta_id_regress_admin', current_database()) \gexec
-- Another role's schema, with a next_id column minting shard 77.
CREATE SCHEMA theirs AUTHORIZATION insta_id_regress_other;
CREATE SEQUENCE theirs.t_id_seq;
CREATE TABLE theirs.t (id bigint DEFAULT insta_id.next_id(77, 'theirs.t_id_seq'));
ALTER TABLE theirs.t OWNER TO insta_id_regress_other;
ALTER SEQUENCE theirs.t_id_seq OWNER TO insta_id_regress_other;

-- Without rights: every helper (every setting: 05_settings).
SET ROLE insta_id_regress_nobody;
SELECT insta_id.create_shard(70);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_shards(70, 71, 'theirs');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.add_id_column('theirs.t', 'id', 77);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.adopt_shard('theirs', 77);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_shard(70);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id._copy_planned('{}', 'x', 70);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id._run_in_schema('theirs', 'insta_id_regress_nobody', '{"SELECT 1"}');
\echo :LAST_ERROR_SQLSTATE
SELECT statements FROM insta_id_admin.migrations;
\echo :LAST_ERROR_SQLSTATE
CALL insta_id.create_shards_in_batches(70, 71, 'theirs');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO insta_id_admin.shard_registry VALUES (70, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.raise_high_water_mark(now());
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.lock_shard_for_move(70);
\echo :LAST_ERROR_SQLSTATE
-- The high-water mark's sequence is nobody's but its owner's: next_id
-- writes it as the owner; nobody lowers, reads or locks it directly.
SELECT setval('insta_id_mark.high_water', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT last_value FROM insta_id_mark.high_water;
\echo :LAST_ERROR_SQLSTATE
-- Nor queue a lock on it that writers would wait behind: its schema is
-- the extension owner's only, so the name does not resolve.
CREATE RULE r AS ON UPDATE TO insta_id_mark.high_water DO INSTEAD NOTHING;
\echo :LAST_ERROR_SQLSTATE
-- What everyone may do: decode, read the registry and the mark.
SELECT insta_id.shard_id(11637205501278089), count(*) >= 0 AS reads_registry,
       insta_id.high_water_mark() IS NOT NULL OR true AS reads_mark FROM insta_id.shards();
RESET ROLE;
-- A role with no right on the mark's sequence mints IDs (a renewal of the
-- mark runs as the sequence's owner), and the mark covering an ID of a
-- transaction that aborts stays.
SET ROLE insta_id_regress_other;
BEGIN;
INSERT INTO theirs.t DEFAULT VALUES RETURNING id AS aborted_id \gset
ROLLBACK;
SELECT insta_id.high_water_mark() >= insta_id.created_at(:aborted_id) AS covered_after_abort;
RESET ROLE;

-- A delegated administrator: may not adopt, fill, or drop another role's schema.
SET ROLE insta_id_regress_admin;
SELECT insta_id.adopt_shard('theirs', 77);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.add_id_column('theirs.t', 'id', 77);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_shard(70);
RESET ROLE;
SELECT count(*) AS theirs_registered FROM insta_id_admin.shard_registry WHERE schema_name = 'theirs';
-- A shard of the administrator's own, whose schema then passes to another role.
ALTER SCHEMA insta70 OWNER TO insta_id_regress_other;
SET ROLE insta_id_regress_admin;
SELECT insta_id.drop_shard(70);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT shard_id, schema_name FROM insta_id.shards() WHERE shard_id = 70;
-- A migration runs as each schema's owner: an administrator granted migrate
-- who is not a member of a shard's owner is refused at that shard (42501;
-- here shard 1, of a superuser, made by an earlier file), and the template
-- keeps it.
CREATE SCHEMA admins_tmpl AUTHORIZATION insta_id_regress_admin;
SET ROLE insta_id_regress_admin;
CALL insta_id.migrate('p1', 'admins_tmpl', 'CREATE TABLE t (v int)');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT schema_name, migration FROM insta_id_admin.applied_migrations WHERE migration = 'p1' ORDER BY 1;
DELETE FROM insta_id_admin.applied_migrations WHERE migration = 'p1';
DELETE FROM insta_id_admin.migrations WHERE name = 'p1';
DROP SCHEMA admins_tmpl CASCADE;
SELECT insta_id.drop_shard(70);

-- Names built to break quoting, in every helper argument.
SELECT insta_id.create_shard(71, 'x"; DROP SCHEMA theirs CASCADE; --');
SELECT insta_id.create_shard(72, $$it's a 'shard'$$);
CREATE TABLE "x""; DROP SCHEMA theirs CASCADE; --"."t"" ;--" (v text);
SELECT insta_id.add_id_column('"x""; DROP SCHEMA theirs CASCADE; --"."t"" ;--"', $$c'ol"; --$$);
INSERT INTO "x""; DROP SCHEMA theirs CASCADE; --"."t"" ;--" (v) VALUES ('a') RETURNING insta_id.shard_id("c'ol""; --");
CREATE SCHEMA "tem""plate'";
CREATE TABLE "tem""plate'"."ta""ble" (v text);
SELECT insta_id.add_id_column('"tem""plate''"."ta""ble"', 'id', 0);
SELECT insta_id.create_shards(73, 74, $$tem"plate'$$);
INSERT INTO insta73."ta""ble" (v) VALUES ('b') RETURNING insta_id.shard_id(id);
-- The procedure, by the delegated administrator (who may read the template).
GRANT USAGE ON SCHEMA "tem""plate'" TO insta_id_regress_admin;
GRANT SELECT ON ALL TABLES IN SCHEMA "tem""plate'" TO insta_id_regress_admin;
-- A copy is owned as the template is: not by a role the administrator may not act as.
SET ROLE insta_id_regress_admin;
CALL insta_id.create_shards_in_batches(75, 76, $$tem"plate'$$);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
ALTER SCHEMA "tem""plate'" OWNER TO insta_id_regress_admin;
ALTER TABLE "tem""plate'"."ta""ble" OWNER TO insta_id_regress_admin;
SET ROLE insta_id_regress_admin;
CALL insta_id.create_shards_in_batches(75, 76, $$tem"plate'$$);
RESET ROLE;
INSERT INTO insta76."ta""ble" (v) VALUES ('c') RETURNING insta_id.shard_id(id);
-- A template (while it has shards; or public, insta_id's schema, a system
-- schema) is never a shard.
SELECT insta_id.adopt_shard($$tem"plate'$$, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_shard(71, true), insta_id.drop_shard(72), insta_id.drop_shard(73, true), insta_id.drop_shard(74),
       insta_id.drop_shard(75), insta_id.drop_shard(76, true);
SELECT insta_id.adopt_shard('public', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.adopt_shard('pg_toast', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.adopt_shard('insta_id_admin', 0);
\echo :LAST_ERROR_SQLSTATE
CREATE SCHEMA "adopted ""one""";
SELECT insta_id.adopt_shard('adopted "one"', 0);
SELECT schema_name FROM insta_id.shards() WHERE shard_id = 0;
SELECT insta_id.drop_shard(0);
SELECT count(*) AS theirs_still_there FROM pg_namespace WHERE nspname = 'theirs';

-- What the administrator is given is what the helpers call, no more and no
-- less: the internal functions they reach (read from their bodies here)
-- against insta_id.shard_admin_privileges().
WITH RECURSIVE called AS (
    SELECT p.oid, p.prosrc FROM pg_proc p
    WHERE p.oid IN (SELECT to_regprocedure(substr(object, strpos(object, ' ') + 1))
                    FROM insta_id.shard_admin_privileges() WHERE object LIKE 'FUNCTION insta_id.%' AND object NOT LIKE '%.\_%'
                    UNION ALL
                    SELECT to_regprocedure(substr(object, strpos(object, ' ') + 1))
                    FROM insta_id.shard_admin_privileges() WHERE object LIKE 'PROCEDURE %')
    UNION
    SELECT q.oid, q.prosrc FROM called c, LATERAL (
        SELECT m[1] FROM regexp_matches(c.prosrc, 'insta_id\.(\w+)\(', 'g') m
        UNION ALL
        -- (what compiled code calls as its caller: src/registry.rs)
        SELECT x.callee FROM (VALUES ('insta_id_admin_write', '_admin_write_check')) x(symbol, callee)
        WHERE x.symbol = c.prosrc) n(name)
    JOIN pg_proc q ON q.proname = n.name AND q.pronamespace = 'insta_id'::regnamespace),
needed AS (SELECT c.oid FROM called c WHERE NOT has_function_privilege('public', c.oid, 'EXECUTE')),
listed AS (SELECT to_regprocedure(substr(object, strpos(object, ' ') + 1))::oid AS oid
           FROM insta_id.shard_admin_privileges() WHERE object LIKE 'FUNCTION %' OR object LIKE 'PROCEDURE %')
SELECT 'not listed' AS problem, oid::regprocedure FROM needed EXCEPT SELECT 'not listed', oid::regprocedure FROM listed
UNION ALL
SELECT 'listed, not called', oid::regprocedure FROM listed EXCEPT SELECT 'listed, not called', oid::regprocedure FROM needed;

-- And nothing more: a hostile administrator's attempts, one row each, each
-- refused with its SQLSTATE (a new attempt is a new row).
CREATE TABLE public.admin_attempts (attempt text, statement text);
INSERT INTO public.admin_attempts VALUES
('run SQL as a superuser', $$SELECT insta_id._run_in_schema('public', 'postgres', ARRAY['ALTER ROLE insta_id_regress_admin SUPERUSER'])$$),
('run SQL as another role', $$SELECT insta_id._run_in_schema('public', 'insta_id_regress_other', ARRAY['SELECT 1'])$$),
('a crafted copy plan', $$SELECT insta_id._copy_planned('{"template": "x", "extra": {"code_owner": "postgres", "types": ["ALTER ROLE insta_id_regress_admin SUPERUSER"]}}', 'public', 1)$$),
('a crafted plan giving new shards to a superuser', $$SELECT insta_id._create_copies('{"template": "x", "extra": {"schema_owner": "postgres"}}', ARRAY[78])$$),
('IDs ahead of the clock', $$SELECT insta_id.raise_high_water_mark(now() + interval '1 hour')$$),
('reset the guard''s counters', $$SELECT insta_id.guard_stats_reset()$$),
('fence a shard', $$SELECT insta_id.move_fence('theirs', 77)$$),
('open a copy''s fence', $$SELECT insta_id.move_open(77)$$),
('fence a sequence', $$SELECT insta_id._fence_sequence('theirs.s'::regclass, 'theirs', 77, 1, true)$$),
('record a move', $$SELECT insta_id.move_step(77, 'leaving', 'published', 'theirs', NULL)$$),
('delegate further', $$SELECT insta_id.grant_shard_admin('insta_id_regress_nobody')$$),
('register another role''s schema', $$SELECT insta_id.adopt_shard('theirs', 77)$$),
('a setting', $$SET insta_id.on_overflow = 'borrow'$$),
('the mark''s sequence', $$SELECT nextval('insta_id_mark.high_water')$$);
GRANT SELECT ON public.admin_attempts TO insta_id_regress_admin;
SET ROLE insta_id_regress_admin;
DO $$
DECLARE
    a record;
BEGIN
    FOR a IN SELECT * FROM public.admin_attempts ORDER BY attempt COLLATE "C" LOOP
        BEGIN
            EXECUTE a.statement;
            RAISE WARNING '%: done', a.attempt;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING '%: %', a.attempt, SQLSTATE;
        END;
    END LOOP;
END
$$;
RESET ROLE;
SELECT rolsuper AS admin_is_superuser FROM pg_roles WHERE rolname = 'insta_id_regress_admin';
DROP TABLE public.admin_attempts;

DROP SCHEMA theirs CASCADE;
SELECT insta_id.grant_shard_admin('insta_id_regress_admin', revoke => true);
SELECT count(*) AS left_to_admin FROM insta_id.shard_admin_privileges() p
WHERE CASE WHEN p.object LIKE 'TABLE %' THEN has_any_column_privilege('insta_id_regress_admin', substr(p.object, 7), 'SELECT, INSERT, UPDATE')
           WHEN p.object LIKE 'SCHEMA %' THEN has_schema_privilege('insta_id_regress_admin', substr(p.object, 8), 'USAGE')
           ELSE has_function_privilege('insta_id_regress_admin', to_regprocedure(substr(p.object, strpos(p.object, ' ') + 1)), 'EXECUTE') END;
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_admin', current_database()) \gexec
DROP OWNED BY insta_id_regress_admin;
DROP ROLE insta_id_regress_nobody, insta_id_regress_admin, insta_id_regress_other;
