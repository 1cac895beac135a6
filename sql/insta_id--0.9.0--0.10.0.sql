-- insta_id 0.9.0 -> 0.10.0: no copy of a shard mints (issue 42). A copy
-- of a shard on a server that does not hold it (a move's copy being built,
-- the copy kept for a rollback) has its sequences fenced as well as its
-- tables; adopt_shard opens them. raise_high_water_mark refuses a mark
-- further ahead than a move needs unless told. Every function below is the one in
-- src/sql/; t/007_upgrade checks that an updated database
-- matches a fresh 0.10.0 install.
\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.10.0'" to load this file. \quit

-- The sequences of a copy this server does not hold (a copy being moved
-- here, the copy a move away from here keeps for its rollback) are fenced
-- too: a client calling next_id or nextval() on them directly would mint
-- the shard's IDs beside the server holding it. Each is narrowed to the
-- value it last issued, NO CYCLE: nextval() fails (2200H, PostgreSQL's
-- "reached maximum value"), next_id refuses first (55006, naming the
-- server holding the shard), and other sessions' cached values go with the
-- sequence's rewrite. Its own range, start and cycle are kept here and
-- put back when the shard is registered here (adopt_shard), in the same
-- transaction. Keyed by OID: a copy is dropped (move_release) or adopted
-- where it is, never dumped and restored as one, so pg_dump leaves these
-- rows out.
CREATE TABLE insta_id_admin.sequence_fences (
    seq         oid    PRIMARY KEY,
    schema_name name   NOT NULL,
    shard_id    int    NOT NULL CHECK (shard_id BETWEEN 0 AND 8191),
    min_value   bigint NOT NULL,
    max_value   bigint NOT NULL,
    start_value bigint NOT NULL,
    cycle       boolean NOT NULL,
    -- The state when fenced: a sequence not yet used (is_called false) is
    -- marked used so that not even its first value is issued, and unmarked
    -- when the fence opens.
    last_value  bigint NOT NULL,
    is_called   boolean NOT NULL
);
COMMENT ON TABLE insta_id_admin.sequence_fences IS
'Sequences of a shard''s copy this server does not hold, narrowed so that they mint nothing, with what adopt_shard puts back; not dumped';

-- Fences every sequence of schema nsp (a copy of shard shard_id) that is
-- not fenced yet. Returns how many. The caller owns them (ALTER SEQUENCE).
CREATE FUNCTION insta_id._fence_sequences(nsp name, shard_id int)
RETURNS int
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seq record;
    state record;
    fenced int := 0;
BEGIN
    FOR seq IN SELECT c.oid, q.* FROM pg_class c JOIN pg_sequence q ON q.seqrelid = c.oid
               WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = _fence_sequences.nsp)
                 AND c.relkind = 'S'
                 AND NOT EXISTS (SELECT FROM insta_id_admin.sequence_fences f WHERE f.seq = c.oid)
               ORDER BY c.relname LOOP
        -- By OID (regclass prints it qualified): never a name parsed into a query.
        EXECUTE format('SELECT last_value, is_called FROM %s', seq.oid::regclass) INTO state;
        INSERT INTO insta_id_admin.sequence_fences
        VALUES (seq.oid, _fence_sequences.nsp, _fence_sequences.shard_id, seq.seqmin, seq.seqmax, seq.seqstart,
                seq.seqcycle, state.last_value, state.is_called);
        IF NOT state.is_called THEN
            PERFORM setval(seq.oid, state.last_value, true);
        END IF;
        -- Two values, the one issued last and the one before it in the
        -- increment's direction: MINVALUE must stay below MAXVALUE.
        EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s NO CYCLE', seq.oid::regclass,
                       CASE WHEN seq.seqincrement > 0 THEN state.last_value - 1 ELSE state.last_value END,
                       CASE WHEN seq.seqincrement > 0 THEN state.last_value ELSE state.last_value + 1 END,
                       state.last_value);
        fenced := fenced + 1;
    END LOOP;
    RETURN fenced;
END
$$;

-- Opens the fence of schema nsp's sequences: each gets its own range,
-- start, cycle and, if it was not yet used when fenced and has not been
-- set since, its unused state back. Forgets the fences of sequences that
-- are gone. Returns how many were opened.
CREATE FUNCTION insta_id._unfence_sequences(nsp name)
RETURNS int
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f record;
    now_last bigint;
    opened int := 0;
