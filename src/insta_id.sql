-- The SQL surface of insta_id. Every object lives in schema insta_id, which
-- the control file fixes (schema = insta_id, relocatable = false).
-- Each function states its volatility, strictness and parallel safety:
--   next_id reads the clock and calls nextval: VOLATILE, PARALLEL UNSAFE.
--   Decoders and range bounds depend only on their arguments and on the
--   epoch, which is fixed per database before the first ID (see README):
--   IMMUTABLE, so they work in indexes and generated columns.
-- None of these functions runs SQL, so none needs a search_path.

CREATE FUNCTION insta_id.next_id(schema_shard int, seq regclass)
RETURNS bigint
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_next_id';
COMMENT ON FUNCTION insta_id.next_id(int, regclass) IS
'New ID: (ms since epoch << 23) | (schema_shard << 10) | (nextval(seq) % 1024); never repeats for a sequence (see insta_id.on_overflow)';

CREATE FUNCTION insta_id.id_parts(id bigint,
    OUT created_at timestamptz, OUT shard_id int, OUT seq_id int, OUT ms_since_epoch bigint)
RETURNS record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_id_parts';
COMMENT ON FUNCTION insta_id.id_parts(bigint) IS
'Decodes an ID with the epoch in force (insta_id.epoch)';

CREATE FUNCTION insta_id.id_parts(id bigint, epoch timestamptz,
    OUT created_at timestamptz, OUT shard_id int, OUT seq_id int, OUT ms_since_epoch bigint)
RETURNS record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_id_parts_epoch';
COMMENT ON FUNCTION insta_id.id_parts(bigint, timestamptz) IS
'Decodes an ID made with the given epoch';

CREATE FUNCTION insta_id.created_at(id bigint)
RETURNS timestamptz
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_created_at';
COMMENT ON FUNCTION insta_id.created_at(bigint) IS
'The millisecond an ID was made in (epoch in force)';

CREATE FUNCTION insta_id.shard_id(id bigint)
RETURNS int
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_shard_id';
COMMENT ON FUNCTION insta_id.shard_id(bigint) IS 'The 13-bit logical shard of an ID';

CREATE FUNCTION insta_id.seq_id(id bigint)
RETURNS int
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_seq_id';
COMMENT ON FUNCTION insta_id.seq_id(bigint) IS 'The 10-bit sequence field of an ID (nextval % 1024)';

