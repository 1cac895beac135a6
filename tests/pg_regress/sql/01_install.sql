-- CREATE EXTENSION puts everything in schema insta_id, which cannot move.
CREATE EXTENSION insta_id;
SELECT extname, extnamespace::regnamespace AS schema, extrelocatable
FROM pg_extension WHERE extname = 'insta_id';
ALTER EXTENSION insta_id SET SCHEMA public;
\echo :LAST_ERROR_SQLSTATE

-- Every function with its declared volatility (i/s/v), parallel safety
-- (s/u) and strictness.
SELECT p.oid::regprocedure AS function, provolatile AS vol, proparallel AS par, proisstrict AS strict
FROM pg_proc p WHERE pronamespace = 'insta_id'::regnamespace
ORDER BY p.oid::regprocedure::text;

-- PUBLIC may use the schema and call the functions.
SELECT has_schema_privilege('public', 'insta_id', 'USAGE') AS schema_usage,
       bool_and(has_function_privilege('public', p.oid, 'EXECUTE')) AS execute_all
FROM pg_proc p WHERE pronamespace = 'insta_id'::regnamespace;
