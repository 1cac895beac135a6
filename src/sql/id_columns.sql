-- Id columns: add_id_column gives a table an id column whose DEFAULT is
-- next_id over a sequence of its own (CACHE 32, see add_id_column).
-- search_path and privileges: as registry.sql says. Every statement on a
-- table, and every read of one, goes through the gate (gate.sql): as the
-- one owner of the table and of the code PostgreSQL runs for it (the
-- UPDATE that fills existing rows fires its triggers, statement triggers
-- even for no row; a widening re-validates foreign keys), or refused.

-- The shard id of the next_id DEFAULT of a column, or NULL when the column
-- has no such default (found through the dependency of the default on next_id).
CREATE FUNCTION insta_id._next_id_default_shard(tbl regclass, col name)
RETURNS int
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (regexp_match(pg_get_expr(d.adbin, d.adrelid), '^insta_id\.next_id\((\d+),'))[1]::int
    FROM pg_attribute a
    JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = tbl AND a.attname = col
      -- (the default's own dependencies, read by the default alone, OFFSET
      -- 0: by next_id's side, which statistics older than the shards
      -- invite, it read every next_id default of the database, 14 ms a
      -- call at 3000 shards)
      AND EXISTS (SELECT FROM (SELECT dep.refclassid, dep.refobjid FROM pg_depend dep
                               WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid OFFSET 0) dep
                  WHERE dep.refclassid = 'pg_proc'::regclass
                    AND dep.refobjid = 'insta_id.next_id(int, regclass)'::regprocedure)
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

-- The shard whose IDs a table's column mints: the one given, else its
-- schema's in the registry; checked.
CREATE FUNCTION insta_id._table_shard(tbl regclass, nsp name, shard_id int)
RETURNS int
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    shard int := _table_shard.shard_id;
BEGIN
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
    RETURN shard;
END
$$;

-- Longer than a screen: its checks (the table's shard, an existing column,
-- the lock) must all pass before the one ALTER, in one transaction.
-- Waits at most lock_timeout for each lock (the gate's, the ALTER's).
CREATE FUNCTION insta_id.add_id_column(tbl regclass, col name DEFAULT 'id', shard_id int DEFAULT NULL,
                                       lock_timeout text DEFAULT '2s')
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
    stmts text[] := '{}';
BEGIN
    IF add_id_column.lock_timeout IS NULL THEN
        RAISE EXCEPTION 'lock_timeout must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT n.nspname, c.relname INTO nsp, tblname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = tbl AND c.relkind IN ('r', 'p');
    IF NOT FOUND THEN
        RAISE EXCEPTION '% is not a table', tbl USING ERRCODE = 'wrong_object_type';
    END IF;
    shard := insta_id._table_shard(tbl, nsp, shard);

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
    -- Through the gate: filling the column fires the table's triggers and
    -- rebuilds its indexes, code run as its one owner or refused.
    PERFORM set_config('lock_timeout', add_id_column.lock_timeout, true);  -- a bad value fails here (22023)
    PERFORM insta_id._gate(nsp, ARRAY[tbl], stmts);
    RETURN seq_name::regclass;
END
$$;
COMMENT ON FUNCTION insta_id.add_id_column(regclass, name, int, text) IS
'Makes a column a next_id column: bigint NOT NULL, DEFAULT next_id(shard, its own sequence). Idempotent.';

-- Refuses (55000) a column holding a value at or above the first ID
-- next_id can mint now for shard: old keys and new IDs would meet. Returns
-- the largest value (NULL: no rows). Read through the gate: planning a
-- query on the table folds its indexes' expressions and predicates, the
-- owner's code. With row_security off, so
-- that a policy hiding rows from the owner fails the read (42501) rather
-- than hide the largest value.
CREATE FUNCTION insta_id._check_below_ids(tbl regclass, col name, shard int)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
SET row_security = off
AS $$
DECLARE
    highest bigint;
    first_id bigint := insta_id.min_id(now(), shard);
BEGIN
    highest := insta_id._gate_query(
        (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl),
        ARRAY[tbl], format('SELECT pg_catalog.max(%I)::pg_catalog.int8 FROM %s', col, tbl))::bigint;
    IF highest >= first_id THEN
        RAISE EXCEPTION 'column "%" of % holds %, not below the IDs next_id mints', col, tbl, highest
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('The first ID next_id can mint for shard %s now is %s: old keys and new IDs would meet.', shard, first_id),
                  HINT = 'Give the table a new id column instead (insta_id.add_id_column).';
    END IF;
    RETURN highest;
