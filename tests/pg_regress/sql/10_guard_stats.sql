-- insta_id.guard_stats() / guard_stats_total: what the duplicate guard did.
-- A sequence with INCREMENT 1024 gives every value the residue 0, so every
-- ID after the first in a millisecond must wait for the next one (or, with
-- on_overflow = 'error', is refused).
CREATE SEQUENCE stat_seq INCREMENT 1024;
-- The guard's first use in a server run (0.9.0's per-session guard: in each
-- session) raises it to the high-water mark, up to 200 ms ahead of the clock (IDs then continue
-- above it, counted as borrowed): use it once, then let the clock pass the
-- mark (however long that takes on a busy machine; at most 10 s).
CREATE SEQUENCE warm_seq;
SELECT insta_id.next_id(1, 'warm_seq') > 0 AS warmed;
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    EXIT WHEN clock_timestamp() > insta_id.high_water_mark();
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT insta_id.guard_stats_reset();
SELECT count(DISTINCT insta_id.next_id(1, 'stat_seq')) FROM generate_series(1, 50);
SELECT sequence, database = current_database() AS this_db, last_ms_at <= clock_timestamp() AS last_ms_past,
       issued, waits BETWEEN 1 AND 49 AS waited, wait_time > 0 AS wait_time, borrowed_ms, refused
FROM insta_id.guard_stats() WHERE sequence_oid = 'stat_seq'::regclass;
-- Refused calls are counted (in shared memory: a rolled-back subtransaction
-- keeps the count).
SET insta_id.on_overflow = 'error';
DO $$
DECLARE ok int := 0;
BEGIN
  LOOP
    BEGIN
      PERFORM insta_id.next_id(1, 'stat_seq');
      ok := ok + 1;
    EXCEPTION WHEN program_limit_exceeded THEN EXIT;
    END;
  END LOOP;
  PERFORM set_config('regress.ok', ok::text, false);
END $$;
RESET insta_id.on_overflow;
SELECT issued = 50 + current_setting('regress.ok')::int AS issued_counted, refused
FROM insta_id.guard_stats() WHERE sequence_oid = 'stat_seq'::regclass;
-- The server as a whole (other sessions may add to it).
SELECT guard_mode = insta_id.guard_mode() AS mode, capacity >= sequences AS fits, sequences >= 1 AS tracked,
       issued >= 50 AS issued, waits >= 1 AS waits, refused >= 1 AS refused, evictions >= 0 AS evictions,
       stats_reset <= now() AS reset_before
FROM insta_id.guard_stats_total();
-- Not counting: insta_id.track_guard_stats = off.
SELECT insta_id.guard_stats_reset();
SET insta_id.track_guard_stats = off;
SELECT count(*) FROM (SELECT insta_id.next_id(1, 'stat_seq') FROM generate_series(1, 5)) x;
RESET insta_id.track_guard_stats;
SELECT issued, waits, refused FROM insta_id.guard_stats() WHERE sequence_oid = 'stat_seq'::regclass;
SELECT stats_reset > now() - interval '1 minute' AS just_reset FROM insta_id.guard_stats_total();
-- Anyone may read the counts; only a superuser (or whom it grants) may reset them.
CREATE ROLE insta_id_regress_reader;
SET ROLE insta_id_regress_reader;
SELECT count(*) >= 1 AS readable FROM insta_id.guard_stats();
SELECT insta_id.guard_stats_reset();
\echo :LAST_ERROR_SQLSTATE
SET insta_id.track_guard_stats = off;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- Another database's sequences (OIDs, last use, counts) only for
-- pg_read_all_stats: the guard is server-wide, its statistics are not.
CREATE DATABASE insta_id_regress_other;
\c insta_id_regress_other
SET client_min_messages = error;
CREATE EXTENSION insta_id;
RESET client_min_messages;
SET ROLE insta_id_regress_reader;
SELECT count(*) AS other_databases_rows FROM insta_id.guard_stats() WHERE database <> current_database();
RESET ROLE;
GRANT pg_read_all_stats TO insta_id_regress_reader;
SET ROLE insta_id_regress_reader;
-- (0.9.0's per-session guard held this session's sequences only: none)
SELECT count(*) > 0 OR insta_id.guard_mode() = 'session' AS other_databases_seen
FROM insta_id.guard_stats() WHERE database = 'insta_id_regress';
RESET ROLE;
\c insta_id_regress
DROP DATABASE insta_id_regress_other;
DROP ROLE insta_id_regress_reader;
-- Sequences add_id_column makes: CACHE 32 with the shared guard, none with
-- 0.9.0's per-session one (where cached values could repeat other sessions'
-- IDs).
CREATE TABLE stat_t (v int);
SELECT insta_id.add_id_column('stat_t', 'id', 3) IS NOT NULL AS made;
SELECT seqcache = CASE insta_id.guard_mode() WHEN 'shared' THEN 32 ELSE 1 END AS cache_by_guard
FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence('stat_t', 'id')::regclass;
