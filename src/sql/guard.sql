-- The duplicate guard seen from SQL (src/guard.rs, src/guard_store.rs,
-- src/mark.rs, src/mark_wal.rs): its mode, the durable high-water mark and
-- the sequence that keeps it, and its statistics.
-- search_path: C functions that run no SQL need none; the SQL ones set it.
-- Privileges: reading is PUBLIC's; guard_stats_reset and
-- raise_high_water_mark are not (privileges.sql).

CREATE FUNCTION insta_id.guard_mode()
RETURNS text
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_guard_mode';
COMMENT ON FUNCTION insta_id.guard_mode() IS
'shared: the duplicate guard spans all sessions of the server, in every configuration since 0.10.0 (0.9.0 and earlier said session on PostgreSQL 15/16 without preloading, where each session guarded only its own IDs)';

-- The high-water mark of this database (ms since 1970): no ID of this
-- database was made in a later millisecond. A sequence because its writes are
-- WAL-logged outside any transaction and replayed without the library, so
-- the mark follows the data to standbys, point-in-time restores and
-- pg_upgrade; as extension configuration, pg_dump carries its value. Written
-- by next_id only (src/mark_wal.rs), as the sequence's owner; nobody else
-- has any privilege on it or its schema.
-- In a schema of its own that only the extension's owner may use: a role
-- that could name the sequence could queue a lock on it (CREATE RULE asks
-- for one before checking privileges) behind which every writer would wait.
CREATE SCHEMA insta_id_mark;
COMMENT ON SCHEMA insta_id_mark IS
'insta_id''s high-water mark (the sequence high_water): the extension owner''s only';
CREATE SEQUENCE insta_id_mark.high_water AS bigint MINVALUE 0 START WITH 0 NO CYCLE;
COMMENT ON SEQUENCE insta_id_mark.high_water IS
'The durable high-water mark of this database in milliseconds since 1970, written by next_id before the IDs it covers are returned; read it with insta_id.high_water_mark()';
SELECT pg_catalog.pg_extension_config_dump('insta_id_mark.high_water', '');

CREATE FUNCTION insta_id.high_water_mark()
RETURNS timestamptz
LANGUAGE c VOLATILE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_high_water_mark';
COMMENT ON FUNCTION insta_id.high_water_mark() IS
'The durable high-water mark of this database (readable on a standby): no ID of it is later; after a restart, a failover, a restore or an upgrade IDs continue above it until the clock passes it (NULL before the first ID)';

-- A shard moved in from a server whose clock is ahead of this one's: every
-- millisecond up to the old server's mark counts as used here too (docs/shards.md,
-- "Moving a logical shard online"). Superuser only: it moves every sequence's
-- IDs ahead of the clock until the clock passes the mark (this database's
-- durably; the server's other databases' until it restarts). Refused (22023)
-- further ahead of the clock than insta_id.max_lead + slack: a minute by
-- default, which covers a move, up to an hour when the caller says so; a
-- typo of an hour would otherwise stall every insert for an hour.
CREATE FUNCTION insta_id.raise_high_water_mark(at timestamptz, slack interval DEFAULT interval '1 minute')
RETURNS timestamptz
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_raise_high_water_mark';
COMMENT ON FUNCTION insta_id.raise_high_water_mark(timestamptz, interval) IS
'Counts every millisecond up to at (at most insta_id.max_lead + slack ahead of the clock; slack a minute by default, at most an hour) as used by every sequence of this database, durably (and of the server''s other databases until it restarts); returns the mark';

-- What the duplicate guard did: per sequence in its table, and in total.
-- VOLATILE (the counts move), PARALLEL RESTRICTED (0.9.0's per-session
-- guard gave a parallel worker a table of its own; kept as declared).
CREATE FUNCTION insta_id._guard_stats(
    OUT database oid, OUT sequence_oid oid, OUT last_ms_at timestamptz,
    OUT issued bigint, OUT waits bigint, OUT wait_time double precision,
    OUT borrowed_ms bigint, OUT refused bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED ROWS 100
AS 'MODULE_PATHNAME', 'insta_id_guard_stats_sequences';
COMMENT ON FUNCTION insta_id._guard_stats() IS 'The rows of insta_id.guard_stats()';


CREATE FUNCTION insta_id.guard_stats_reset()
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_guard_stats_reset';
COMMENT ON FUNCTION insta_id.guard_stats_reset() IS
'Zeroes the counts of insta_id.guard_stats() and guard_stats_total() (not what the guard remembers against duplicates); superuser unless granted';

-- Read as functions, not views: what PUBLIC can name, it can lock (see
-- insta_id.shards()). A sequence of another database shows its OID only:
-- its name is in that database's catalog (and the same OID here may name
-- another relation).
CREATE FUNCTION insta_id.guard_stats(
    OUT database name, OUT sequence regclass, OUT sequence_oid oid,
    OUT last_ms_at timestamptz, OUT issued bigint, OUT waits bigint,
    OUT wait_time double precision, OUT borrowed_ms bigint, OUT refused bigint)
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL RESTRICTED ROWS 100
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.datname,
           CASE WHEN d.datname = pg_catalog.current_database() THEN s.sequence_oid::pg_catalog.regclass END,
           s.sequence_oid, s.last_ms_at, s.issued, s.waits, s.wait_time, s.borrowed_ms, s.refused
    FROM insta_id._guard_stats() s
    LEFT JOIN pg_catalog.pg_database d ON d.oid = s.database
$$;
COMMENT ON FUNCTION insta_id.guard_stats() IS
'Per sequence in the duplicate guard''s table (this database''s sequences, every database''s for members of pg_read_all_stats): IDs issued, waits for the next millisecond (count, total ms), milliseconds borrowed after the clock stepped back, calls refused with 54000';

CREATE FUNCTION insta_id.guard_stats_total(
    OUT guard_mode text, OUT capacity bigint, OUT sequences bigint,
    OUT issued bigint, OUT waits bigint, OUT wait_time double precision,
    OUT borrowed_ms bigint, OUT refused bigint, OUT evictions bigint,
    OUT stats_reset timestamptz)
RETURNS record
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_guard_stats_total';
COMMENT ON FUNCTION insta_id.guard_stats_total() IS
'The duplicate guard as a whole: capacity and sequences in its table, the counts of guard_stats summed over every sequence since the last reset (evicted ones too), evictions';