CREATE FUNCTION insta_id.min_id(ts timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id';
COMMENT ON FUNCTION insta_id.min_id(timestamptz) IS
'Smallest ID any shard can have in the millisecond of ts';

CREATE FUNCTION insta_id.max_id(ts timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id';
COMMENT ON FUNCTION insta_id.max_id(timestamptz) IS
'Largest ID any shard can have in the millisecond of ts';

CREATE FUNCTION insta_id.min_id(ts timestamptz, shard_id int)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id_shard';
COMMENT ON FUNCTION insta_id.min_id(timestamptz, int) IS
'Smallest ID of one shard in the millisecond of ts';

CREATE FUNCTION insta_id.max_id(ts timestamptz, shard_id int)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id_shard';
COMMENT ON FUNCTION insta_id.max_id(timestamptz, int) IS
'Largest ID of one shard in the millisecond of ts';

CREATE FUNCTION insta_id.min_id(ts timestamptz, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id_epoch';
COMMENT ON FUNCTION insta_id.min_id(timestamptz, timestamptz) IS
'Smallest ID any shard can have in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.max_id(ts timestamptz, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id_epoch';
COMMENT ON FUNCTION insta_id.max_id(timestamptz, timestamptz) IS
'Largest ID any shard can have in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.min_id(ts timestamptz, shard_id int, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id_shard_epoch';
COMMENT ON FUNCTION insta_id.min_id(timestamptz, int, timestamptz) IS
'Smallest ID of one shard in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.max_id(ts timestamptz, shard_id int, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id_shard_epoch';
COMMENT ON FUNCTION insta_id.max_id(timestamptz, int, timestamptz) IS
'Largest ID of one shard in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.epoch()
RETURNS timestamptz
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_epoch';
COMMENT ON FUNCTION insta_id.epoch() IS 'The epoch in force (setting insta_id.epoch)';

CREATE FUNCTION insta_id.guard_mode()
RETURNS text
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_guard_mode';
COMMENT ON FUNCTION insta_id.guard_mode() IS
'shared: the duplicate guard spans all sessions of the server (insta_id preloaded, or PostgreSQL 17+); session: each session guards only its own IDs (PostgreSQL 15/16 without preloading)';

CREATE FUNCTION insta_id.high_water_mark()
RETURNS timestamptz
LANGUAGE c VOLATILE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_high_water_mark';
COMMENT ON FUNCTION insta_id.high_water_mark() IS
'The durable high-water mark: no ID of this server is later; after a restart IDs continue above it until the clock passes it (NULL before the first ID)';

-- A shard moved in from a server whose clock is ahead of this one's: every
-- millisecond up to the old server's mark counts as used here too (docs/shards.md,
-- "Moving a logical shard online"). Superuser only: it moves every sequence's
-- IDs ahead of the clock until the clock passes the mark.
CREATE FUNCTION insta_id.raise_high_water_mark(at timestamptz)
RETURNS timestamptz
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_raise_high_water_mark';
COMMENT ON FUNCTION insta_id.raise_high_water_mark(timestamptz) IS
'Counts every millisecond up to at (at most an hour ahead of the clock) as used by every sequence of this server, durably; returns the mark';

-- What the duplicate guard did: per sequence in its table, and in total.
-- VOLATILE (the counts move), PARALLEL RESTRICTED (a parallel worker of a
-- server with the per-session guard would read its own empty table).
CREATE FUNCTION insta_id._guard_stats(
    OUT database oid, OUT sequence_oid oid, OUT last_ms_at timestamptz,
    OUT issued bigint, OUT waits bigint, OUT wait_time double precision,
    OUT borrowed_ms bigint, OUT refused bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED ROWS 100
AS 'MODULE_PATHNAME', 'insta_id_guard_stats_sequences';
COMMENT ON FUNCTION insta_id._guard_stats() IS 'The rows of the view insta_id.guard_stats';

CREATE FUNCTION insta_id._guard_stats_total(
    OUT guard_mode text, OUT capacity bigint, OUT sequences bigint,
    OUT issued bigint, OUT waits bigint, OUT wait_time double precision,
    OUT borrowed_ms bigint, OUT refused bigint, OUT evictions bigint,
    OUT stats_reset timestamptz)
RETURNS record
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_guard_stats_total';
COMMENT ON FUNCTION insta_id._guard_stats_total() IS 'The row of the view insta_id.guard_stats_total';

CREATE FUNCTION insta_id.guard_stats_reset()
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_guard_stats_reset';
COMMENT ON FUNCTION insta_id.guard_stats_reset() IS
'Zeroes the counts of insta_id.guard_stats and guard_stats_total (not what the guard remembers against duplicates); superuser unless granted';

-- A sequence of another database shows its OID only: its name is in that
-- database's catalog (and the same OID here may name another relation).
CREATE VIEW insta_id.guard_stats AS
SELECT d.datname AS database,
       CASE WHEN d.datname = pg_catalog.current_database() THEN s.sequence_oid::pg_catalog.regclass END AS sequence,
       s.sequence_oid, s.last_ms_at, s.issued, s.waits, s.wait_time, s.borrowed_ms, s.refused
FROM insta_id._guard_stats() s
LEFT JOIN pg_catalog.pg_database d ON d.oid = s.database;
COMMENT ON VIEW insta_id.guard_stats IS
'Per sequence in the duplicate guard''s table (this database''s sequences, every database''s for members of pg_read_all_stats; this session only with the per-session guard): IDs issued, waits for the next millisecond (count, total ms), milliseconds borrowed after the clock stepped back, calls refused with 54000';

CREATE VIEW insta_id.guard_stats_total AS
SELECT * FROM insta_id._guard_stats_total();
COMMENT ON VIEW insta_id.guard_stats_total IS
'The duplicate guard as a whole: capacity and sequences in its table, the counts of guard_stats summed over every sequence since the last reset (evicted ones too), evictions';

-- Application roles need no grants of their own: an id DEFAULT works for any
-- role that may INSERT into the table and use its sequence.
GRANT USAGE ON SCHEMA insta_id TO PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA insta_id TO PUBLIC;
GRANT SELECT ON insta_id.guard_stats, insta_id.guard_stats_total TO PUBLIC;
-- Like pg_stat_reset(): superuser, or whom the superuser grants it to.
REVOKE EXECUTE ON FUNCTION insta_id.guard_stats_reset() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION insta_id.raise_high_water_mark(timestamptz) FROM PUBLIC;

-- Say at CREATE EXTENSION when the duplicate guard covers single sessions only.
-- A WARNING, because CREATE EXTENSION silences NOTICEs from its script.
DO $$
BEGIN
  IF insta_id.guard_mode() = 'session' THEN
    RAISE WARNING 'insta_id is not in shared_preload_libraries: each session guards only its own IDs against duplicates'
      USING HINT = 'Add insta_id to shared_preload_libraries and restart (or use PostgreSQL 17 or later) to guard across sessions. insta_id.require_shared_guard = on makes next_id refuse to run until then. See insta_id.guard_mode() and the README.';
  END IF;
END
$$;
