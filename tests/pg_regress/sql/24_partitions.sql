-- insta_id.create_partitions / drop_partitions: range partitions of a
-- table on its ID, one per period of the time inside the ID.
CREATE SCHEMA parts;
CREATE SEQUENCE parts.events_id_seq;
CREATE TABLE parts.events (id bigint NOT NULL DEFAULT insta_id.next_id(3, 'parts.events_id_seq'), what text,
                           PRIMARY KEY (id)) PARTITION BY RANGE (id);
-- Thirteen months, made ahead from 2026-01-15: January's partition and
-- the twelve after it, each FROM its first ID TO the next month's.
SELECT part, made_from AT TIME ZONE 'UTC' AS made_from, made_before AT TIME ZONE 'UTC' AS made_before, created
FROM insta_id.create_partitions('parts.events', '1 month', '1 year', '2026-01-15 12:00+00');
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bounds,
       pg_get_expr(c.relpartbound, c.oid) = format('FOR VALUES FROM (''%s'') TO (''%s'')',
           insta_id.min_id('2026-02-01 00:00+00'), insta_id.min_id('2026-03-01 00:00+00')) AS bounds_are_min_ids
FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
WHERE h.inhparent = 'parts.events'::regclass AND c.relname = 'events_p20260201';
-- Again, and with a start inside a month already made: nothing new.
SELECT count(*) AS partitions, count(*) FILTER (WHERE created) AS created
FROM insta_id.create_partitions('parts.events', '1 month', '1 year', '2026-01-15 12:00+00');
SELECT count(*) AS partitions, count(*) FILTER (WHERE created) AS created
FROM insta_id.create_partitions('parts.events', '1 month', '2 months', '2026-06-30 23:59:59.999+00');
-- Rows across the year, each in the partition of its month.
INSERT INTO parts.events (id, what)
SELECT insta_id.min_id('2026-01-01 00:00+00'::timestamptz + g * interval '1 day', 3) + g, 'day ' || g FROM generate_series(0, 364) g;
SELECT tableoid::regclass AS part, count(*), min(insta_id.created_at(id)) AT TIME ZONE 'UTC' AS first
FROM parts.events GROUP BY 1 ORDER BY 1 LIMIT 3;
-- A time-range query on the key reads only that month's partition; the
-- same on the decoded time reads all of them, and rewritten with
-- made_during only that month's, with the same rows.
EXPLAIN (COSTS OFF) SELECT count(*) FROM parts.events WHERE insta_id.made_during(id, '[2026-03-01 00:00+00, 2026-04-01 00:00+00)');
SELECT count(*) FROM parts.events WHERE insta_id.made_during(id, '[2026-03-01 00:00+00, 2026-04-01 00:00+00)');
CREATE FUNCTION pg_temp.partitions_planned(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE plan text;
BEGIN
  EXECUTE 'EXPLAIN (FORMAT JSON, COSTS OFF) ' || q INTO plan;
  RETURN (SELECT count(*) FROM regexp_matches(plan, '"Relation Name": "events_p', 'g'));
END $$;
SELECT pg_temp.partitions_planned($q$SELECT * FROM parts.events
         WHERE (insta_id.id_parts(id)).created_at <@ '[2026-03-01 00:00+00, 2026-04-01 00:00+00)'::tstzrange$q$) AS decoded,
       pg_temp.partitions_planned($q$SELECT * FROM parts.events
         WHERE insta_id.made_during(id, '[2026-03-01 00:00+00, 2026-04-01 00:00+00)')$q$) AS rewritten,
       (SELECT array_agg(id ORDER BY id) FROM parts.events
         WHERE (insta_id.id_parts(id)).created_at <@ '[2026-03-01 00:00+00, 2026-04-01 00:00+00)'::tstzrange)
       = (SELECT array_agg(id ORDER BY id) FROM parts.events
         WHERE insta_id.made_during(id, '[2026-03-01 00:00+00, 2026-04-01 00:00+00)')) AS same_rows;
-- Retention: the partitions whose every ID was made before now() -
-- older_than. In one transaction now() stands still, so older_than =
-- now() - <a date> puts the cut at that date (in UTC: a day of a
-- timestamptz's arithmetic is the session time zone's, DST included).
BEGIN;
SET LOCAL TimeZone = 'UTC';
SELECT part, done FROM insta_id.drop_partitions('parts.events', now() - '2026-06-01 00:00+00'::timestamptz);
SELECT part, done FROM insta_id.drop_partitions('parts.events', now() - '2026-03-01 00:00+00'::timestamptz, 'detach');
SELECT count(*) AS left_attached FROM insta_id._time_partitions('parts.events');
SELECT relname, relispartition FROM pg_class WHERE relname IN ('events_p20260101', 'events_p20260201') ORDER BY 1;
SELECT part, done FROM insta_id.drop_partitions('parts.events', now() - '2026-03-01 00:00+00'::timestamptz, 'detach');
SELECT part, done FROM insta_id.drop_partitions('parts.events', now() - '2026-04-01 00:00+00'::timestamptz, 'drop');
SELECT count(*) AS rows_left, min(insta_id.created_at(id)) AT TIME ZONE 'UTC' AS oldest FROM parts.events;
COMMIT;
DROP TABLE parts.events_p20260101, parts.events_p20260201;
-- Periods of a fixed length: days from midnight UTC, weeks from Monday,
-- hours (named with the time).
CREATE TABLE parts.clicks (id bigint PRIMARY KEY) PARTITION BY RANGE (id);
SELECT part, made_from AT TIME ZONE 'UTC' AS made_from, created FROM insta_id.create_partitions('parts.clicks', '1 week', '1 week', '2026-11-26 15:00+00');
CREATE TABLE parts.hits (id bigint PRIMARY KEY) PARTITION BY RANGE (id);
SELECT part, made_from AT TIME ZONE 'UTC' AS made_from FROM insta_id.create_partitions('parts.hits', '6 hours', '6 hours', '2026-11-26 15:00+00');
-- A shard template partitioned so: every shard gets the partitions, and
-- makes its next ones itself.
CREATE SCHEMA parts_tmpl;
CREATE TABLE parts_tmpl.events (id bigint NOT NULL PRIMARY KEY, what text) PARTITION BY RANGE (id);
SELECT insta_id.add_id_column('parts_tmpl.events', 'id', 0);
-- (this month and the next, whenever the test runs)
SELECT count(*) FROM insta_id.create_partitions('parts_tmpl.events', '1 month', '1 month');
SELECT insta_id.create_shards(301, 302, 'parts_tmpl');
SELECT count(*) AS partitions FROM insta_id._time_partitions('insta302.events');
INSERT INTO insta302.events (what) VALUES ('now') RETURNING insta_id.shard_id(id), tableoid::regclass IS NOT NULL AS routed;
SELECT count(*) FILTER (WHERE created) AS created FROM insta_id.create_partitions('insta302.events', '1 month', '3 months');
-- A migration of the partitioned template reaches every shard's partitions,
-- those the shard made itself too; rows still go to their month's.
CALL insta_id.migrate('parts_0001', 'parts_tmpl', 'ALTER TABLE events ADD COLUMN source text NOT NULL DEFAULT ''app''');
SELECT n.nspname, count(*) AS partitions, count(a.attname) AS with_source
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'source' AND NOT a.attisdropped
WHERE i.inhparent IN ('parts_tmpl.events'::regclass, 'insta301.events'::regclass, 'insta302.events'::regclass)
GROUP BY 1 ORDER BY 1;
INSERT INTO insta301.events (what) VALUES ('after') RETURNING insta_id.shard_id(id), source;

-- Refusals, before anything is made.
CREATE TABLE parts.plain (id bigint);
CREATE TABLE parts.by_text (k text) PARTITION BY RANGE (k);
CREATE TABLE parts.by_list (id bigint) PARTITION BY LIST (id);
CREATE TABLE parts.with_default (id bigint) PARTITION BY RANGE (id);
CREATE TABLE parts.with_default_rest PARTITION OF parts.with_default DEFAULT;
INSERT INTO parts.with_default VALUES (insta_id.min_id('2026-11-15 00:00+00'));
CREATE TABLE parts.odd (id bigint) PARTITION BY RANGE (id);
CREATE TABLE parts.odd_p1 PARTITION OF parts.odd FOR VALUES FROM (insta_id.min_id('2026-11-10 00:00+00')) TO (insta_id.min_id('2026-11-20 00:00+00'));
CREATE TABLE parts.odd_p20261201 (x int);
SELECT insta_id.create_partitions(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.plain');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.by_text');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.by_list');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.events', '1 month 2 days');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.events', '10 minutes');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.events', '1 month', '-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.events', '1 hour', '100 days');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.events', '1 month', '1 month', '2046-06-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.with_default', '1 month', '0', '2026-11-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.odd', '1 month', '0', '2026-11-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.odd', '1 month', '0', '2026-12-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.create_partitions('parts.events', lock_timeout => 'soon');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_partitions('parts.events', '1 day', 'truncate');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_partitions('parts.events', '-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_partitions('parts.plain', '1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_partitions(NULL, '1 day');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE parts.a_table_whose_name_leaves_no_room_for_a_partition_suffix (id bigint) PARTITION BY RANGE (id);
SELECT insta_id.create_partitions('parts.a_table_whose_name_leaves_no_room_for_a_partition_suffix', '1 month', '0', '2026-11-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
-- A view over an old partition: the drop fails (2BP01), nothing dropped or detached.
CREATE VIEW parts.april AS SELECT * FROM parts.events_p20260401;
BEGIN;
SET LOCAL TimeZone = 'UTC';
SELECT insta_id.drop_partitions('parts.events', now() - '2026-05-01 00:00+00'::timestamptz, 'drop');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT relispartition AS april_attached FROM pg_class WHERE oid = 'parts.events_p20260401'::regclass;
DROP VIEW parts.april;
SELECT count(*) AS odd_partitions FROM pg_inherits WHERE inhparent = 'parts.odd'::regclass;
-- Declared VOLATILE, PARALLEL UNSAFE; not PUBLIC's.
SELECT p.oid::regprocedure, provolatile, proparallel, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE pronamespace = 'insta_id'::regnamespace AND proname IN ('create_partitions', 'drop_partitions')
ORDER BY 1;
SELECT insta_id.drop_shard(301, force => true), insta_id.drop_shard(302, force => true);
DROP SCHEMA parts, parts_tmpl CASCADE;