BEGIN
    FOR f IN SELECT s.* FROM insta_id_admin.sequence_fences s JOIN pg_class c ON c.oid = s.seq
             WHERE s.schema_name = _unfence_sequences.nsp ORDER BY c.relname LOOP
        EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s %s', f.seq::regclass,
                       f.min_value, f.max_value, f.start_value, CASE WHEN f.cycle THEN 'CYCLE' ELSE 'NO CYCLE' END);
        IF NOT f.is_called THEN
            EXECUTE format('SELECT last_value FROM %s', f.seq::regclass) INTO now_last;
            IF now_last = f.last_value THEN
                PERFORM setval(f.seq, f.last_value, false);
            END IF;
        END IF;
        DELETE FROM insta_id_admin.sequence_fences s WHERE s.seq = f.seq;
        opened := opened + 1;
    END LOOP;
    DELETE FROM insta_id_admin.sequence_fences s
    WHERE s.schema_name = _unfence_sequences.nsp AND NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = s.seq);
    RETURN opened;
END
$$;

-- next_id's refusal on a fenced sequence (src/functions.rs calls it when a
-- sequence has a fence's shape: two values, NO CYCLE): 55006 naming the
-- server that holds the shard, as the mover recorded it; false when the
-- sequence is not fenced. SECURITY DEFINER: the caller of next_id has no
-- USAGE on insta_id_admin; it reads two rows and raises, nothing else.
CREATE FUNCTION insta_id._check_sequence_fence(seq oid)
RETURNS boolean
LANGUAGE plpgsql STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f insta_id_admin.sequence_fences;
    holder text;
BEGIN
    SELECT * INTO f FROM insta_id_admin.sequence_fences s WHERE s.seq = _check_sequence_fence.seq;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT m.peer INTO holder FROM insta_id_admin.moves m WHERE m.shard_id = f.shard_id AND m.schema_name = f.schema_name;
    RAISE EXCEPTION 'sequence %.% belongs to a copy of shard % that this server does not hold',
                    quote_ident(f.schema_name), quote_ident((SELECT c.relname FROM pg_class c WHERE c.oid = f.seq)), f.shard_id
        USING ERRCODE = 'object_in_use',
              DETAIL = 'A copy being moved here, or the copy a move away from here keeps for its rollback: its sequences mint nothing until the shard is registered here.',
              HINT = CASE WHEN holder IS NULL
                          THEN 'No move of the shard is recorded here: insta-id status names the server that holds it.'
                          ELSE format('Shard %s is on %s: mint its IDs there (a router does).', f.shard_id, holder) END;
END
$$;

CREATE OR REPLACE FUNCTION insta_id.move_done(shard_id int, side text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    forgotten boolean;
BEGIN
    IF num_nulls(move_done.shard_id, move_done.side) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM insta_id_admin.moves m WHERE m.shard_id = move_done.shard_id AND m.side = move_done.side;
    forgotten := FOUND;
    DELETE FROM insta_id_admin.sequence_fences s
    WHERE s.shard_id = move_done.shard_id AND NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = s.seq);
    RETURN forgotten;
END
$$;

CREATE OR REPLACE FUNCTION insta_id.move_fence(schema_name name, shard_id int)
RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp oid;
    rel record;
    fenced int := 0;
BEGIN
    IF num_nulls(move_fence.schema_name, move_fence.shard_id) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_id(move_fence.shard_id);
    SELECT n.oid INTO nsp FROM pg_namespace n WHERE n.nspname = move_fence.schema_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schema % does not exist', quote_ident(move_fence.schema_name) USING ERRCODE = 'invalid_schema_name';
    END IF;
    IF move_fence.schema_name IN ('insta_id', 'insta_id_admin', 'insta_id_mark', 'information_schema') OR move_fence.schema_name LIKE 'pg\_%' THEN
        RAISE EXCEPTION 'schema % is not a shard''s', quote_ident(move_fence.schema_name) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r
               WHERE r.shard_id = move_fence.shard_id OR r.schema_name = move_fence.schema_name) THEN
        RAISE EXCEPTION 'shard % or schema % is registered on this server: a move''s fence would never open',
                        move_fence.shard_id, quote_ident(move_fence.schema_name)
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    FOR rel IN SELECT c.relname FROM pg_class c WHERE c.relnamespace = nsp AND c.relkind IN ('r', 'p') ORDER BY c.relname LOOP
        EXECUTE format('CREATE TRIGGER insta_id_move_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %I.%I
                        FOR EACH STATEMENT EXECUTE FUNCTION insta_id._move_fence(%L)',
                       move_fence.schema_name, rel.relname, move_fence.shard_id);
        fenced := fenced + 1;
    END LOOP;
    PERFORM insta_id._fence_sequences(move_fence.schema_name, move_fence.shard_id);
    RETURN fenced;
