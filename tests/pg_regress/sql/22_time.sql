-- insta_id.id_range / made_during: a time range as the IDs made in it.
-- Every kind of bound: closed, open, unbounded, infinite, empty, before
-- the epoch, and bounds inside a millisecond (IDs carry whole ones).
SELECT r, insta_id.id_range(r) AS ids
FROM unnest(ARRAY[
    '[2026-11-01 00:00:00+00, 2026-12-01 00:00:00+00)',
    '[2026-11-01 00:00:00+00, 2026-12-01 00:00:00+00]',
    '(2026-11-01 00:00:00+00, 2026-12-01 00:00:00+00)',
    '[2026-11-01 00:00:00.0004+00, 2026-11-01 00:00:00.0026+00)',
    '(2026-11-01 00:00:00.0004+00, 2026-11-01 00:00:00.0026+00]',
    '[2026-11-01 00:00:00.0004+00, 2026-11-01 00:00:00.0006+00)',
    '[2026-11-01 00:00:00+00,)',
    '(,2026-11-01 00:00:00+00)',
    '(,)',
    '[-infinity, infinity]',
    '[infinity, infinity]',
    '[-infinity, -infinity]',
    '[2000-01-01 00:00:00+00, 2011-08-24 21:07:01.722+00)',
    '[2000-01-01 00:00:00+00, 2001-01-01 00:00:00+00)',
    'empty']::tstzrange[]) r;
-- The bounds are the decoders': the first ID of the first millisecond in
-- the range, the first of the first one past it.
SELECT lower(insta_id.id_range('[2026-11-01 00:00+00, 2026-12-01 00:00+00)')) = insta_id.min_id('2026-11-01 00:00+00') AS lower_is_min_id,
       upper(insta_id.id_range('[2026-11-01 00:00+00, 2026-12-01 00:00+00)')) = insta_id.max_id('2026-11-30 23:59:59.999+00') + 1 AS upper_past_max_id;
-- Exactly the IDs whose created_at lies in the range: the first and last
-- ID of every millisecond around each bound, and 2000 IDs spread over the
-- 25 s around them, each against every kind of range built from the bounds.
CREATE TABLE time_ids AS
SELECT insta_id.min_id(insta_id.epoch() + (m + d) * interval '1 millisecond') AS id
FROM (SELECT floor(extract(epoch FROM b - insta_id.epoch())::numeric * 1000)::bigint AS m
      FROM unnest(ARRAY['2026-10-31 23:59:59.9995+00', '2026-11-01 00:00:00+00', '2026-11-01 00:00:00.0005+00',
                        '2026-11-01 00:00:00.0125+00', '2026-11-01 00:00:12.4+00', '2026-11-01 00:00:12.401+00']::timestamptz[]) b) x,
     generate_series(-3, 3) d
UNION ALL
SELECT insta_id.max_id(insta_id.epoch() + (m + d) * interval '1 millisecond')
FROM (SELECT floor(extract(epoch FROM b - insta_id.epoch())::numeric * 1000)::bigint AS m
      FROM unnest(ARRAY['2026-10-31 23:59:59.9995+00', '2026-11-01 00:00:00+00', '2026-11-01 00:00:00.0005+00',
                        '2026-11-01 00:00:00.0125+00', '2026-11-01 00:00:12.4+00', '2026-11-01 00:00:12.401+00']::timestamptz[]) b) x,
     generate_series(-3, 3) d
UNION ALL
SELECT insta_id.min_id('2026-11-01 00:00:00+00') + g::bigint * 104857327 FROM generate_series(-1000, 999) g;
CREATE TABLE time_ranges AS
SELECT tstzrange(a, b, k) AS r
FROM unnest(ARRAY['2026-10-31 23:59:59.9995+00', '2026-11-01 00:00:00+00', '2026-11-01 00:00:00.0005+00', NULL]::timestamptz[]) a,
     unnest(ARRAY['2026-11-01 00:00:00.0125+00', '2026-11-01 00:00:12.4+00', '2026-11-01 00:00:12.401+00', NULL]::timestamptz[]) b,
     unnest(ARRAY['[)', '[]', '()', '(]']) k;
SELECT count(*) AS ranges,
       sum((SELECT count(*) FROM time_ids i WHERE (insta_id.created_at(i.id) <@ t.r) <> (i.id <@ insta_id.id_range(t.r)))) AS id_range_wrong,
       sum((SELECT count(*) FROM time_ids i WHERE (insta_id.created_at(i.id) <@ t.r) <> insta_id.made_during(i.id, t.r))) AS made_during_wrong,
       sum((SELECT count(*) FROM time_ids i WHERE insta_id.created_at(i.id) <@ t.r)) AS ids_in
FROM time_ranges t;
DROP TABLE time_ids, time_ranges;
-- A range past 2^40 ms after the epoch, where IDs turn negative: 22008,
-- never a wrong range. Up to that time, and NULL, are answered.
SELECT insta_id.id_range('[2026-01-01, 2050-01-01)');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.id_range('[2047-01-01, 2048-01-01)');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.id_range(tstzrange('2046-01-01', insta_id.epoch() + 1099511627776 * interval '1 millisecond')) AS to_the_last_positive,
       insta_id.id_range(NULL) IS NULL AS null_range, insta_id.made_during(1, NULL) IS NULL AS null_made_during,
       insta_id.made_during(9223372036854775807, 'empty') AS in_empty, insta_id.made_during(-9223372036854775808, 'empty') AS in_empty_too;
-- Declared IMMUTABLE and PARALLEL SAFE; id_range STRICT, made_during not
-- (so that PostgreSQL inlines it); both PUBLIC's.
SELECT p.oid::regprocedure, provolatile, proisstrict, proparallel, proconfig,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE pronamespace = 'insta_id'::regnamespace AND proname IN ('id_range', 'made_during')
ORDER BY p.oid::regprocedure::text;
-- The plans: a time range is a range scan of the primary key (where
-- insta_id.created_at(id) <@ ... reads every row). With a constant range the bounds are
-- folded into the plan; with a parameter (a generic plan), they are
-- computed once per scan.
CREATE TABLE time_posts (id bigint PRIMARY KEY, body text);
INSERT INTO time_posts SELECT insta_id.min_id('2026-01-01'::timestamptz + g * interval '1 hour'), 'x' FROM generate_series(0, 8759) g;
ANALYZE time_posts;
EXPLAIN (COSTS OFF) SELECT count(*) FROM time_posts WHERE insta_id.made_during(id, '[2026-11-01, 2026-11-02)');
SELECT count(*) FROM time_posts WHERE insta_id.made_during(id, '[2026-11-01, 2026-11-02)');
SET plan_cache_mode = force_generic_plan;
PREPARE time_posts_in(tstzrange) AS SELECT count(*) FROM time_posts WHERE insta_id.made_during(id, $1);
EXPLAIN (COSTS OFF) EXECUTE time_posts_in('[2026-11-01, 2026-11-02)');
EXECUTE time_posts_in('[2026-11-01, 2026-11-02)');
EXECUTE time_posts_in('[2026-12-31 20:00:00+00,)');
DEALLOCATE time_posts_in;
RESET plan_cache_mode;
DROP TABLE time_posts;
