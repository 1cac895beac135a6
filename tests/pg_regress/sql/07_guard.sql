-- How far the duplicate guard reaches depends on the server (README,
-- "Guarantees"), so this file has one expected output per kind of server:
--   07_guard.out    preloaded (any version): shared memory
--   07_guard_1.out  PostgreSQL 17+, not preloaded: the DSM registry
--   07_guard_2.out  PostgreSQL 15/16, not preloaded: per session
-- as_promised pins which one applies, so no server passes with another's.
SELECT insta_id.guard_mode(),
       insta_id.guard_mode() = CASE
         WHEN current_setting('shared_preload_libraries') ~ '\minsta_id\M'
           OR current_setting('server_version_num')::int >= 170000 THEN 'shared'
         ELSE 'session' END AS as_promised;

-- insta_id.require_shared_guard: with a per-session guard, next_id refuses
-- to run (55000), before taking a sequence value.
CREATE SEQUENCE guard_seq;
SET insta_id.require_shared_guard = on;
SELECT insta_id.shard_id(insta_id.next_id(3, 'guard_seq'));
\echo :LAST_ERROR_SQLSTATE
SELECT last_value, is_called FROM guard_seq;
RESET insta_id.require_shared_guard;
SELECT insta_id.shard_id(insta_id.next_id(3, 'guard_seq'));
DROP SEQUENCE guard_seq;

-- The size of the preloaded guard is a server-start setting; it exists only
-- when preloaded.
SHOW insta_id.max_sequences;

-- CREATE EXTENSION warns when the guard is per session.
CREATE DATABASE insta_id_regress_guard;
\c insta_id_regress_guard
CREATE EXTENSION insta_id;
\c insta_id_regress
DROP DATABASE insta_id_regress_guard;

-- The high-water mark is a sequence of the extension, its configuration
-- (pg_dump writes its value), owned by the extension's owner, no grants.
SELECT extconfig::regclass[] AS configuration FROM pg_extension WHERE extname = 'insta_id';
SELECT relkind, relacl IS NULL AS owner_only,
       pg_get_userbyid(relowner) = (SELECT pg_get_userbyid(extowner) FROM pg_extension WHERE extname = 'insta_id') AS extension_owner
FROM pg_class WHERE oid = 'insta_id_mark.high_water'::regclass;
-- It is what high_water_mark() shows, in milliseconds since 1970, and it
-- covers the last ID.
CREATE SEQUENCE mark_seq;
SELECT insta_id.created_at(insta_id.next_id(1, 'mark_seq')) <= insta_id.high_water_mark() AS covers,
       insta_id.high_water_mark() = to_timestamp((SELECT last_value FROM insta_id_mark.high_water) / 1000.0) AS same;
-- A read-only transaction may draw from a temporary sequence, but next_id
-- may have to renew the mark, a write: 25006 before anything, as nextval
-- gives for other sequences (and a hot standby for every one).
CREATE TEMP SEQUENCE temp_seq;
BEGIN READ ONLY;
SELECT insta_id.next_id(1, 'temp_seq');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
DROP SEQUENCE mark_seq;
