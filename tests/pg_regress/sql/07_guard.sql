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