END
$$;

-- Longer than a screen: every check before the first change, then the
-- locks, then the changes, each step a row of the plan it returns.
-- adopt_id_column makes a live table's integer key an insta_id key in
-- place: the column keeps every value, and new rows get next_id over the
-- column's own sequence (serial's, or a new one where an identity's is
-- dropped: PostgreSQL allows no default on an identity column). It refuses
-- unless every existing value is below the first ID next_id can mint now,
-- so old keys and new ones never meet and keep their order. An integer
-- (or smallint) column becomes bigint together with every foreign-key
-- column referencing it: table rewrites under ACCESS EXCLUSIVE locks, which
-- the plan states. One transaction: all of it or nothing.
-- Locks: every relation it changes, ACCESS EXCLUSIVE. It waits at most
-- lock_timeout for the first, holding nothing, then for each other at most
-- half of deadlock_timeout: a writer holding one of those and waiting for
-- one it holds forms a deadlock with it, which it leaves before that
-- writer's deadlock check runs, so no writer is chosen as a victim. If a
-- lock is not had in time, all are let go and the whole is tried again,
-- the table first and its referencing tables first in turn, lock_retries
-- times, waiting longer between tries. Writers queue behind it for at most
-- that long, plus the changes themselves.
-- Its statements go through the gate (gate.sql): a rewrite evaluates the
-- owner's code (indexes, CHECKs, generated columns), and a widened key's
-- foreign keys are validated again over both tables.
CREATE FUNCTION insta_id.adopt_id_column(tbl regclass, col name DEFAULT 'id', shard_id int DEFAULT NULL,
                                         dry_run boolean DEFAULT false,
                                         lock_timeout text DEFAULT '2s', lock_retries int DEFAULT 10)
RETURNS TABLE (step int, relation regclass, action text, lock_mode text, rewrites boolean, estimated_rows bigint)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    tblname name;
    owner regrole;
    kind "char";
    is_partition boolean;
    shard int;
    attr record;
    widen boolean;
    seq regclass;
    seq_text text;
    seq_type regtype;
    seq_cache bigint;
    default_text text;
    existing_shard int;
    refs jsonb;
    blockers text;
    refused text;
    steps jsonb := '[]';
    s jsonb;
    highest bigint;
    attempt int := 0;
    holders text;
    locks jsonb;
    lock_rel record;
    short_timeout text;
    grantees text;
