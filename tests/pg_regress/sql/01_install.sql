-- CREATE EXTENSION puts everything in schema insta_id, which cannot move.
-- (It says nothing on any server: 07_guard checks that.)
SET client_min_messages = error;
CREATE EXTENSION insta_id;
RESET client_min_messages;
SELECT extname, extnamespace::regnamespace AS schema, extrelocatable
FROM pg_extension WHERE extname = 'insta_id';
ALTER EXTENSION insta_id SET SCHEMA public;
\echo :LAST_ERROR_SQLSTATE

-- Every function with its declared volatility (i/s/v), parallel safety
-- (s/u) and strictness.
SELECT p.oid::regprocedure AS function, provolatile AS vol, proparallel AS par, proisstrict AS strict
FROM pg_proc p WHERE pronamespace = 'insta_id'::regnamespace
ORDER BY p.oid::regprocedure::text;

-- PUBLIC may use the schema and call every ID function; the shard DDL
-- helpers are for superusers and roles granted them.
SELECT has_schema_privilege('public', 'insta_id', 'USAGE') AS schema_usage,
       bool_and(has_function_privilege('public', p.oid, 'EXECUTE')) AS execute_all_c_functions
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE pronamespace = 'insta_id'::regnamespace AND l.lanname = 'c';
SELECT p.oid::regprocedure AS not_for_public
FROM pg_proc p WHERE pronamespace = 'insta_id'::regnamespace
  AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
ORDER BY p.oid::regprocedure::text;
