\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.5.0'" to load this file. \quit
-- 0.5.0: the duplicate guard's statistics (views guard_stats and
-- guard_stats_total, guard_stats_reset(), setting insta_id.track_guard_stats).
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
'Per sequence in the duplicate guard''s table (server-wide; this session only with the per-session guard): IDs issued, waits for the next millisecond (count, total ms), milliseconds borrowed after the clock stepped back, calls refused with 54000';

CREATE VIEW insta_id.guard_stats_total AS
SELECT * FROM insta_id._guard_stats_total();
COMMENT ON VIEW insta_id.guard_stats_total IS
'The duplicate guard as a whole: capacity and sequences in its table, the counts of guard_stats summed over every sequence since the last reset (evicted ones too), evictions';

GRANT EXECUTE ON FUNCTION insta_id._guard_stats(), insta_id._guard_stats_total() TO PUBLIC;
GRANT SELECT ON insta_id.guard_stats, insta_id.guard_stats_total TO PUBLIC;
REVOKE EXECUTE ON FUNCTION insta_id.guard_stats_reset() FROM PUBLIC;

-- add_id_column: new sequences get CACHE 32 with the shared guard.
CREATE OR REPLACE FUNCTION insta_id.add_id_column(tbl regclass, col name DEFAULT 'id', shard_id int DEFAULT NULL)
RETURNS regclass
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    tblname name;
    shard int := add_id_column.shard_id;
    col_type regtype;
    has_default boolean;
    existing_shard int;
    seq_name text;
    seq regclass;
BEGIN
    SELECT n.nspname, c.relname INTO nsp, tblname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = tbl AND c.relkind IN ('r', 'p');
    IF NOT FOUND THEN
        RAISE EXCEPTION '% is not a table', tbl USING ERRCODE = 'wrong_object_type';
    END IF;
    IF shard IS NULL THEN
        SELECT r.shard_id INTO shard FROM insta_id.shard_registry r WHERE r.schema_name = nsp;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'table % is not in a logical shard', tbl
                USING ERRCODE = 'undefined_object',
                      DETAIL = format('Schema %I is not in insta_id.shards.', nsp),
                      HINT = 'Pass shard_id, or create the schema with insta_id.create_shard.';
        END IF;
    END IF;
    PERFORM insta_id._check_shard_id(shard);

    SELECT a.atttypid::regtype, a.atthasdef INTO col_type, has_default
    FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = col AND NOT a.attisdropped;
    IF FOUND THEN
        IF col_type NOT IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype) THEN
            RAISE EXCEPTION 'column "%" of % is of type %, not bigint', col, tbl, col_type
                USING ERRCODE = 'datatype_mismatch';
        END IF;
        existing_shard := insta_id._next_id_default_shard(tbl, col);
        IF existing_shard IS NOT NULL AND existing_shard <> shard THEN
            RAISE EXCEPTION 'column "%" of % already mints IDs for shard %', col, tbl, existing_shard
                USING ERRCODE = 'object_not_in_prerequisite_state';
        ELSIF existing_shard IS NULL AND has_default THEN
            RAISE EXCEPTION 'column "%" of % already has a default', col, tbl
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = format('The default is %s.', (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
                               JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                               WHERE d.adrelid = tbl AND a.attname = col)),
                      HINT = 'Drop the default first (ALTER TABLE ... ALTER COLUMN ... DROP DEFAULT).';
        END IF;
    END IF;

    -- The sequence: the one the column owns already, or a new one named like serial's.
    IF col_type IS NOT NULL THEN
        seq := pg_get_serial_sequence(format('%I.%I', nsp, tblname), col)::regclass;
    END IF;
    IF seq IS NULL THEN
        seq_name := left(tblname || '_' || col, 59) || '_seq';
        WHILE EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = nsp AND c.relname = seq_name) LOOP
            seq_name := left(tblname || '_' || col, 52) || '_' || substr(md5(random()::text), 1, 6) || '_seq';
        END LOOP;
        -- CACHE: with the shared guard, each session takes 32 values at a
        -- time instead of touching the sequence's page (and WAL) per ID; the
        -- guard keeps IDs unique whatever order the values come in. With the
        -- per-session guard a session holding old cached values could
        -- repeat another session's ID, so not there (README, "Sequences").
        EXECUTE format('CREATE SEQUENCE %I.%I CACHE %s', nsp, seq_name,
                       CASE insta_id.guard_mode() WHEN 'shared' THEN 32 ELSE 1 END);
        seq := format('%I.%I', nsp, seq_name)::regclass;
    END IF;

    IF col_type IS NULL THEN
        -- A new column: existing rows get IDs from the default as it is added.
        EXECUTE format('ALTER TABLE %s ADD COLUMN %I bigint NOT NULL DEFAULT insta_id.next_id(%s, %L::regclass)',
                       tbl, col, shard, seq);
    ELSE
        IF col_type <> 'bigint'::regtype THEN
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint', tbl, col);
        END IF;
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT insta_id.next_id(%s, %L::regclass)',
                       tbl, col, shard, seq);
        EXECUTE format('UPDATE %s SET %I = DEFAULT WHERE %I IS NULL', tbl, col, col);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', tbl, col);
    END IF;
    EXECUTE format('ALTER SEQUENCE %s OWNED BY %s.%I', seq, tbl, col);
    RETURN seq;
END
$$;
