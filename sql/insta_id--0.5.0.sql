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

-- Application roles need no grants of their own: an id DEFAULT works for any
-- role that may INSERT into the table and use its sequence.
GRANT USAGE ON SCHEMA insta_id TO PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA insta_id TO PUBLIC;
GRANT SELECT ON insta_id.guard_stats, insta_id.guard_stats_total TO PUBLIC;
-- Like pg_stat_reset(): superuser, or whom the superuser grants it to.
REVOKE EXECUTE ON FUNCTION insta_id.guard_stats_reset() FROM PUBLIC;

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
-- Logical shards: a registry of shard schemas and the DDL helpers for their
-- whole life. The helpers are PL/pgSQL with a fixed search_path, quote every
-- identifier they are given (format %I / %L), run in the caller's
-- transaction (all or nothing) with the caller's rights (SECURITY INVOKER),
-- and are not executable by PUBLIC: superusers may call them, other roles
-- only once granted (see README, "Logical shards").

CREATE TABLE insta_id.shard_registry (
    shard_id    int  PRIMARY KEY CHECK (shard_id BETWEEN 0 AND 8191),
    schema_name name NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE insta_id.shard_registry IS
'Logical shards of this database: shard id and schema. Dumped by pg_dump with the database.';
-- Registry rows are user data: pg_dump dumps them, pg_restore restores them.
SELECT pg_catalog.pg_extension_config_dump('insta_id.shard_registry', '');

CREATE VIEW insta_id.shards AS
SELECT r.shard_id, r.schema_name, r.created_at,
       (SELECT count(*) FROM pg_catalog.pg_class c
        WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p'))::int AS tables
FROM insta_id.shard_registry r
LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = r.schema_name;
COMMENT ON VIEW insta_id.shards IS 'Logical shards of this database, with how many tables each has';
GRANT SELECT ON insta_id.shard_registry, insta_id.shards TO PUBLIC;

-- The shard id of the next_id DEFAULT of a column, or NULL when the column
-- has no such default (found through the dependency of the default on next_id).
CREATE FUNCTION insta_id._next_id_default_shard(tbl regclass, col name)
RETURNS int
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (regexp_match(pg_get_expr(d.adbin, d.adrelid), '^insta_id\.next_id\((\d+),'))[1]::int
    FROM pg_attrdef d
    JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
         AND dep.refclassid = 'pg_proc'::regclass
         AND dep.refobjid = 'insta_id.next_id(int, regclass)'::regprocedure
    WHERE d.adrelid = tbl AND a.attname = col
$$;

CREATE FUNCTION insta_id._check_shard_id(shard_id int)
RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF shard_id NOT BETWEEN 0 AND 8191 THEN
        RAISE EXCEPTION 'shard id % is out of range', shard_id
            USING ERRCODE = 'numeric_value_out_of_range',
                  DETAIL = 'A shard id must be between 0 and 8191.';
    END IF;
END
$$;

CREATE FUNCTION insta_id.create_shard(shard_id int, schema_name text DEFAULT NULL)
RETURNS name
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name := coalesce(create_shard.schema_name, 'insta' || create_shard.shard_id);
    taken name;
BEGIN
    IF create_shard.shard_id IS NULL THEN
        RAISE EXCEPTION 'shard id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_id(create_shard.shard_id);
    SELECT r.schema_name INTO taken FROM insta_id.shard_registry r WHERE r.shard_id = create_shard.shard_id;
    IF FOUND THEN
        RAISE EXCEPTION 'shard % already exists', create_shard.shard_id
            USING ERRCODE = 'unique_violation', DETAIL = format('Its schema is %I.', taken);
    END IF;
    IF EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.schema_name = nsp)
       OR EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = nsp) THEN
        RAISE EXCEPTION 'schema % already exists', quote_ident(nsp)
            USING ERRCODE = 'duplicate_schema',
                  HINT = 'To register a schema restored from another server, use insta_id.adopt_shard.';
    END IF;
    EXECUTE format('CREATE SCHEMA %I', nsp);
    INSERT INTO insta_id.shard_registry (shard_id, schema_name) VALUES (create_shard.shard_id, nsp);
    RETURN nsp;
END
$$;
COMMENT ON FUNCTION insta_id.create_shard(int, text) IS
'Creates the schema of a logical shard (default name insta<N>) and registers it';

CREATE FUNCTION insta_id.add_id_column(tbl regclass, col name DEFAULT 'id', shard_id int DEFAULT NULL)
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
COMMENT ON FUNCTION insta_id.add_id_column(regclass, name, int) IS
'Makes a column a next_id column: bigint NOT NULL, DEFAULT next_id(shard, its own sequence). Idempotent.';

-- Checks once, before any shard is made, that template can be copied.
CREATE FUNCTION insta_id._check_template(template name)
RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad name;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = template) THEN
        RAISE EXCEPTION 'template schema % does not exist', quote_ident(template)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    -- A default that depends on a sequence but is not next_id's (nextval(),
    -- serial) would keep drawing from the template's sequence in every copy.
    SELECT c.relname INTO bad
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attrdef d ON d.adrelid = c.oid
    JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE n.nspname = template AND c.relkind = 'r'
      AND EXISTS (SELECT FROM pg_depend dep
                  WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                    AND dep.refclassid = 'pg_class'::regclass AND dep.deptype = 'n')
      AND insta_id._next_id_default_shard(c.oid, a.attname) IS NULL
    ORDER BY c.relname
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'template table %.% has a default that uses a sequence', quote_ident(template), quote_ident(bad)
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'In templates, use insta_id.next_id defaults (insta_id.add_id_column) or identity columns.';
    END IF;
END
$$;

