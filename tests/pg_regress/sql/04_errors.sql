-- Every error a user can meet, with its SQLSTATE.
SET TIME ZONE 'UTC';
CREATE SEQUENCE s;
CREATE TABLE t (x int);
SELECT insta_id.next_id(8192, 's');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(-1, 's');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(1, 't');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(1, 'no_such_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(1, 4000000000::oid::regclass);
\echo :LAST_ERROR_SQLSTATE
CREATE SEQUENCE neg MINVALUE -10 START -5;
SELECT insta_id.next_id(1, 'neg');
\echo :LAST_ERROR_SQLSTATE
-- No privilege on the sequence: what nextval() says.
CREATE ROLE insta_id_regress_nobody;
GRANT USAGE ON SCHEMA public TO insta_id_regress_nobody;
SET ROLE insta_id_regress_nobody;
SELECT insta_id.next_id(1, 's');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- A read-only transaction (as on a hot standby): 25006, as nextval() gives.
BEGIN READ ONLY;
SELECT insta_id.next_id(1, 's');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Times the 41-bit field cannot hold.
SELECT insta_id.min_id('2011-08-24 21:07:01.720+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.max_id('2081-04-30 12:54:37.273+00');
\echo :LAST_ERROR_SQLSTATE
-- The last millisecond still works; its IDs are negative (sign bit set).
SELECT insta_id.min_id('2081-04-30 12:54:37.272+00') < 0 AS negative;
SELECT insta_id.min_id(now(), 8192);
\echo :LAST_ERROR_SQLSTATE
-- Explicit epochs must be whole milliseconds within 1970..9999.
SELECT insta_id.id_parts(1, '2011-01-01 00:00:00.0005+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.id_parts(1, '1969-12-31 23:59:59+00');
\echo :LAST_ERROR_SQLSTATE
-- A clock before the epoch (here: an epoch in the future).
SET insta_id.epoch = '4102444800000';
SELECT insta_id.next_id(1, 's');
\echo :LAST_ERROR_SQLSTATE
RESET insta_id.epoch;
-- A record declared with other columns than the library forms (SQL and
-- library of different releases): refused, never formed from the wrong
-- number of values.
CREATE FUNCTION id_parts_other_sql(id bigint, OUT created_at timestamptz, OUT shard_id int)
  LANGUAGE c IMMUTABLE STRICT AS '$libdir/insta_id', 'insta_id_id_parts';
SELECT * FROM id_parts_other_sql(1);
\echo :LAST_ERROR_SQLSTATE
DROP FUNCTION id_parts_other_sql;
DROP OWNED BY insta_id_regress_nobody;
DROP ROLE insta_id_regress_nobody;