END
$$;

CREATE OR REPLACE FUNCTION insta_id.move_carry(shard_id int, state jsonb)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    seq record;
    found_rel record;
    target regclass;
    here_last bigint;
    increment bigint;
    recorded insta_id_admin.moves;
    missing text;
BEGIN
    IF num_nulls(move_carry.shard_id, move_carry.state) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(move_carry.state) IS DISTINCT FROM 'object' OR jsonb_typeof(move_carry.state -> 'schema') IS DISTINCT FROM 'string'
       OR jsonb_typeof(move_carry.state -> 'shard') IS DISTINCT FROM 'number'
       OR jsonb_typeof(move_carry.state -> 'tables') IS DISTINCT FROM 'array'
       OR jsonb_typeof(move_carry.state -> 'sequences') IS DISTINCT FROM 'object'
       OR jsonb_typeof(move_carry.state -> 'history') IS DISTINCT FROM 'array'
       OR coalesce(jsonb_typeof(move_carry.state -> 'mark'), 'missing') NOT IN ('string', 'null')
       OR EXISTS (SELECT FROM jsonb_each(move_carry.state -> 'sequences') e
                  WHERE jsonb_typeof(e.value) IS DISTINCT FROM 'array' OR jsonb_array_length(e.value) <> 2
                     OR jsonb_typeof(e.value -> 0) IS DISTINCT FROM 'number' OR (e.value ->> 0) !~ '^-?[0-9]{1,19}$'
                     OR jsonb_typeof(e.value -> 1) IS DISTINCT FROM 'boolean') THEN
        RAISE EXCEPTION 'not the state of a move (insta_id.move_state)' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (move_carry.state ->> 'shard') IS DISTINCT FROM move_carry.shard_id::text THEN
        RAISE EXCEPTION 'the state is shard %''s, not shard %''s', move_carry.state ->> 'shard', move_carry.shard_id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    nsp := move_carry.state ->> 'schema';
    SELECT * INTO recorded FROM insta_id_admin.moves m
    WHERE m.shard_id = move_carry.shard_id AND m.schema_name = nsp
      AND (m.side = 'arriving' OR m.step IN ('reserved', 'returning')) FOR UPDATE;
    IF NOT FOUND OR EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = move_carry.shard_id) THEN
        RAISE EXCEPTION 'no move of shard % into schema % waits for its cutover here', move_carry.shard_id, quote_ident(nsp)
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF recorded.reserve_until < clock_timestamp() THEN
        RAISE EXCEPTION 'the rollback window of shard %''s move closed at %', move_carry.shard_id, recorded.reserve_until
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'The shard stays on the server it moved to; insta-id move --release drops the copy kept here.';
    END IF;
    SELECT string_agg(quote_ident(t.name), ', ' ORDER BY t.name) INTO missing
    FROM jsonb_array_elements_text(move_carry.state -> 'tables') t(name)
    WHERE NOT EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = nsp AND c.relname = t.name AND c.relkind IN ('r', 'p'));
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'the copy of shard % lacks tables of the old server: %', move_carry.shard_id, missing
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'They were made after the schema was copied; their rows would be lost. Undo the move and move it again.';
    END IF;
    -- The copy's sequences are fenced (move_fence): opened to be compared
    -- and set, and fenced again below, in this transaction.
    PERFORM insta_id._unfence_sequences(nsp);
    FOR seq IN SELECT e.key, (e.value ->> 0)::bigint AS last_value, (e.value ->> 1)::boolean AS is_called
               FROM jsonb_each(move_carry.state -> 'sequences') e ORDER BY e.key LOOP
        -- By OID from the catalog, never a name parsed into a query: the
        -- copy's owner may have put a view with that name in its place,
        -- whose functions planning would run as this caller.
        SELECT c.oid, c.relkind INTO found_rel FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = nsp AND c.relname = seq.key;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'relation "%.%" does not exist', nsp, seq.key USING ERRCODE = 'undefined_table';
        ELSIF found_rel.relkind <> 'S' THEN
            RAISE EXCEPTION '%.% is not a sequence', quote_ident(nsp), quote_ident(seq.key) USING ERRCODE = 'wrong_object_type';
        END IF;
        target := found_rel.oid;
        -- NULL until the copy's sequence issued a value (is_called).
        here_last := pg_sequence_last_value(target);
        SELECT q.seqincrement INTO increment FROM pg_sequence q WHERE q.seqrelid = target;
        -- Refused when the copy issued a value the old server's sequence
        -- would issue next (in the increment's direction).
        IF here_last IS NOT NULL AND sign(increment) * (here_last::numeric - seq.last_value
                                                       - CASE WHEN seq.is_called THEN increment ELSE 0 END) >= 0 THEN
            RAISE EXCEPTION 'sequence % of the copy is past the old server''s (% against %)', target, here_last, seq.last_value
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'It was used on this server during the move; carrying the old value could repeat its values.';
        END IF;
        PERFORM setval(target, seq.last_value, seq.is_called);
    END LOOP;
    PERFORM insta_id._fence_sequences(nsp, move_carry.shard_id);
    IF move_carry.state ->> 'mark' IS NOT NULL THEN
        PERFORM insta_id.raise_high_water_mark((move_carry.state ->> 'mark')::timestamptz);
    END IF;
    DELETE FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp;
    INSERT INTO insta_id_admin.applied_migrations (schema_name, migration, applied_at)
    SELECT nsp, h.migration, h.applied_at
    FROM jsonb_to_recordset(move_carry.state -> 'history') AS h(migration text, applied_at timestamptz);
    PERFORM insta_id.move_step(move_carry.shard_id, recorded.side,
                               CASE recorded.side WHEN 'arriving' THEN 'sequences' ELSE 'returning' END, nsp, recorded.peer);
    RETURN insta_id.high_water_mark();
END
$$;

CREATE OR REPLACE FUNCTION insta_id.move_release(shard_id int)
RETURNS name
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    recorded insta_id_admin.moves;
BEGIN
    IF move_release.shard_id IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO recorded FROM insta_id_admin.moves m
    WHERE m.shard_id = move_release.shard_id AND m.side = 'leaving' AND m.step IN ('reserved', 'returning') FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no copy of shard % is kept on this server for a rollback', move_release.shard_id
            USING ERRCODE = 'undefined_object';
    END IF;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r
               WHERE r.shard_id = move_release.shard_id OR r.schema_name = recorded.schema_name) THEN
        RAISE EXCEPTION 'shard % or schema % is registered on this server: not a copy kept for a rollback',
                        move_release.shard_id, quote_ident(recorded.schema_name)
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF EXISTS (SELECT FROM pg_subscription_rel s JOIN pg_class c ON c.oid = s.srrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = recorded.schema_name) THEN
        RAISE EXCEPTION 'a subscription still applies changes into schema %', quote_ident(recorded.schema_name)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Drop the move''s subscription back (insta_back_<shard>) first: insta-id move --release does.';
    END IF;
    -- Registered for this transaction only, so that drop_shard's checks and
    -- locks decide what goes.
    INSERT INTO insta_id_admin.shard_registry (shard_id, schema_name) VALUES (move_release.shard_id, recorded.schema_name);
    PERFORM insta_id.drop_shard(move_release.shard_id, force => true);
    DELETE FROM insta_id_admin.sequence_fences s WHERE s.schema_name = recorded.schema_name;
    DELETE FROM insta_id_admin.moves m WHERE m.shard_id = move_release.shard_id AND m.side = 'leaving';
    RETURN recorded.schema_name;
