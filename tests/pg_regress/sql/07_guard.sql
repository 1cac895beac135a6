-- Every server's guard is shared by its sessions (README, "Guarantees"):
-- in shared memory when preloaded, else in the DSM registry (17+) or a
-- segment published in the data directory (15 and 16). What differs is the
-- preloaded guard's size setting, so this file has one expected output per
-- kind of server:
--   07_guard.out    preloaded (any version)
--   07_guard_1.out  not preloaded (any version)
SELECT insta_id.guard_mode();

-- insta_id.require_shared_guard has no effect since 0.10.0 (0.9.0 kept the
-- guard per session on 15 and 16 without preloading, and this made next_id
-- refuse): a setting of it stays valid, and next_id mints.
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

-- CREATE EXTENSION says nothing (0.9.0 warned where the guard was per
-- session).
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
