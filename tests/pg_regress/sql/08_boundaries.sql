-- Boundary values of every argument: a correct result or a documented
-- SQLSTATE, never a wrong ID.
SET TIME ZONE 'UTC';
CREATE SEQUENCE b;
-- Shard ids at both ends, and at the ends of int (-1 and 8192: 04_errors;
-- 22003 before nextval: no value used).
SELECT insta_id.shard_id(insta_id.next_id(0, 'b')) AS first, insta_id.shard_id(insta_id.next_id(8191, 'b')) AS last;
SELECT insta_id.next_id(2147483647, 'b');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(-2147483648, 'b');
\echo :LAST_ERROR_SQLSTATE
SELECT last_value FROM b;
SELECT insta_id.min_id(now(), -1);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.max_id(now(), 8192);
\echo :LAST_ERROR_SQLSTATE
-- Decoding the extreme IDs: every bit pattern decodes (the time field as unsigned).
SELECT id, p.* FROM (VALUES (0::bigint), (1), (-1), (9223372036854775807), (-9223372036854775808)) v(id),
       insta_id.id_parts(id) p ORDER BY id;
-- Timestamps: the epoch itself, the sign flip, the last ms of the field, one
-- ms past it, and the infinities (one ms before the epoch: 04_errors).
SELECT insta_id.min_id('2011-08-24 21:07:01.721+00') AS at_epoch, insta_id.max_id('2011-08-24 21:07:01.721+00') AS max_at_epoch;
SELECT insta_id.max_id('2046-06-27 17:00:49.496+00') AS last_positive, insta_id.min_id('2046-06-27 17:00:49.497+00') AS first_negative;
SELECT insta_id.created_at(insta_id.min_id('2046-06-27 17:00:49.497+00')) AS sign_flip_decodes;
SELECT insta_id.created_at(insta_id.max_id('2081-04-30 12:54:37.272+00')) AS last_ms_decodes;
SELECT insta_id.min_id('2081-04-30 12:54:37.273+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.min_id('infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.max_id('-infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.min_id('infinity', 5);
\echo :LAST_ERROR_SQLSTATE
-- Explicit epochs at both limits, and past them.
SELECT insta_id.min_id('1970-01-01 00:00:00.001+00', '1970-01-01 00:00+00'::timestamptz) AS one_ms_after_1970;
SELECT (insta_id.id_parts(8388608, '9999-12-31 23:59:59.999+00')).created_at AS one_ms_after_9999;
SELECT insta_id.id_parts(1, '9999-12-31 23:59:59.999001+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.id_parts(1, '10000-01-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.id_parts(1, 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.min_id(now(), '-infinity'::timestamptz);
\echo :LAST_ERROR_SQLSTATE
SET insta_id.epoch = '253402300799999';
SHOW insta_id.epoch;
SET insta_id.epoch = '253402300800000';
\echo :LAST_ERROR_SQLSTATE
SET insta_id.epoch = '0';
SELECT insta_id.epoch();
RESET insta_id.epoch;
-- Sequences of every shape. The seq field is nextval % 1024.
CREATE SEQUENCE cyc MAXVALUE 1025 START 1024 CYCLE;
SELECT insta_id.seq_id(insta_id.next_id(1, 'cyc')) FROM generate_series(1, 3);
CREATE SEQUENCE maxed MAXVALUE 2;
SELECT insta_id.seq_id(insta_id.next_id(1, 'maxed')) FROM generate_series(1, 2);
SELECT insta_id.next_id(1, 'maxed');
\echo :LAST_ERROR_SQLSTATE
CREATE SEQUENCE huge INCREMENT 4611686018427387904 MINVALUE 0 START 0;
SELECT insta_id.seq_id(insta_id.next_id(1, 'huge')) FROM generate_series(1, 2);
SELECT insta_id.next_id(1, 'huge');
\echo :LAST_ERROR_SQLSTATE
CREATE SEQUENCE down INCREMENT -1 MINVALUE 0 MAXVALUE 3 START 3;
SELECT insta_id.seq_id(insta_id.next_id(1, 'down')) FROM generate_series(1, 4);
SELECT insta_id.next_id(1, 'down');
\echo :LAST_ERROR_SQLSTATE
CREATE SEQUENCE crosses_zero INCREMENT -1 MINVALUE -1 MAXVALUE 0 START 0;
SELECT insta_id.seq_id(insta_id.next_id(1, 'crosses_zero'));
SELECT insta_id.next_id(1, 'crosses_zero');
\echo :LAST_ERROR_SQLSTATE
CREATE TEMPORARY SEQUENCE tmp_seq;
SELECT insta_id.seq_id(insta_id.next_id(1, 'tmp_seq'));
CREATE UNLOGGED SEQUENCE unlogged_seq;
SELECT insta_id.seq_id(insta_id.next_id(1, 'unlogged_seq'));
CREATE TABLE ident (id bigint GENERATED ALWAYS AS IDENTITY, x int);
SELECT insta_id.seq_id(insta_id.next_id(1, pg_get_serial_sequence('ident', 'id')::regclass));
SELECT x FROM ident;
-- A sequence dropped after its OID was taken: 42P01, like nextval.
CREATE SEQUENCE gone;
SELECT 'gone'::regclass::oid AS gone_oid \gset
DROP SEQUENCE gone;
\set VERBOSITY sqlstate
SELECT insta_id.next_id(1, :gone_oid::oid::regclass);
\set VERBOSITY default
-- Not a sequence: an index, a view (a table: 04_errors).
CREATE TABLE plain (x int PRIMARY KEY);
CREATE VIEW v AS SELECT 1 AS x;
SELECT insta_id.next_id(1, 'plain_pkey');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(1, 'v');
\echo :LAST_ERROR_SQLSTATE
-- OID 0 (InvalidOid) is no relation either: 42P01, not an internal error.
SELECT insta_id.next_id(1, 0::oid::regclass);
\echo :LAST_ERROR_SQLSTATE
-- Nor is a sequence dropped after this session used it (its OID was known
-- to be a sequence): 42P01, not nextval's internal error. Recreated under
-- its name, it works.
CREATE SEQUENCE gone;
SELECT insta_id.next_id(1, 'gone') > 0 AS minted, 'gone'::regclass::oid AS gone_oid \gset
DROP SEQUENCE gone;
\set VERBOSITY sqlstate
SELECT insta_id.next_id(1, :gone_oid::oid::regclass);
\set VERBOSITY default
CREATE SEQUENCE gone;
SELECT insta_id.next_id(1, 'gone') > 0 AS minted_again;
DROP SEQUENCE gone;
-- The high-water mark is past every ID the server issued.
SELECT insta_id.high_water_mark() >= insta_id.created_at(insta_id.next_id(1, 'b')) AS mark_covers_the_newest_id;
-- Raising it (a shard moved in from a server whose clock is ahead): the
-- mark on disk covers it and the next ID of every sequence is later.
SELECT clock_timestamp() + interval '300 ms' AS raise_to \gset
SELECT insta_id.raise_high_water_mark(:'raise_to') >= :'raise_to' AS mark_raised,
       insta_id.high_water_mark() >= :'raise_to' AS on_disk;
SELECT insta_id.created_at(insta_id.next_id(1, 'b')) > :'raise_to' AS next_id_after_it,
       insta_id.created_at(insta_id.next_id(2, 'tmp_seq')) > :'raise_to' AS other_sequence_too;
-- A mark in the past changes nothing; never lowered.
SELECT insta_id.raise_high_water_mark('2020-01-01') >= :'raise_to' AS never_lowered;
-- At most insta_id.max_lead + slack ahead of the clock (22023): slack is a
-- minute by default, enough for a move, so a typo of an hour is refused;
-- the caller may give less or more, up to an hour (22023 beyond, or below
-- zero). Inside the time field (22008).
SELECT insta_id.raise_high_water_mark(clock_timestamp() + interval '61 minutes');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.raise_high_water_mark(clock_timestamp() + interval '2 minutes');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.raise_high_water_mark(clock_timestamp() + interval '2 minutes', slack => interval '30 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.raise_high_water_mark(clock_timestamp() + interval '500 ms', slack => interval '0') IS NOT NULL AS within_max_lead;
SELECT insta_id.raise_high_water_mark(now(), slack => interval '61 minutes');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.raise_high_water_mark(now(), slack => interval '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.raise_high_water_mark(now(), NULL) IS NULL AS strict_slack;
SELECT insta_id.raise_high_water_mark('1960-01-01');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.raise_high_water_mark(NULL) IS NULL AS strict;
DROP TABLE ident, plain;
DROP VIEW v;
DROP SEQUENCE b, cyc, maxed, huge, down, crosses_zero, tmp_seq, unlogged_seq;