END
$$;

CREATE OR REPLACE FUNCTION insta_id.adopt_shard(schema_name text, shard_id int)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
BEGIN
    PERFORM insta_id._check_shard_id(adopt_shard.shard_id);
    PERFORM insta_id._check_name(adopt_shard.schema_name);
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = adopt_shard.schema_name) THEN
        RAISE EXCEPTION 'schema % does not exist', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    -- A shard is a schema drop_shard may drop and migrate may change.
    IF adopt_shard.schema_name IN ('public', 'insta_id', 'insta_id_admin', 'insta_id_mark', 'information_schema') OR adopt_shard.schema_name LIKE 'pg\_%'
       OR EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.template_schema = adopt_shard.schema_name)
       OR EXISTS (SELECT FROM insta_id_admin.migrations m WHERE m.template_schema = adopt_shard.schema_name) THEN
        RAISE EXCEPTION 'schema % cannot be a shard', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'It is public, one of insta_id''s own schemas, a system schema or the template of shards.';
    END IF;
    -- Registering a schema lets drop_shard drop it: only its owner may.
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = adopt_shard.schema_name
                   AND pg_has_role(current_user, n.nspowner, 'USAGE')) THEN
        RAISE EXCEPTION 'must be owner of schema % to adopt it as a shard', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = adopt_shard.shard_id) THEN
        RAISE EXCEPTION 'shard % already exists', adopt_shard.shard_id USING ERRCODE = 'unique_violation';
    END IF;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.schema_name = adopt_shard.schema_name) THEN
        RAISE EXCEPTION 'schema % is already a shard', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'unique_violation';
    END IF;
    -- Every next_id column of the schema must mint this shard's IDs.
    -- (the schema by OID: the planner filters pg_class to it before the
    -- function runs on a row, whatever its statistics say)
    SELECT c.oid::regclass AS tbl, a.attname, insta_id._next_id_default_shard(c.oid, a.attname) AS shard INTO bad
    FROM pg_class c
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = adopt_shard.schema_name)
      AND c.relkind IN ('r', 'p')
      AND insta_id._next_id_default_shard(c.oid, a.attname) <> adopt_shard.shard_id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'column "%" of % mints IDs for shard %, not %', bad.attname, bad.tbl, bad.shard, adopt_shard.shard_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO insta_id_admin.shard_registry (shard_id, schema_name) VALUES (adopt_shard.shard_id, adopt_shard.schema_name);
    -- A move's copy becomes the shard: its sequences mint again (moves.sql).
    IF EXISTS (SELECT FROM insta_id_admin.sequence_fences f WHERE f.schema_name = adopt_shard.schema_name) THEN
        PERFORM insta_id._unfence_sequences(adopt_shard.schema_name);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION insta_id.shard_admin_privileges()
