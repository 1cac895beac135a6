-- No ID further ahead of the clock than insta_id.max_lead (README,
-- "Guarantees"). The same on every kind of server. This file raises the
-- server's high-water mark, so it runs last.
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

-- The mark raised 1.5 s ahead (as a shard move does): every millisecond up
-- to it counts as used. With the default 1 s bound, the first ID waits until
-- it is no more than 1 s ahead, and is above the raised time.
RESET insta_id.max_lead;
SHOW insta_id.max_lead;
CREATE TABLE lead_raise AS SELECT date_trunc('milliseconds', clock_timestamp() + interval '1500 ms') AS at;
SELECT insta_id.raise_high_water_mark(at) >= at AS raised FROM lead_raise;
CREATE SEQUENCE lead_plain;
CREATE TABLE lead_first AS SELECT * FROM lead_ids('lead_plain', 1);
SELECT insta_id.created_at(f.id) > r.at AS above_the_raised_mark,
       insta_id.created_at(f.id) <= f.at + interval '1 s' AS within_the_bound
FROM lead_first f, lead_raise r;

-- Error mode refuses with 54000 where wait mode would wait for the clock.
SET insta_id.max_lead = 0;
SET insta_id.on_overflow = 'error';
DO $$
BEGIN
  PERFORM insta_id.next_id(1, 'lead_plain');
EXCEPTION WHEN program_limit_exceeded THEN
  RAISE NOTICE '% %', SQLSTATE, regexp_replace(SQLERRM, '\d+ ms', 'N ms');
END $$;
SELECT last_value FROM lead_plain;
RESET insta_id.on_overflow;
-- In wait mode the same call waits, then is not ahead of the clock.
SELECT insta_id.created_at(id) <= at AS not_ahead, insta_id.created_at(id) >= (SELECT insta_id.created_at(id) FROM lead_first) AS not_back
FROM lead_ids('lead_plain', 1);
RESET insta_id.max_lead;
DROP TABLE lead_first, lead_raise;
DROP SEQUENCE lead_by1024, lead_plain;
DROP FUNCTION lead_ids;
