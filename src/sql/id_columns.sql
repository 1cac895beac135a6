-- Id columns: add_id_column gives a table an id column whose DEFAULT is
-- next_id over a sequence of its own (CACHE 32, see add_id_column).
-- search_path and privileges: as registry.sql says. The ALTER and the
-- UPDATE that fills existing rows run as the table's owner (its triggers
-- fire), through _run_in_schema.

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

-- The name of a new sequence for column col of table nsp.tblname, like
-- serial's (<table>_<col>_seq, made unique if taken). Made with CACHE 32 with
-- the shared guard, so each session takes 32 values at a time instead of
-- touching the sequence's page (and WAL) per ID; the guard keeps IDs unique
-- whatever order the values come in. With 0.9.0's per-session guard (its
-- library on 15/16 not preloaded: guard_mode() 'session') a session holding
-- old cached values could repeat another session's ID, so 1 there
-- (docs/shards.md).
CREATE FUNCTION insta_id._sequence_name(nsp name, tblname name, col name)
RETURNS name
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    base text := tblname || '_' || col;
    seq_name text;
BEGIN
    -- Cut by bytes, whole characters, under the 63 bytes of a name: cut by
    -- characters, a multibyte name kept its full length, PostgreSQL cut the
    -- suffix off, and the loop below never ended.
    WHILE octet_length(base) > 59 LOOP
        base := left(base, -1);
    END LOOP;
    seq_name := base || '_seq';
    -- to_regclass looks the name up in its schema; a join on pg_class by name
    -- alone would walk every shard's relation of that name.
    WHILE to_regclass(format('%I.%I', nsp, seq_name)) IS NOT NULL LOOP
        WHILE octet_length(base) > 52 LOOP
            base := left(base, -1);
        END LOOP;
        seq_name := base || '_' || substr(md5(random()::text), 1, 6) || '_seq';
    END LOOP;
    RETURN seq_name;
END
$$;

-- Longer than a screen: its checks (the table's shard, an existing column,
-- the lock) must all pass before the one ALTER, in one transaction.
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
    seq regclass;
    seq_name text;
    owner regrole;
    stmts text[] := '{}';
BEGIN
    SELECT n.nspname, c.relname, c.relowner INTO nsp, tblname, owner
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = tbl AND c.relkind IN ('r', 'p');
    IF NOT FOUND THEN
        RAISE EXCEPTION '% is not a table', tbl USING ERRCODE = 'wrong_object_type';
    END IF;
    IF shard IS NULL THEN
        SELECT r.shard_id INTO shard FROM insta_id_admin.shard_registry r WHERE r.schema_name = nsp;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'table % is not in a logical shard', tbl
                USING ERRCODE = 'undefined_object',
                      DETAIL = format('Schema %I is not in insta_id.shards().', nsp),
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
        seq_name := format('%I.%I', nsp, insta_id._sequence_name(nsp, tblname, col));
        stmts := stmts || format('CREATE SEQUENCE %s CACHE %s', seq_name,
                                 CASE insta_id.guard_mode() WHEN 'shared' THEN 32 ELSE 1 END);
    ELSE
        seq_name := seq::text;
    END IF;

    IF col_type IS NULL THEN
        -- A new column: existing rows get IDs from the default as it is added.
        stmts := stmts || format('ALTER TABLE %s ADD COLUMN %I bigint NOT NULL DEFAULT insta_id.next_id(%s, %L::pg_catalog.regclass)',
                                 tbl, col, shard, seq_name);
    ELSE
        IF col_type <> 'bigint'::regtype THEN
            stmts := stmts || format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint', tbl, col);
        END IF;
        stmts := stmts || format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT insta_id.next_id(%s, %L::pg_catalog.regclass)',
                                 tbl, col, shard, seq_name)
                       || format('UPDATE %s SET %I = DEFAULT WHERE %I IS NULL', tbl, col, col)
                       || format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', tbl, col);
    END IF;
    stmts := stmts || format('ALTER SEQUENCE %s OWNED BY %s.%I', seq_name, tbl, col);
    -- As the table's owner: filling the column fires the table's triggers
    -- and rebuilds its indexes, the owner's code.
    PERFORM insta_id._run_in_schema(nsp, owner, stmts);
    RETURN seq_name::regclass;
END
$$;
COMMENT ON FUNCTION insta_id.add_id_column(regclass, name, int) IS
'Makes a column a next_id column: bigint NOT NULL, DEFAULT next_id(shard, its own sequence). Idempotent.';