RETURNS TABLE (privilege text, object text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    VALUES
        ('EXECUTE', 'FUNCTION insta_id.create_shard(int, text)'),
        ('EXECUTE', 'FUNCTION insta_id.create_shards(int, int, text)'),
        ('EXECUTE', 'PROCEDURE insta_id.create_shards_in_batches(int, int, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.add_id_column(regclass, name, int)'),
        ('EXECUTE', 'FUNCTION insta_id.drop_shard(int, boolean)'),
        ('EXECUTE', 'FUNCTION insta_id.adopt_shard(text, int)'),
        ('EXECUTE', 'PROCEDURE insta_id.migrate(text, text, text, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.shard_drift(text, int, int)'),
        ('EXECUTE', 'FUNCTION insta_id.lock_shard_for_move(int)'),
        -- what they call
        ('EXECUTE', 'FUNCTION insta_id._check_lock_budget(jsonb, int, int, text)'),
        ('EXECUTE', 'FUNCTION insta_id._check_name(text)'),
        ('EXECUTE', 'FUNCTION insta_id._check_owners(jsonb)'),
        ('EXECUTE', 'FUNCTION insta_id._check_shard_id(int)'),
        ('EXECUTE', 'FUNCTION insta_id._check_shard_range(int, int, text)'),
        ('EXECUTE', 'FUNCTION insta_id._check_shard_range_bounds(int, int)'),
        ('EXECUTE', 'FUNCTION insta_id._check_template(name)'),
        ('EXECUTE', 'FUNCTION insta_id._code_owner(name)'),
        ('EXECUTE', 'FUNCTION insta_id._copy_planned(jsonb, name, int)'),
        ('EXECUTE', 'FUNCTION insta_id._create_shard_batch(int, int, jsonb)'),
        ('EXECUTE', 'FUNCTION insta_id._deparse(name, text, oid, pg_node_tree, int)'),
        ('EXECUTE', 'FUNCTION insta_id._describe_schemas(oid[])'),
        ('EXECUTE', 'FUNCTION insta_id._grant(jsonb, text, text)'),
        ('EXECUTE', 'FUNCTION insta_id._grant_statements(jsonb, text, text, boolean)'),
        ('EXECUTE', 'FUNCTION insta_id._grants(aclitem[], oid)'),
        ('EXECUTE', 'FUNCTION insta_id._identifier_list(text)'),
        ('EXECUTE', 'FUNCTION insta_id._lock(int, int, boolean, boolean, boolean)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_holder(int, int)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_object(oid, oid)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_schema(oid)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_table_capacity()'),
        ('EXECUTE', 'FUNCTION insta_id._lock_template_shared()'),
        ('EXECUTE', 'FUNCTION insta_id._migrations_of(name)'),
        ('EXECUTE', 'FUNCTION insta_id._move_lock_key()'),
        ('EXECUTE', 'FUNCTION insta_id._names_schema(text, name)'),
        ('EXECUTE', 'FUNCTION insta_id._next_id_default_shard(regclass, name)'),
        ('EXECUTE', 'FUNCTION insta_id._object_owner(oid, oid)'),
        ('EXECUTE', 'FUNCTION insta_id._options(text[])'),
        ('EXECUTE', 'FUNCTION insta_id._run_in_schema(name, regrole, text[])'),
        ('EXECUTE', 'FUNCTION insta_id._schema_lock_key()'),
        ('EXECUTE', 'FUNCTION insta_id._sequence_name(name, name, name)'),
        ('EXECUTE', 'FUNCTION insta_id._shard_schema(int)'),
        ('EXECUTE', 'FUNCTION insta_id._template_objects(name)'),
        ('EXECUTE', 'FUNCTION insta_id._template_plan(name)'),
        ('EXECUTE', 'FUNCTION insta_id._tied_to_schema(oid)'),
        ('EXECUTE', 'FUNCTION insta_id._unfence_sequences(name)'),
        ('EXECUTE', 'FUNCTION insta_id._unqualified_create(text, text, name, name)'),
        -- what they read and write: insta_id's tables (what PUBLIC reads of
        -- them goes through functions, insta_id.shards() and the like)
        ('USAGE', 'SCHEMA insta_id_admin'),
        ('SELECT, INSERT, UPDATE, DELETE', 'TABLE insta_id_admin.shard_registry'),
        ('SELECT, INSERT', 'TABLE insta_id_admin.migrations'),
        ('SELECT, INSERT, DELETE', 'TABLE insta_id_admin.applied_migrations'),
        -- which shards a move holds here: migrate skips them
        ('SELECT (shard_id, side)', 'TABLE insta_id_admin.moves'),
        -- a move's copy adopted: its sequences' fences opened
        ('SELECT, DELETE', 'TABLE insta_id_admin.sequence_fences')