-- Copies every table of template into schema target, with shard's next_id columns. The template
-- was checked by _check_template.
CREATE FUNCTION insta_id._copy_template(template name, target name, shard int)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    src record;
    col record;
    fk record;
BEGIN
    FOR src IN SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = template AND c.relkind = 'r' ORDER BY c.relname LOOP
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING ALL)', target, src.relname, template, src.relname);
        FOR col IN SELECT a.attname FROM pg_attribute a
                 WHERE a.attrelid = src.oid AND a.attnum > 0 AND NOT a.attisdropped
                   AND insta_id._next_id_default_shard(src.oid, a.attname) IS NOT NULL
                 ORDER BY a.attnum LOOP
            EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN %I DROP DEFAULT', target, src.relname, col.attname);
            PERFORM insta_id.add_id_column(format('%I.%I', target, src.relname)::regclass, col.attname, shard);
        END LOOP;
    END LOOP;
    -- Foreign keys, pointed at the copies when they point into the template.
    FOR fk IN SELECT k.conname, c.relname, pg_get_constraintdef(k.oid) AS def
              FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = template AND k.contype = 'f' AND c.relkind = 'r'
              ORDER BY c.relname, k.conname LOOP
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s', target, fk.relname, fk.conname,
                       replace(fk.def, 'REFERENCES ' || quote_ident(template) || '.',
                                       'REFERENCES ' || quote_ident(target) || '.'));
    END LOOP;
END
$$;

CREATE FUNCTION insta_id.create_shards(first_shard int, last_shard int, template_schema text)
RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
BEGIN
    IF first_shard IS NULL OR last_shard IS NULL OR template_schema IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_id(first_shard);
    PERFORM insta_id._check_shard_id(last_shard);
    IF last_shard < first_shard THEN
        RAISE EXCEPTION 'last_shard % is below first_shard %', last_shard, first_shard
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM insta_id._check_template(template_schema);
    FOR shard IN first_shard..last_shard LOOP
        nsp := insta_id.create_shard(shard);
        PERFORM insta_id._copy_template(template_schema, nsp, shard);
    END LOOP;
    RETURN last_shard - first_shard + 1;
END
$$;
COMMENT ON FUNCTION insta_id.create_shards(int, int, text) IS
'Creates shards first..last (schemas insta<N>), each with a copy of every table of the template schema';

CREATE FUNCTION insta_id.drop_shard(shard_id int, force boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    rel record;
    has_rows boolean;
BEGIN
    SELECT r.schema_name INTO nsp FROM insta_id.shard_registry r WHERE r.shard_id = drop_shard.shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard % does not exist', drop_shard.shard_id USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT coalesce(force, false) THEN
        FOR rel IN SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = nsp AND c.relkind IN ('r', 'p') ORDER BY c.relname LOOP
            EXECUTE format('SELECT EXISTS (SELECT FROM %s)', rel.oid::regclass) INTO has_rows;
            IF has_rows THEN
                RAISE EXCEPTION 'shard % still has rows in %', drop_shard.shard_id, rel.oid::regclass
                    USING ERRCODE = 'object_not_in_prerequisite_state',
                          HINT = 'Use insta_id.drop_shard(shard_id, force => true) to drop it with its data.';
            END IF;
        END LOOP;
    END IF;
    EXECUTE format('DROP SCHEMA IF EXISTS %I CASCADE', nsp);
    DELETE FROM insta_id.shard_registry r WHERE r.shard_id = drop_shard.shard_id;
END
$$;
COMMENT ON FUNCTION insta_id.drop_shard(int, boolean) IS
'Drops a logical shard: its schema and registry row; refuses while it has rows unless force';

CREATE FUNCTION insta_id.adopt_shard(schema_name text, shard_id int)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
BEGIN
    PERFORM insta_id._check_shard_id(adopt_shard.shard_id);
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = adopt_shard.schema_name) THEN
        RAISE EXCEPTION 'schema % does not exist', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    -- Registering a schema lets drop_shard drop it: only its owner may.
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = adopt_shard.schema_name
                   AND pg_has_role(current_user, n.nspowner, 'USAGE')) THEN
        RAISE EXCEPTION 'must be owner of schema % to adopt it as a shard', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.shard_id = adopt_shard.shard_id) THEN
        RAISE EXCEPTION 'shard % already exists', adopt_shard.shard_id USING ERRCODE = 'unique_violation';
    END IF;
    IF EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.schema_name = adopt_shard.schema_name) THEN
        RAISE EXCEPTION 'schema % is already a shard', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'unique_violation';
    END IF;
    -- Every next_id column of the schema must mint this shard's IDs.
    SELECT c.oid::regclass AS tbl, a.attname, insta_id._next_id_default_shard(c.oid, a.attname) AS shard INTO bad
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE n.nspname = adopt_shard.schema_name AND c.relkind IN ('r', 'p')
      AND insta_id._next_id_default_shard(c.oid, a.attname) <> adopt_shard.shard_id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'column "%" of % mints IDs for shard %, not %', bad.attname, bad.tbl, bad.shard, adopt_shard.shard_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO insta_id.shard_registry (shard_id, schema_name) VALUES (adopt_shard.shard_id, adopt_shard.schema_name);
END
$$;
COMMENT ON FUNCTION insta_id.adopt_shard(text, int) IS
'Registers an existing schema (for example restored from another server) as a logical shard';

-- DDL helpers are for administrators: superusers, and roles granted EXECUTE.
REVOKE EXECUTE ON FUNCTION
    insta_id.create_shard(int, text), insta_id.add_id_column(regclass, name, int),
    insta_id.create_shards(int, int, text), insta_id.drop_shard(int, boolean),
    insta_id.adopt_shard(text, int), insta_id._copy_template(name, name, int)
FROM PUBLIC;
