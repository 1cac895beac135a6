-- No ID further ahead of the clock than insta_id.max_lead (README,
-- "Guarantees"). The same on every kind of server. This file raises the
-- server's high-water mark 5 s ahead, so it runs last. Nothing here depends
-- on how quickly statements follow each other.
SET TIME ZONE 'UTC';
-- at: the clock read right after next_id (the subquery is evaluated first).
CREATE FUNCTION lead_ids(seq regclass, n int) RETURNS TABLE (id bigint, at timestamptz)
LANGUAGE sql AS $$
  SELECT id, clock_timestamp() FROM (SELECT insta_id.next_id(1, seq) AS id FROM generate_series(1, n) OFFSET 0) x
$$;

-- A sequence that repeats one residue can issue one ID a millisecond; with
-- the bound at 0 none is ever ahead of the clock.
CREATE SEQUENCE lead_by1024 INCREMENT BY 1024;
SET insta_id.max_lead = 0;
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       count(*) FILTER (WHERE insta_id.created_at(id) > at) AS ahead_of_the_clock
FROM lead_ids('lead_by1024', 200);

-- The mark raised 5 s ahead (as a shard move does): every millisecond up to
-- it counts as used. Right after, with the bound at 0, error mode refuses
-- (54000) what wait mode would wait for.
CREATE TABLE lead_raise AS SELECT date_trunc('milliseconds', clock_timestamp() + interval '5 s') AS at;
SELECT insta_id.raise_high_water_mark(at) >= at AS raised FROM lead_raise;
CREATE SEQUENCE lead_plain;
SET insta_id.on_overflow = 'error';
DO $$
BEGIN
  PERFORM insta_id.next_id(1, 'lead_plain');
EXCEPTION WHEN program_limit_exceeded THEN
  RAISE NOTICE '% %', SQLSTATE, regexp_replace(SQLERRM, '\d+ ms', 'N ms');
END $$;
SELECT last_value FROM lead_plain;
RESET insta_id.on_overflow;
-- A bound wider than the raise: the ID is issued at once, above the raised
-- time and within the bound.
SET insta_id.max_lead = '10s';
CREATE TABLE lead_first AS SELECT * FROM lead_ids('lead_plain', 1);
SELECT insta_id.created_at(f.id) > r.at AS above_the_raised_mark,
       insta_id.created_at(f.id) <= f.at + interval '10 s' AS within_the_bound
FROM lead_first f, lead_raise r;
-- With the bound at 0, wait mode waits for the clock: the ID is not ahead
-- of it, nor before the first.
SET insta_id.max_lead = 0;
SELECT insta_id.created_at(id) <= at AS not_ahead, id > (SELECT id FROM lead_first) AS later
FROM lead_ids('lead_plain', 1);
RESET insta_id.max_lead;
DROP TABLE lead_first, lead_raise;
DROP SEQUENCE lead_by1024, lead_plain;
DROP FUNCTION lead_ids;