$$;

-- raise_high_water_mark is bounded by max_lead + slack (issue 42).
DROP FUNCTION insta_id.raise_high_water_mark(timestamptz);
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

REVOKE ALL ON FUNCTION insta_id._fence_sequences(name, int), insta_id._unfence_sequences(name),
    insta_id._check_sequence_fence(oid), insta_id.raise_high_water_mark(timestamptz, interval) FROM PUBLIC;

-- Delegated shard administrators (grant_shard_admin) get what adopt_shard
-- now uses.
DO $$
DECLARE
    admin record;
BEGIN
    FOR admin IN SELECT DISTINCT a.grantee::regrole AS role
                 FROM pg_proc p, aclexplode(p.proacl) a
                 WHERE p.oid = 'insta_id.adopt_shard(text, int)'::regprocedure AND a.privilege_type = 'EXECUTE'
                   AND a.grantee <> 0 AND a.grantee <> p.proowner LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION insta_id._unfence_sequences(name) TO %s', admin.role);
        EXECUTE format('GRANT SELECT, DELETE ON TABLE insta_id_admin.sequence_fences TO %s', admin.role);
    END LOOP;
END
$$;

-- The copies this server has now, which 0.9.0 fenced by their tables only:
-- a move's copy arriving here, and one kept for a rollback.
SELECT insta_id._fence_sequences(m.schema_name, m.shard_id)
FROM insta_id_admin.moves m
WHERE (m.side = 'arriving' OR m.step IN ('reserved', 'returning'))
  AND EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = m.schema_name)
  AND NOT EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = m.shard_id OR r.schema_name = m.schema_name);