BEGIN
    IF tbl IS NULL OR col IS NULL OR dry_run IS NULL OR lock_timeout IS NULL OR lock_retries IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL (shard_id may be, for the table''s shard)'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF lock_retries < 0 THEN
        RAISE EXCEPTION 'lock_retries must be at least 0' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT n.nspname, c.relname, c.relowner, c.relkind, c.relispartition INTO nsp, tblname, owner, kind, is_partition
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl;
    IF kind IS DISTINCT FROM 'r' AND kind IS DISTINCT FROM 'p' THEN
        RAISE EXCEPTION '% is not a table', tbl USING ERRCODE = 'wrong_object_type';
    ELSIF is_partition THEN
        RAISE EXCEPTION '% is a partition', tbl
            USING ERRCODE = 'wrong_object_type',
                  HINT = format('Adopt the column of the partitioned table, %s: its partitions follow.',
                                pg_partition_root(tbl));
    END IF;
    shard := insta_id._table_shard(tbl, nsp, adopt_id_column.shard_id);
    SELECT a.attnum, a.atttypid::regtype AS typ, a.attidentity, a.attgenerated, a.atthasdef INTO attr
    FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of % does not exist', col, tbl USING ERRCODE = 'undefined_column';
    ELSIF attr.typ NOT IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype) OR attr.attgenerated <> '' THEN
        RAISE EXCEPTION 'column "%" of % is %, not an integer key', col, tbl,
                        CASE WHEN attr.attgenerated <> '' THEN 'a generated column' ELSE format('of type %s', attr.typ) END
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    existing_shard := insta_id._next_id_default_shard(tbl, col);
    IF existing_shard = shard THEN
        RAISE NOTICE 'column "%" of % already mints IDs for shard %: nothing to do', col, tbl, shard;
        RETURN;
    ELSIF existing_shard IS NOT NULL THEN
        RAISE EXCEPTION 'column "%" of % already mints IDs for shard %', col, tbl, existing_shard
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- Its sequence: the identity's, or serial's (a default of exactly
    -- nextval() of the sequence the column owns).
    seq := pg_get_serial_sequence(tbl::text, col)::regclass;
    default_text := (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d WHERE d.adrelid = tbl AND d.adnum = attr.attnum);
    IF seq IS NULL OR (attr.attidentity = '' AND default_text IS DISTINCT FROM format('nextval(%L::regclass)', seq)) THEN
        RAISE EXCEPTION 'column "%" of % is not a serial or identity column', col, tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = CASE WHEN default_text IS NULL THEN 'It has no default.'
                                ELSE format('Its default is %s.', default_text) END,
                  HINT = CASE WHEN default_text IS NULL
                              THEN 'insta_id.add_id_column gives a column without a default a next_id default and IDs for its rows.'
                              ELSE 'Its default must be nextval() of the sequence the column owns (ALTER SEQUENCE ... OWNED BY).' END;
    END IF;
    seq_text := seq::text;
    SELECT q.seqtypid::regtype, q.seqcache INTO seq_type, seq_cache FROM pg_sequence q WHERE q.seqrelid = seq;
    widen := attr.typ <> 'bigint'::regtype;

    -- The foreign-key columns that reference it and are narrower than
    -- bigint, once each: widened with it, even when it is bigint already
    -- (an integer column referencing a bigserial key could not hold the
    -- new IDs); a partitioned table's once, for all its partitions.
    SELECT coalesce(jsonb_agg(jsonb_build_object('rel', x.conrelid::regclass::text, 'oid', x.conrelid, 'col', x.attname,
                                                 'attnum', x.attnum, 'nsp', n.nspname, 'owner', c.relowner)
                              ORDER BY x.conrelid, x.attnum), '[]')
    INTO refs
    FROM (SELECT DISTINCT k.conrelid, ra.attname, ra.attnum
          FROM pg_constraint k
          JOIN LATERAL unnest(k.confkey, k.conkey) AS u(confkey, conkey) ON u.confkey = attr.attnum
          JOIN pg_attribute ra ON ra.attrelid = k.conrelid AND ra.attnum = u.conkey
          WHERE k.contype = 'f' AND k.confrelid = tbl AND k.conparentid = 0
            AND ra.atttypid IN ('integer'::regtype, 'smallint'::regtype)) x
    JOIN pg_class c ON c.oid = x.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace;
    -- A key that itself references another table would get IDs that
    -- table does not hold; a key in a partition key, IDs no partition takes.
    IF EXISTS (SELECT FROM pg_constraint k WHERE k.contype = 'f' AND k.conrelid = tbl AND attr.attnum = ANY (k.conkey)) THEN
        RAISE EXCEPTION 'column "%" of % references another table', col, tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'New rows would get IDs the referenced table does not hold.';
    END IF;
    IF EXISTS (SELECT FROM pg_partition_tree(tbl) t JOIN pg_partitioned_table p ON p.partrelid = t.relid
               JOIN pg_attribute a ON a.attrelid = t.relid AND a.attnum = ANY (p.partattrs::int2[])
               WHERE a.attname = col) THEN
        RAISE EXCEPTION 'column "%" of % is in its partition key', col, tbl
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'New IDs would fall outside the partitions made for the old keys.',
                  HINT = 'Partition by another column, or by the ID''s time once adopted (insta_id.create_partitions on a new table).';
    END IF;
    -- A shard being moved (DDL is not replicated to its copy), and a
    -- transaction whose snapshot predates the locks (the check of the
    -- largest key would miss rows committed since).
    IF NOT dry_run THEN
        IF NOT insta_id._lock(insta_id._move_lock_key(), shard, shared => true, session => false, wait => false)
           OR EXISTS (SELECT FROM insta_id_admin.moves m WHERE m.shard_id = shard AND m.side = 'arriving') THEN
            RAISE EXCEPTION 'shard % is being moved, or was moved here and is not done', shard
                USING ERRCODE = 'object_in_use',
                      DETAIL = 'DDL is not replicated: the shard''s other copy would keep the old key.',
                      HINT = 'Adopt it once the move is done (insta-id move ... done), or before it starts.';
        END IF;
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'adopt_id_column needs READ COMMITTED, not %', upper(current_setting('transaction_isolation'))
                USING ERRCODE = 'invalid_transaction_state',
                      DETAIL = 'Its check of the largest key must see every row committed before its locks.';
        END IF;
    END IF;

    -- What would make a widening fail half-way: views, rules, policies and
    -- trigger conditions that use a column to widen (PostgreSQL cannot
    -- change the type under them), refused by name before anything.
    IF widen OR refs <> '[]' THEN
        SELECT string_agg(DISTINCT pg_describe_object(d.classid, d.objid, 0), ', ') INTO blockers
        FROM pg_depend d
        WHERE d.refclassid = 'pg_class'::regclass
          AND ((widen AND d.refobjid = tbl AND d.refobjsubid = attr.attnum)
               OR (d.refobjid, d.refobjsubid) IN (SELECT (r->>'oid')::oid, (r->>'attnum')::int2 FROM jsonb_array_elements(refs) r))
          AND (d.classid IN ('pg_rewrite'::regclass, 'pg_policy'::regclass)
               OR (d.classid = 'pg_trigger'::regclass
                   AND (SELECT t.tgconstraint = 0 FROM pg_trigger t WHERE t.oid = d.objid))
               OR (d.classid = 'pg_attrdef'::regclass
                   AND (SELECT a.attgenerated <> '' FROM pg_attrdef ad JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
                        WHERE ad.oid = d.objid)));
        IF blockers IS NOT NULL THEN
            RAISE EXCEPTION 'column "%" of % cannot become bigint: other objects use it or a column referencing it', col, tbl
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = format('Used by %s.', blockers),
                      HINT = 'Drop them, adopt the column, and create them again (in one transaction, if writers must not see them missing).';
        END IF;
    END IF;

    -- A referencing table of another owner, of any type (a bigint column
    -- too): widening the key makes PostgreSQL validate each foreign key
    -- on it again with a query over both tables, planned as one owner,
    -- folding the other's index expressions.
    SELECT string_agg(DISTINCT format('%s (owned by %s)', k.conrelid::regclass, c.relowner::regrole), ', ') INTO refused
    FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
    WHERE k.contype = 'f' AND k.confrelid = tbl AND attr.attnum = ANY (k.confkey) AND c.relowner <> owner;
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'tables referencing column "%" of % have another owner than it', col, tbl
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('%s; %s is owned by %s. Their foreign keys, checked again when the columns are widened, would run one owner''s code with the other''s rights.',
                                  refused, tbl, owner),
                  HINT = 'Give the tables one owner (ALTER TABLE ... OWNER TO), then adopt the column.';
    END IF;

    -- Every change runs as the tables' one owner: the caller must be able to act as it.
    IF NOT pg_has_role(current_user, owner, CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END) THEN
        RAISE EXCEPTION 'role % may not act as %, which owns the tables adopting column "%" of % changes', current_user, owner, col, tbl
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Adopt it as the tables'' owner, or as a role that may SET ROLE to it.';
    END IF;

    -- The code PostgreSQL runs for the changes (the tables', and that of
    -- every table a foreign key links to them, partitions included) has
    -- one owner, the tables': else refused (42501), naming them, in a dry
    -- run too. Each statement below goes through the gate, which decides
    -- this again under its locks.
    PERFORM insta_id._gate_owner(nsp, ARRAY[tbl]);

    -- The plan. Step 1 locks; the rest change.
    steps := steps || jsonb_build_object('rel', tbl::text, 'lock', 'ACCESS EXCLUSIVE', 'rewrites', false,
        'sql', format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', concat_ws(', ', tbl::text,
                      (SELECT string_agg(DISTINCT r->>'rel', ', ') FROM jsonb_array_elements(refs) r WHERE (r->>'oid')::oid <> tbl))));
    steps := steps || jsonb_build_object('rel', tbl::text, 'lock', 'ACCESS EXCLUSIVE', 'rewrites', false, 'check', true,
        'sql', format('max(%I)', col));
    steps := steps || coalesce((
        SELECT jsonb_agg(jsonb_build_object('rel', x.rel, 'nsp', x.nsp, 'lock', 'ACCESS EXCLUSIVE', 'rewrites', true,
                                            'sql', format('ALTER TABLE %s %s', x.rel, x.changes)) ORDER BY x.rel)
        FROM (SELECT r->>'rel' AS rel, r->>'nsp' AS nsp,
                     string_agg(format('ALTER COLUMN %I TYPE bigint', r->>'col'), ', ' ORDER BY (r->>'attnum')::int) AS changes
              FROM jsonb_array_elements(refs) r
              WHERE (r->>'oid')::oid <> tbl
              GROUP BY 1, 2) x), '[]');
    IF attr.attidentity <> '' OR widen OR EXISTS (SELECT FROM jsonb_array_elements(refs) r WHERE (r->>'oid')::oid = tbl) THEN
        steps := steps || jsonb_build_object('rel', tbl::text, 'nsp', nsp, 'lock', 'ACCESS EXCLUSIVE', 'rewrites', widen,
            'sql', format('ALTER TABLE %s %s', tbl, concat_ws(', ',
                CASE WHEN attr.attidentity <> '' THEN format('ALTER COLUMN %I DROP IDENTITY', col) END,
                CASE WHEN widen THEN format('ALTER COLUMN %I TYPE bigint', col) END,
                (SELECT string_agg(format('ALTER COLUMN %I TYPE bigint', r->>'col'), ', ' ORDER BY (r->>'attnum')::int)
                 FROM jsonb_array_elements(refs) r WHERE (r->>'oid')::oid = tbl AND r->>'col' <> col))));
    END IF;
    -- The sequence: a new one in place of the identity's (same name, which
    -- DROP IDENTITY frees), or serial's made bigint, CACHE 32 as
    -- add_id_column makes them (the guard keeps IDs unique whatever order
    -- the values come in).
    IF attr.attidentity <> '' THEN
        steps := steps || jsonb_build_object('rel', seq_text, 'nsp', nsp, 'lock', 'ACCESS EXCLUSIVE', 'rewrites', false,
            'sql', format('CREATE SEQUENCE %s AS bigint CACHE 32 OWNED BY %s.%I', seq_text, tbl, col));
        -- next_id calls nextval(), which needs USAGE on the sequence: the
        -- roles that may INSERT into the table (an identity needed none).
        grantees := (SELECT string_agg(DISTINCT CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END, ', ')
                     FROM (SELECT (aclexplode(c.relacl)).* FROM pg_class c WHERE c.oid = tbl
                           UNION ALL
                           SELECT (aclexplode(a.attacl)).* FROM pg_attribute a WHERE a.attrelid = tbl AND a.attacl IS NOT NULL) g
                     LEFT JOIN pg_roles r ON r.oid = g.grantee
                     WHERE g.privilege_type = 'INSERT' AND g.grantee <> owner);
        IF grantees IS NOT NULL THEN
            steps := steps || jsonb_build_object('rel', seq_text, 'nsp', nsp, 'lock', 'ACCESS EXCLUSIVE', 'rewrites', false,
                'sql', format('GRANT USAGE ON SEQUENCE %s TO %s', seq_text, grantees));
        END IF;
    ELSIF seq_type <> 'bigint'::regtype OR seq_cache < 32 THEN
        steps := steps || jsonb_build_object('rel', seq_text, 'nsp', nsp, 'lock', 'SHARE ROW EXCLUSIVE', 'rewrites', false,
            'sql', format('ALTER SEQUENCE %s%s%s', seq_text, CASE WHEN seq_type <> 'bigint'::regtype THEN ' AS bigint' END,
                          CASE WHEN seq_cache < 32 THEN ' CACHE 32' END));
    END IF;
    steps := steps || jsonb_build_object('rel', tbl::text, 'nsp', nsp, 'lock', 'ACCESS EXCLUSIVE', 'rewrites', false,
        'sql', format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT insta_id.next_id(%s, %L::pg_catalog.regclass)', tbl, col, shard, seq_text));

    -- (the gate's locks too, in a dry run: every wait bounded)
    PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)
    IF dry_run THEN
        -- (without the tables' locks: what the column holds now)
        highest := insta_id._check_below_ids(tbl, col, shard);
    ELSE
        short_timeout := (SELECT greatest(CASE WHEN l.setting::int = 0 THEN d.setting::int / 2
                                               ELSE least(l.setting::int, d.setting::int / 2) END, 1)
                          FROM pg_settings l, pg_settings d WHERE l.name = 'lock_timeout' AND d.name = 'deadlock_timeout') || 'ms';
        -- What it locks: the table first, then the referencing tables.
        locks := jsonb_build_array(jsonb_build_object('rel', tbl::text, 'nsp', nsp))
                 || coalesce((SELECT jsonb_agg(DISTINCT jsonb_build_object('rel', r->>'rel', 'nsp', r->>'nsp'))
                              FROM jsonb_array_elements(refs) r WHERE (r->>'oid')::oid <> tbl), '[]');
        LOOP
            BEGIN
                -- The first relation: waited for (lock_timeout), holding
                -- nothing. The others: for at most half of
                -- deadlock_timeout, so that when a writer holding one of
                -- them waits for one this holds, this gives up first,
                -- before that writer's deadlock check could pick it as the
                -- victim. Writers lock a parent before its children (an
                -- INSERT of both, an ORM's parent then child) or after them
                -- (a child, then its foreign-key check): each try takes
                -- them in the other order than the last.
                FOR lock_rel IN
                    SELECT x.* FROM jsonb_array_elements(locks) WITH ORDINALITY x(r, i)
                    ORDER BY CASE WHEN attempt % 2 = 0 THEN x.i ELSE -x.i END
                LOOP
                    PERFORM set_config('lock_timeout', CASE WHEN lock_rel.i = CASE WHEN attempt % 2 = 0 THEN 1 ELSE jsonb_array_length(locks) END
                                                            THEN lock_timeout ELSE short_timeout END, true);
                    -- (LOCK TABLE runs no code: the owner's locks, before the gate's)
                    PERFORM insta_id._run_in_schema(lock_rel.r->>'nsp', owner,
                                                    ARRAY[format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', lock_rel.r->>'rel')]);
                END LOOP;
                -- What the changes lock besides (the sequence, a table a
                -- rebuilt foreign key reads): the short wait too, holding all.
                PERFORM set_config('lock_timeout', short_timeout, true);
                -- Under the locks no row can change: the values now are all there are.
                highest := insta_id._check_below_ids(tbl, col, shard);
                -- (the steps with a schema: the lock and the check are done above)
                PERFORM insta_id._gate(x->>'nsp', ARRAY[tbl], ARRAY[x->>'sql'])
                FROM jsonb_array_elements(steps) WITH ORDINALITY e(x, i)
                WHERE x ? 'nsp' ORDER BY i;
                PERFORM set_config('lock_timeout', lock_timeout, true);
                EXIT;
            EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
                attempt := attempt + 1;
                IF attempt > lock_retries THEN
                    SELECT string_agg(DISTINCT format('%s (process %s)', l.relation::regclass, l.pid), ', ') INTO holders
                    FROM pg_locks l
                    WHERE l.granted AND l.pid <> pg_backend_pid() AND l.locktype = 'relation' AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND l.relation IN (SELECT tbl::oid UNION SELECT (r->>'oid')::oid FROM jsonb_array_elements(refs) r);
                    RAISE EXCEPTION 'could not lock what adopting column "%" of % changes within lock_timeout (%), % times', col, tbl, lock_timeout, attempt
                        USING ERRCODE = 'lock_not_available',
                              DETAIL = concat_ws(' ', 'Nothing was changed.', 'Held by: ' || holders || '.'),
                              HINT = 'Find the long transactions holding them (pg_stat_activity), or pass a longer lock_timeout or more lock_retries; then call insta_id.adopt_id_column again.';
                END IF;
                RAISE NOTICE 'insta_id: adopting column "%" of %: busy (%), retry % of %', col, tbl, SQLERRM, attempt, lock_retries;
                -- 0.1 s, 0.2 s, 0.4 s ... up to 5 s, with jitter.
                PERFORM pg_sleep(least(0.1 * 2 ^ (attempt - 1), 5) * (0.75 + random() / 2));
            END;
        END LOOP;
    END IF;

    -- The plan, or what was done, with the rows each table holds (as
    -- ANALYZE last counted them; a partitioned table's partitions summed).
    RETURN QUERY
    SELECT e.i::int, (x->>'rel')::regclass,
           CASE WHEN (x->>'check')::boolean
                THEN format('%s = %s, below %s, the first ID next_id can mint for shard %s', x->>'sql',
                            coalesce(highest::text, 'NULL (no rows)'), insta_id.min_id(now(), shard), shard)
                ELSE x->>'sql' END,
           x->>'lock', (x->>'rewrites')::boolean,
           (SELECT sum(greatest(c.reltuples, 0))::bigint FROM pg_class c
            WHERE c.relkind <> 'S' AND c.oid IN (SELECT (x->>'rel')::regclass
                                                 UNION ALL SELECT p.relid FROM pg_partition_tree((x->>'rel')::regclass) p WHERE p.isleaf))
    FROM jsonb_array_elements(steps) WITH ORDINALITY e(x, i)
    ORDER BY e.i;
END
$$;
COMMENT ON FUNCTION insta_id.adopt_id_column(regclass, name, int, boolean, text, int) IS
'Makes a live serial, bigserial or identity key a next_id key in place: values kept, integer widened to bigint with the keys referencing it; dry_run returns the plan';
