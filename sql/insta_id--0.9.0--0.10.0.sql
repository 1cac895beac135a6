-- insta_id 0.9.0 -> 0.10.0: no copy of a shard mints (issue 42). A copy
-- of a shard on a server that does not hold it (a move's copy being built,
-- the copy kept for a rollback) has its sequences fenced as well as its
-- tables; the mover opens them when it adopts the shard (move_open).
-- raise_high_water_mark refuses a mark further ahead than a move needs
-- unless told. shortcode and from_shortcode, id_range and made_during,
-- adopt_id_column are new (issue 43). Every
-- function below is the one in src/sql/; t/007_upgrade
-- checks that an updated database matches a fresh 0.10.0 install.
\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.10.0'" to load this file. \quit

-- The sequences of a copy this server does not hold (a copy being moved
-- here, the copy a move away from here keeps for its rollback) are fenced
-- too: a client calling next_id or nextval() on them directly would mint
-- the shard's IDs beside the server holding it. Each is narrowed to two
-- values, the one it issued last and its neighbour, NO CYCLE, and marked
-- used: nextval() fails (2200H, PostgreSQL's "reached maximum value"),
-- next_id refuses first (55006, naming the server holding the shard), and
-- other sessions' cached values go with the sequence's rewrite. Its own
-- range, start and cycle, and the state to put back, are kept here;
-- move_carry sets that state, and move_open opens the fence, which
-- move_step calls when the adoption's step is recorded. Keyed by OID and
-- schema: a copy is dropped (move_release) or adopted where it is, never
-- dumped and restored as one, so pg_dump leaves these rows out.
CREATE TABLE insta_id_admin.sequence_fences (
    seq         oid    PRIMARY KEY,
    schema_name name   NOT NULL,
    shard_id    int    NOT NULL CHECK (shard_id BETWEEN 0 AND 8191),
    min_value   bigint NOT NULL,
    max_value   bigint NOT NULL,
    start_value bigint NOT NULL,
    cycle       boolean NOT NULL,
    -- The state move_open puts back: last_value and is_called.
    last_value  bigint NOT NULL,
    is_called   boolean NOT NULL
);
COMMENT ON TABLE insta_id_admin.sequence_fences IS
'Sequences of a shard''s copy this server does not hold, narrowed so that they mint nothing, with what move_open puts back; not dumped';

-- Fences one sequence (seq) of schema nsp, a copy of
-- shard shard_id, at the state (last_value, is_called): records it (an
-- existing record keeps the sequence's own range, start and cycle), sets
-- the sequence used at the fence's value, and narrows it to two values.
-- The caller owns the sequence (ALTER SEQUENCE). One rewrite of it.
CREATE FUNCTION insta_id._fence_sequence(seq oid, nsp name, shard_id int, last_value bigint, is_called boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
    low bigint;
    high bigint;
    at bigint := _fence_sequence.last_value;
BEGIN
    SELECT s.* INTO STRICT q FROM pg_sequence s WHERE s.seqrelid = _fence_sequence.seq;
    low := CASE q.seqtypid WHEN 'int2'::regtype THEN -32768 WHEN 'int4'::regtype THEN -2147483648
                           ELSE -9223372036854775808 END;
    high := CASE q.seqtypid WHEN 'int2'::regtype THEN 32767 WHEN 'int4'::regtype THEN 2147483647
                            ELSE 9223372036854775807 END;
    INSERT INTO insta_id_admin.sequence_fences
    VALUES (q.seqrelid, _fence_sequence.nsp, _fence_sequence.shard_id, q.seqmin, q.seqmax, q.seqstart, q.seqcycle,
            _fence_sequence.last_value, _fence_sequence.is_called)
    ON CONFLICT ON CONSTRAINT sequence_fences_pkey DO UPDATE SET last_value = excluded.last_value, is_called = excluded.is_called;
    -- nextval() would leave the two values in the increment's direction:
    -- the fence's value is their end on that side (the state's, or next to
    -- it at the bound of the sequence's type).
    IF q.seqincrement > 0 THEN
        at := greatest(at, low + 1);
    ELSE
        at := least(at, high - 1);
    END IF;
    -- (RESTART: the range is checked against it, not against the value now,
    -- which an earlier fence may have put outside it.)
    EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s RESTART %s NO CYCLE', q.seqrelid::regclass,
                   CASE WHEN q.seqincrement > 0 THEN at - 1 ELSE at END,
                   CASE WHEN q.seqincrement > 0 THEN at ELSE at + 1 END, at, at);
    PERFORM setval(q.seqrelid, at, true);
END
$$;

-- Fences every sequence of schema nsp (a copy of shard shard_id) not
-- fenced yet, at its present state, after forgetting the fences of
-- sequences that are gone or elsewhere. Returns how many.
CREATE FUNCTION insta_id._fence_sequences(nsp name, shard_id int)
RETURNS int
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q record;
    state record;
    fenced int := 0;
BEGIN
    DELETE FROM insta_id_admin.sequence_fences f
    WHERE NOT EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE c.oid = f.seq AND c.relkind = 'S' AND n.nspname = f.schema_name);
    FOR q IN SELECT s.* FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
             WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = _fence_sequences.nsp)
               AND c.relkind = 'S'
               AND NOT EXISTS (SELECT FROM insta_id_admin.sequence_fences f WHERE f.seq = c.oid)
             ORDER BY c.relname LOOP
        -- By OID (regclass prints it qualified): never a name parsed into a query.
        EXECUTE format('SELECT last_value, is_called FROM %s', q.seqrelid::regclass) INTO state;
        PERFORM insta_id._fence_sequence(q.seqrelid, _fence_sequences.nsp, _fence_sequences.shard_id, state.last_value, state.is_called);
        fenced := fenced + 1;
    END LOOP;
    RETURN fenced;
END
$$;

-- The fence of a shard's copy opened, in the transaction that adopts it
-- (move_step does, when the mover records the adoption once the old server
-- has let the shard go; the same for a rollback on the old server; by hand
-- after adopt_shard of a copy left by a move): each sequence of
-- the shard's schema gets its own range, start and cycle back, and the
-- state move_carry set. Returns how many sequences. 42704 for a shard not
-- registered here; 22004 for NULL. Not PUBLIC's.
CREATE FUNCTION insta_id.move_open(shard_id int)
RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    f record;
    opened int := 0;
BEGIN
    IF move_open.shard_id IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    nsp := insta_id._shard_schema(move_open.shard_id);
    FOR f IN SELECT s.* FROM insta_id_admin.sequence_fences s JOIN pg_class c ON c.oid = s.seq
             WHERE s.schema_name = nsp AND c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = nsp)
             ORDER BY c.relname LOOP
        -- RESTART at the recorded value, as _fence_sequence does: whatever
        -- was set inside the fence meanwhile, and the range checked against
        -- it alone. RESTART leaves it unused; used, setval says so.
        EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s RESTART %s %s', f.seq::regclass,
                       f.min_value, f.max_value, f.start_value, f.last_value,
                       CASE WHEN f.cycle THEN 'CYCLE' ELSE 'NO CYCLE' END);
        IF f.is_called THEN
            PERFORM setval(f.seq, f.last_value, true);
        END IF;
        opened := opened + 1;
    END LOOP;
    DELETE FROM insta_id_admin.sequence_fences s WHERE s.schema_name = nsp;
    RETURN opened;
END
$$;
COMMENT ON FUNCTION insta_id.move_open(int) IS
'Opens the fence of the sequences of a shard''s copy adopted here (move_step does, in the adoption''s transaction)';

-- next_id's refusal on a fenced sequence (src/functions.rs calls it when a
-- sequence the caller may use has a fence's shape: two values, NO CYCLE):
-- 55006 naming the server that holds the shard, as the mover recorded it;
-- false when the sequence is not fenced. SECURITY DEFINER: the caller of
-- next_id has no USAGE on insta_id_admin; it reads three rows and raises,
-- nothing else.
CREATE FUNCTION insta_id._check_sequence_fence(seq oid)
RETURNS boolean
LANGUAGE plpgsql STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f insta_id_admin.sequence_fences;
    seqname text;
    holder text;
BEGIN
    SELECT s.* INTO f FROM insta_id_admin.sequence_fences s JOIN pg_class c ON c.oid = s.seq
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE s.seq = _check_sequence_fence.seq AND n.nspname = s.schema_name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT format('%I.%I', n.nspname, c.relname) INTO seqname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = f.seq;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = f.shard_id AND r.schema_name = f.schema_name) THEN
        RAISE EXCEPTION 'sequence % of shard % is still fenced by the move that brought the shard here', seqname, f.shard_id
            USING ERRCODE = 'object_in_use',
                  HINT = format('SELECT insta_id.move_open(%s) opens it (insta-id move does, when it adopts the shard).', f.shard_id);
    END IF;
    SELECT m.peer INTO holder FROM insta_id_admin.moves m WHERE m.shard_id = f.shard_id AND m.schema_name = f.schema_name;
    RAISE EXCEPTION 'sequence % belongs to a copy of shard % that this server does not hold', seqname, f.shard_id
        USING ERRCODE = 'object_in_use',
              DETAIL = 'A copy being moved here, or the copy a move away from here keeps for its rollback: its sequences mint nothing until the shard is adopted here.',
              HINT = CASE WHEN holder IS NULL
                          THEN 'No move of the shard is recorded here: insta-id status names the server that holds it.'
                          ELSE format('Shard %s is on %s: mint its IDs there (a router does).', f.shard_id, holder) END;
END
$$;

CREATE OR REPLACE FUNCTION insta_id.move_step(shard_id int, side text, step text, schema_name name, peer text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    found_row insta_id_admin.moves;
BEGIN
    IF num_nulls(move_step.shard_id, move_step.side, move_step.step, move_step.schema_name, move_step.peer) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_id(move_step.shard_id);
    IF move_step.side NOT IN ('leaving', 'arriving') THEN
        RAISE EXCEPTION 'a move''s side is ''leaving'' or ''arriving'', not %', quote_literal(move_step.side)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT move_step.step = ANY (insta_id._move_steps(move_step.side)) THEN
        RAISE EXCEPTION '% is not a step of the % side of a move', quote_literal(move_step.step), move_step.side
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Its steps: %s.', array_to_string(insta_id._move_steps(move_step.side), ', '));
    END IF;
    SELECT * INTO found_row FROM insta_id_admin.moves m WHERE m.shard_id = move_step.shard_id FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO insta_id_admin.moves (shard_id, side, schema_name, peer, step, started_at, steps)
        VALUES (move_step.shard_id, move_step.side, move_step.schema_name, move_step.peer, move_step.step, t,
                jsonb_build_array(jsonb_build_object('step', move_step.step, 'at', t)));
        RETURN;
    END IF;
    -- The peer is how the mover reached the other server, which a re-run
    -- may spell otherwise (a socket, an address): the latest is kept.
    IF (found_row.side, found_row.schema_name) IS DISTINCT FROM (move_step.side, move_step.schema_name) THEN
        RAISE EXCEPTION 'shard % has another move recorded here', move_step.shard_id
            USING ERRCODE = 'object_in_use',
                  DETAIL = format('Schema %s, %s %s since %s.', found_row.schema_name,
                                  CASE found_row.side WHEN 'leaving' THEN 'leaving for' ELSE 'arriving from' END,
                                  found_row.peer, found_row.started_at),
                  HINT = 'Finish or undo that move first (insta-id move).';
    END IF;
    UPDATE insta_id_admin.moves m SET step = move_step.step, peer = move_step.peer,
           steps = m.steps || jsonb_build_array(jsonb_build_object('step', move_step.step, 'at', t))
    WHERE m.shard_id = move_step.shard_id;
    -- The adoption (a move's on the new server, a rollback's on the old
    -- one) records its step in its own transaction, after the cutover:
    -- the fence of the copy's sequences opens with it, whichever release
    -- of insta-id records it.
    IF (move_step.side, move_step.step) IN (('arriving', 'adopted'), ('leaving', 'returned')) THEN
        PERFORM insta_id.move_open(move_step.shard_id);
    END IF;
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
    fence insta_id_admin.sequence_fences;
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
        SELECT * INTO fence FROM insta_id_admin.sequence_fences f WHERE f.seq = target AND f.schema_name = nsp;
        -- NULL until the copy's sequence issued a value (is_called); of a
        -- fenced sequence (move_fence), the state its fence keeps.
        here_last := CASE WHEN fence.seq IS NULL THEN pg_sequence_last_value(target)
                          WHEN fence.is_called THEN fence.last_value END;
        SELECT s.seqincrement INTO increment FROM pg_sequence s WHERE s.seqrelid = target;
        -- Refused when the copy issued a value the old server's sequence
        -- would issue next (in the increment's direction).
        IF here_last IS NOT NULL AND sign(increment) * (here_last::numeric - seq.last_value
                                                       - CASE WHEN seq.is_called THEN increment ELSE 0 END) >= 0 THEN
            RAISE EXCEPTION 'sequence % of the copy is past the old server''s (% against %)', target, here_last, seq.last_value
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'It was used on this server during the move; carrying the old value could repeat its values.';
        END IF;
        IF fence.seq IS NULL THEN
            PERFORM setval(target, seq.last_value, seq.is_called);
        ELSIF seq.last_value NOT BETWEEN fence.min_value AND fence.max_value THEN
            -- As setval would: now, not when move_open puts the range back
            -- after the old server let the shard go.
            RAISE EXCEPTION 'setval: value % is out of bounds for sequence % (%..%)', seq.last_value, target,
                            fence.min_value, fence.max_value
                USING ERRCODE = 'numeric_value_out_of_range';
        ELSE
            -- The fence moved to the carried state (move_open sets it).
            PERFORM insta_id._fence_sequence(target, nsp, move_carry.shard_id, seq.last_value, seq.is_called);
        END IF;
    END LOOP;
    -- Those the fence had not reached (a copy fenced by 0.9.0, tables only).
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

REVOKE ALL ON FUNCTION insta_id._fence_sequence(oid, name, int, bigint, boolean),
    insta_id._fence_sequences(name, int), insta_id.move_open(int), insta_id._check_sequence_fence(oid),
    insta_id.raise_high_water_mark(timestamptz, interval) FROM PUBLIC;

-- The copies this server has now, which 0.9.0 fenced by their tables only:
-- a move's copy arriving here, and one kept for a rollback.
SELECT insta_id._fence_sequences(m.schema_name, m.shard_id)
FROM insta_id_admin.moves m
WHERE (m.side = 'arriving' OR m.step IN ('reserved', 'returning'))
  AND EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = m.schema_name)
  AND NOT EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = m.shard_id OR r.schema_name = m.schema_name);

-- The guard is shared by every session in every configuration (15 and 16
-- without preloading: a segment published in the data directory).
COMMENT ON FUNCTION insta_id.guard_stats() IS
'Per sequence in the duplicate guard''s table (this database''s sequences, every database''s for members of pg_read_all_stats): IDs issued, waits for the next millisecond (count, total ms), milliseconds borrowed after the clock stepped back, calls refused with 54000';
COMMENT ON FUNCTION insta_id.guard_mode() IS
'shared: the duplicate guard spans all sessions of the server, in every configuration since 0.10.0 (0.9.0 and earlier said session on PostgreSQL 15/16 without preloading, where each session guarded only its own IDs)';

-- Instagram's shortcodes (instagram.com/p/<shortcode>/): the ID in base 64
-- with the alphabet A-Z a-z 0-9 - _, most significant digit first, the
-- 64 bits read unsigned (src/shortcode.rs). For URLs, and for clients that
-- cannot hold a 64-bit integer.
CREATE FUNCTION insta_id.shortcode(id bigint)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_shortcode';
COMMENT ON FUNCTION insta_id.shortcode(bigint) IS
'Instagram''s shortcode of an ID: base 64, alphabet A-Z a-z 0-9 - _, 1 to 11 characters (2715604631366879010 is CWvxAY7B0ci)';

CREATE FUNCTION insta_id.from_shortcode(code text)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_from_shortcode';
COMMENT ON FUNCTION insta_id.from_shortcode(text) IS
'The ID of an Instagram shortcode (leading A''s are padding); 22P02 for a character outside A-Z a-z 0-9 - _, an empty text, or a value past 64 bits';
REVOKE ALL ON FUNCTION insta_id.shortcode(bigint), insta_id.from_shortcode(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION insta_id.shortcode(bigint), insta_id.from_shortcode(text) TO PUBLIC;

-- The IDs whose created_at lies in during, as a range of IDs:
-- insta_id.created_at(id) <@ during exactly when id <@ id_range(during)
-- (tests/pg_regress/sql/22_time.sql checks it on every kind of bound).
-- Unbounded and infinite ends are open; times before the epoch hold no
-- IDs. IMMUTABLE like min_id, and for the same reason: the epoch is fixed
-- per database before its first ID.
CREATE FUNCTION insta_id.id_range(during tstzrange)
RETURNS int8range
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    epoch_ms numeric := extract(epoch FROM insta_id.epoch()) * 1000;
    -- The first millisecond whose IDs are negative bigints.
    sign_ms constant bigint := 1099511627776;
    x numeric;
    lo numeric := 0;  -- the first millisecond (since the epoch) whose IDs are in
    hi numeric;       -- the first one past them; NULL: no end
BEGIN
    IF isempty(during) THEN
        RETURN 'empty';
    END IF;
    -- created_at is a whole millisecond: the first one at or after (or
    -- after) the lower bound, the first one after (or at or after) the upper.
    IF NOT lower_inf(during) AND lower(during) <> '-infinity' THEN
        IF lower(during) = 'infinity' THEN
            RETURN 'empty';
        END IF;
        x := extract(epoch FROM lower(during)) * 1000 - epoch_ms;
        lo := greatest(CASE WHEN lower_inc(during) THEN ceil(x) ELSE floor(x) + 1 END, 0);
    END IF;
    IF NOT upper_inf(during) AND upper(during) <> 'infinity' THEN
        IF upper(during) = '-infinity' THEN
            RETURN 'empty';
        END IF;
        x := extract(epoch FROM upper(during)) * 1000 - epoch_ms;
        hi := CASE WHEN upper_inc(during) THEN floor(x) + 1 ELSE ceil(x) END;
    END IF;
    IF hi <= lo THEN
        RETURN 'empty';
    END IF;
    IF lo >= sign_ms OR hi > sign_ms THEN
        RAISE EXCEPTION 'time range % reaches past the last time of positive IDs', during
            USING ERRCODE = 'datetime_field_overflow',
                  DETAIL = format('IDs made from %s on (2^40 ms after the epoch) are negative bigints and sort before the earlier ones.',
                                  insta_id.epoch() + sign_ms * interval '1 millisecond'),
                  HINT = 'Split the range there, or bound it before that time.';
    END IF;
    RETURN int8range(lo::bigint << 23, CASE WHEN hi < sign_ms THEN hi::bigint << 23 END);
END
$$;
COMMENT ON FUNCTION insta_id.id_range(tstzrange) IS
'The IDs made in a time range, as a range of IDs: created_at(id) <@ during exactly when id <@ id_range(during)';

-- WHERE insta_id.made_during(id, during): whether an ID was made in a time
-- range, written so that the planner sees id >= <first ID> AND id <= <last
-- ID>: an index range scan on the key, and partition pruning on it, where
-- insta_id.created_at(id) <@ during would read every row. For that,
-- PostgreSQL inlines it: LANGUAGE sql, one expression, no SET clause, not
-- STRICT (COALESCE is not); it then folds id_range of a constant range
-- into constants, or computes it once per scan for a parameter. With no
-- end, the last positive ID is the bound; an empty range makes the bounds
-- cross (false, as created_at(id) <@ 'empty' is, never NULL).
CREATE FUNCTION insta_id.made_during(id bigint, during tstzrange)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT id OPERATOR(pg_catalog.>=) COALESCE(pg_catalog.lower(insta_id.id_range(during)),
                                               CASE WHEN pg_catalog.isempty(insta_id.id_range(during)) THEN 9223372036854775807 END)
       AND id OPERATOR(pg_catalog.<=) COALESCE(pg_catalog.upper(insta_id.id_range(during)) OPERATOR(pg_catalog.-) 1,
                                               CASE WHEN pg_catalog.isempty(insta_id.id_range(during)) THEN -9223372036854775808
                                                    ELSE 9223372036854775807 END)
$$;
COMMENT ON FUNCTION insta_id.made_during(bigint, tstzrange) IS
'Whether an ID was made in a time range (created_at(id) <@ during), as ID bounds an index on the key and partition pruning use';
REVOKE ALL ON FUNCTION insta_id.id_range(tstzrange), insta_id.made_during(bigint, tstzrange) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION insta_id.id_range(tstzrange), insta_id.made_during(bigint, tstzrange) TO PUBLIC;

-- adopt_id_column (issue 43): a live serial, bigserial or identity key made
-- a next_id key in place. Not PUBLIC's; in shard_admin_privileges(), so a
-- delegated administrator needs insta_id.grant_shard_admin run again.
CREATE FUNCTION insta_id._query_in_schema(nsp name, run_as regrole, query text)
RETURNS text
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_query_in_schema';

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
    -- As the table's owner: filling the column fires the table's triggers
    -- and rebuilds its indexes, the owner's code.
    PERFORM insta_id._run_in_schema(nsp, owner, stmts);
    RETURN seq_name::regclass;
END
$$;
COMMENT ON FUNCTION insta_id.add_id_column(regclass, name, int) IS
'Makes a column a next_id column: bigint NOT NULL, DEFAULT next_id(shard, its own sequence). Idempotent.';

-- Refuses (55000) a column holding a value at or above the first ID
-- next_id can mint now for shard: old keys and new IDs would meet. Returns
-- the largest value (NULL: no rows). Read as the table's owner
-- (_query_in_schema): planning a query on the table folds its indexes'
-- expressions and predicates, the owner's code. With row_security off, so
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
    highest := insta_id._query_in_schema(
        (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = tbl),
        (SELECT c.relowner::regrole FROM pg_class c WHERE c.oid = tbl),
        format('SELECT pg_catalog.max(%I)::pg_catalog.int8 FROM %s', col, tbl))::bigint;
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
-- Its statements run as the tables' one owner (_run_in_schema): a rewrite
-- evaluates the owner's code (indexes, CHECKs, generated columns).
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

    -- A referencing table of another owner: widening it makes PostgreSQL
    -- validate the rebuilt foreign key with a query over both tables,
    -- planned as one owner, folding the other's index expressions.
    SELECT string_agg(DISTINCT format('%s (owned by %s)', r->>'rel', (r->>'owner')::regrole), ', ') INTO refused
    FROM jsonb_array_elements(refs) r WHERE (r->>'owner')::oid <> owner;
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

    IF dry_run THEN
        -- (without the lock: what the column holds now)
        highest := insta_id._check_below_ids(tbl, col, shard);
    ELSE
        PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)
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
                    PERFORM insta_id._run_in_schema(lock_rel.r->>'nsp', owner,
                                                    ARRAY[format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', lock_rel.r->>'rel')]);
                END LOOP;
                -- What the changes lock besides (the sequence, a table a
                -- rebuilt foreign key reads): the short wait too, holding all.
                PERFORM set_config('lock_timeout', short_timeout, true);
                -- Under the locks no row can change: the values now are all there are.
                highest := insta_id._check_below_ids(tbl, col, shard);
                -- (the steps with a schema: the lock and the check are done above)
                PERFORM insta_id._run_in_schema(x->>'nsp', owner, ARRAY[x->>'sql'])
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

REVOKE ALL ON FUNCTION insta_id._query_in_schema(name, regrole, text), insta_id._table_shard(regclass, name, int),
    insta_id._check_below_ids(regclass, name, int), insta_id.adopt_id_column(regclass, name, int, boolean, text, int) FROM PUBLIC;

-- Range partitions by the time inside the ID (issue 43): create_partitions,
-- drop_partitions. Not PUBLIC's; in shard_admin_privileges().
-- The partitioned table's key, checked: range on one bigint column.
-- Returns its schema, name, owner and key column.
CREATE FUNCTION insta_id._time_partitioned(parent regclass, OUT nsp name, OUT relname name, OUT owner regrole, OUT col name)
RETURNS record
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    strategy "char";
    columns int;
    key_type regtype;
BEGIN
    SELECT n.nspname, c.relname, c.relowner::regrole, p.partstrat, p.partnatts, a.attname, a.atttypid::regtype
    INTO nsp, relname, owner, strategy, columns, col, key_type
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_partitioned_table p ON p.partrelid = c.oid
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = p.partattrs[0]
    WHERE c.oid = parent AND c.relkind = 'p';
    IF NOT FOUND THEN
        RAISE EXCEPTION '% is not a partitioned table', parent
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Create it with PARTITION BY RANGE (id).';
    ELSIF strategy <> 'r' OR columns <> 1 OR key_type IS DISTINCT FROM 'bigint'::regtype THEN
        RAISE EXCEPTION '% is not partitioned by range on one bigint column', parent
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = format('Its partition key is %s.', pg_get_partkeydef(parent)),
                  HINT = 'Partitions by the time inside an ID need PARTITION BY RANGE (id).';
    END IF;
END
$$;

-- The parent's partitions with FROM (a) TO (b) bounds of positive IDs:
-- their bounds and the times they hold (created_at of the bounds).
CREATE FUNCTION insta_id._time_partitions(parent regclass)
RETURNS TABLE (part regclass, low bigint, high bigint, made_from timestamptz, made_before timestamptz)
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT b.part, b.low, b.high, insta_id.created_at(b.low), insta_id.created_at(b.high)
    FROM (SELECT h.inhrelid::regclass AS part, m[1]::bigint AS low, m[2]::bigint AS high
          FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid,
               regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \(''?(\d+)''?\) TO \(''?(\d+)''?\)$') m
          WHERE h.inhparent = parent) b
    ORDER BY b.low
$$;

-- Longer than a screen: every refusal before the first CREATE.
CREATE FUNCTION insta_id.create_partitions(parent regclass, period interval DEFAULT '1 month',
                                           ahead interval DEFAULT '3 months', start timestamptz DEFAULT now(),
                                           lock_timeout text DEFAULT '2s')
RETURNS TABLE (part regclass, made_from timestamptz, made_before timestamptz, created boolean)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    months int;
    fixed interval;
    first timestamptz;
    periods jsonb := '[]';
    p jsonb;
    t0 timestamptz;
    t1 timestamptz;
    bounds int8range;
    part_name text;
    existing record;
    clash text;
    stmts text[] := '{}';
    made bigint[] := '{}';  -- the lower bounds of the partitions made here
    def regclass;
BEGIN
    IF parent IS NULL OR period IS NULL OR ahead IS NULL OR start IS NULL OR lock_timeout IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    t := insta_id._time_partitioned(parent);
    -- A period: whole months, or a fixed length of at least an hour.
    months := extract(year FROM period)::int * 12 + extract(month FROM period)::int;
    IF months > 0 AND period = months * interval '1 month' THEN
        first := (make_timestamp(2000, 1, 1, 0, 0, 0)
                  + (floor(((extract(year FROM start AT TIME ZONE 'UTC')::int - 2000) * 12
                            + extract(month FROM start AT TIME ZONE 'UTC')::int - 1) / months::numeric) * months) * interval '1 month')
                 AT TIME ZONE 'UTC';
    ELSIF months = 0 AND period >= interval '1 hour'
          AND extract(epoch FROM period) = floor(extract(epoch FROM period) / 60) * 60 THEN
        fixed := period;
        first := date_bin(fixed, start, make_timestamptz(2000, 1, 3, 0, 0, 0, 'UTC'));
    ELSE
        RAISE EXCEPTION 'a partition''s period must be whole months, or whole minutes of at least an hour: not %', period
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF ahead < interval '0' THEN
        RAISE EXCEPTION 'ahead must not be negative: %', ahead USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- The periods from the one holding start to the one holding start + ahead.
    t0 := first;
    LOOP
        -- (calendar arithmetic in UTC: on a timestamptz it would follow the session's time zone)
        t1 := ((t0 AT TIME ZONE 'UTC') + coalesce(fixed, months * interval '1 month')) AT TIME ZONE 'UTC';
        IF jsonb_array_length(periods) >= 1000 THEN
            RAISE EXCEPTION 'more than 1000 partitions at once (period %, ahead %)', period, ahead
                USING ERRCODE = 'program_limit_exceeded',
                      HINT = 'Make them in several calls (start), or with a longer period.';
        END IF;
        bounds := insta_id.id_range(tstzrange(t0, t1));
        part_name := t.relname || '_p' || to_char(t0 AT TIME ZONE 'UTC',
                    CASE WHEN fixed IS NULL OR (fixed >= interval '1 day' AND t0 = date_trunc('day', t0, 'UTC')) THEN 'YYYYMMDD'
                         ELSE 'YYYYMMDD"_"HH24MI' END);
        IF octet_length(part_name) > 63 THEN
            RAISE EXCEPTION 'partition name % is longer than 63 bytes', quote_ident(part_name)
                USING ERRCODE = 'name_too_long', HINT = 'Give the table a shorter name.';
        END IF;
        periods := periods || jsonb_build_object('from', to_char(t0 AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'),
                                                 'before', to_char(t1 AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'), 'low', lower(bounds), 'high', upper(bounds), 'name', part_name);
        EXIT WHEN t1 > ((start AT TIME ZONE 'UTC') + ahead) AT TIME ZONE 'UTC';
        t0 := t1;
    END LOOP;

    -- Each period: made already (same bounds, any name), free, or refused
    -- before anything is made: another partition overlapping it, its name
    -- taken, rows of it in the default partition.
    def := (SELECT h.inhrelid::regclass FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
            WHERE h.inhparent = parent AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT');
    FOR p IN SELECT jsonb_array_elements(periods) LOOP
        SELECT * INTO existing FROM insta_id._time_partitions(parent) x
        WHERE x.low = (p->>'low')::bigint AND x.high = (p->>'high')::bigint;
        CONTINUE WHEN FOUND;
        SELECT string_agg(format('%s (%s)', c.oid::regclass, pg_get_expr(c.relpartbound, c.oid)), ', ') INTO clash
        FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
        WHERE h.inhparent = parent AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
          AND (NOT EXISTS (SELECT FROM insta_id._time_partitions(parent) x WHERE x.part = c.oid)
               OR EXISTS (SELECT FROM insta_id._time_partitions(parent) x WHERE x.part = c.oid
                          AND x.low < (p->>'high')::bigint AND x.high > (p->>'low')::bigint));
        IF clash IS NOT NULL THEN
            RAISE EXCEPTION 'the partition of % for % to % would overlap %', parent, p->>'from', p->>'before', clash
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'create_partitions makes partitions of whole periods; detach or drop the other, or keep the period it was made with.';
        END IF;
        IF to_regclass(format('%I.%I', t.nsp, p->>'name')) IS NOT NULL THEN
            RAISE EXCEPTION 'relation %.% already exists', quote_ident(t.nsp), quote_ident(p->>'name')
                USING ERRCODE = 'duplicate_table',
                      HINT = 'It is not the partition of that period: rename it.';
        END IF;
        -- (read as the owner: planning the query folds its indexes' expressions)
        IF def IS NOT NULL AND insta_id._query_in_schema(t.nsp, t.owner,
               format('SELECT 1 FROM %s WHERE %I >= %s AND %I < %s LIMIT 1', def, t.col, p->>'low', t.col, p->>'high')) IS NOT NULL THEN
            RAISE EXCEPTION 'the default partition % holds rows of % to %', def, p->>'from', p->>'before'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Move them out of it first: PostgreSQL refuses a partition whose rows the default partition holds.';
        END IF;
        made := made || (p->>'low')::bigint;
        stmts := stmts || format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%s) TO (%s)',
                                 t.nsp, p->>'name', parent, p->>'low', p->>'high');
    END LOOP;

    IF cardinality(stmts) > 0 THEN
        PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)
        PERFORM insta_id._run_in_schema(t.nsp, t.owner, stmts);
    END IF;
    RETURN QUERY
    SELECT x.part, x.made_from, x.made_before, x.low = ANY (made)
    FROM insta_id._time_partitions(parent) x
    WHERE EXISTS (SELECT FROM jsonb_array_elements(periods) e
                  WHERE (e->>'low')::bigint = x.low AND (e->>'high')::bigint = x.high)
    ORDER BY x.low;
END
$$;
COMMENT ON FUNCTION insta_id.create_partitions(regclass, interval, interval, timestamptz, text) IS
'Makes range partitions of a table on its ID, one per period (UTC months, or a fixed length), up to start + ahead; idempotent';

CREATE FUNCTION insta_id.drop_partitions(parent regclass, older_than interval, action text DEFAULT 'list',
                                         lock_timeout text DEFAULT '2s')
RETURNS TABLE (part text, made_from timestamptz, made_before timestamptz, done text)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    old record;
BEGIN
    IF parent IS NULL OR older_than IS NULL OR action IS NULL OR lock_timeout IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    ELSIF action NOT IN ('list', 'detach', 'drop') THEN
        RAISE EXCEPTION 'action must be list, detach or drop: not %', quote_literal(action)
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF older_than < interval '0' THEN
        RAISE EXCEPTION 'older_than must not be negative: %', older_than USING ERRCODE = 'invalid_parameter_value';
    END IF;
    t := insta_id._time_partitioned(parent);
    PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)
    -- (a partition's name and bounds read before it is detached or dropped)
    FOR old IN SELECT x.* FROM insta_id._time_partitions(parent) x
               WHERE x.made_before <= now() - older_than ORDER BY x.low LOOP
        part := old.part::text;  -- (its name: a dropped table has none)
        made_from := old.made_from;
        made_before := old.made_before;
        done := CASE action WHEN 'list' THEN 'listed' WHEN 'detach' THEN 'detached' ELSE 'dropped' END;
        IF action = 'detach' THEN
            PERFORM insta_id._run_in_schema(t.nsp, t.owner, ARRAY[format('ALTER TABLE %s DETACH PARTITION %s', parent, old.part)]);
        ELSIF action = 'drop' THEN
            -- (no CASCADE: a view on it stops the drop, 2BP01)
            PERFORM insta_id._run_in_schema(t.nsp, t.owner, ARRAY[format('DROP TABLE %s', old.part)]);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION insta_id.drop_partitions(regclass, interval, text, text) IS
'Lists, detaches or drops the ID-range partitions of a table whose IDs were all made more than older_than ago; idempotent';

REVOKE ALL ON FUNCTION insta_id._time_partitioned(regclass), insta_id._time_partitions(regclass),
    insta_id.create_partitions(regclass, interval, interval, timestamptz, text),
    insta_id.drop_partitions(regclass, interval, text, text) FROM PUBLIC;

-- A delegated shard administrator (README, "Who may do what"): a role that
-- is not a superuser and creates, migrates and drops shards. Everything it
-- needs from insta_id is this one list: the helpers, the internal functions
-- they call (they are SECURITY INVOKER: each call is checked against the
-- caller), and the registry and migration tables they write. A DBA grants
-- it with one statement and reads it back with another; pg_regress
-- 09_privileges checks that the list is exactly what the helpers call and
-- that the role can do what the helpers allow and nothing more. Nothing in
-- it lets the role act as a role it could not SET ROLE to (_run_in_schema
-- refuses, 42501), move IDs ahead of the clock, or take part in a move.
-- CREATE on the database (to create schemas) is the DBA's to give.
-- (No search_path to set: nothing is resolved.)
CREATE OR REPLACE FUNCTION insta_id.shard_admin_privileges()
RETURNS TABLE (privilege text, object text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    VALUES
        ('EXECUTE', 'FUNCTION insta_id.create_shard(int, text)'),
        ('EXECUTE', 'FUNCTION insta_id.create_shards(int, int, text)'),
        ('EXECUTE', 'PROCEDURE insta_id.create_shards_in_batches(int, int, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.add_id_column(regclass, name, int)'),
        ('EXECUTE', 'FUNCTION insta_id.adopt_id_column(regclass, name, int, boolean, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.create_partitions(regclass, interval, interval, timestamptz, text)'),
        ('EXECUTE', 'FUNCTION insta_id.drop_partitions(regclass, interval, text, text)'),
        ('EXECUTE', 'FUNCTION insta_id.drop_shard(int, boolean)'),
        ('EXECUTE', 'FUNCTION insta_id.adopt_shard(text, int)'),
        ('EXECUTE', 'PROCEDURE insta_id.migrate(text, text, text, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.shard_drift(text, int, int)'),
        ('EXECUTE', 'FUNCTION insta_id.lock_shard_for_move(int)'),
        -- what they call
        ('EXECUTE', 'FUNCTION insta_id._check_below_ids(regclass, name, int)'),
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
        ('EXECUTE', 'FUNCTION insta_id._query_in_schema(name, regrole, text)'),
        ('EXECUTE', 'FUNCTION insta_id._run_in_schema(name, regrole, text[])'),
        ('EXECUTE', 'FUNCTION insta_id._schema_lock_key()'),
        ('EXECUTE', 'FUNCTION insta_id._sequence_name(name, name, name)'),
        ('EXECUTE', 'FUNCTION insta_id._shard_schema(int)'),
        ('EXECUTE', 'FUNCTION insta_id._table_shard(regclass, name, int)'),
        ('EXECUTE', 'FUNCTION insta_id._template_objects(name)'),
        ('EXECUTE', 'FUNCTION insta_id._time_partitioned(regclass)'),
        ('EXECUTE', 'FUNCTION insta_id._time_partitions(regclass)'),
        ('EXECUTE', 'FUNCTION insta_id._template_plan(name)'),
        ('EXECUTE', 'FUNCTION insta_id._tied_to_schema(oid)'),
        ('EXECUTE', 'FUNCTION insta_id._unqualified_create(text, text, name, name)'),
        -- what they read and write: insta_id's tables (what PUBLIC reads of
        -- them goes through functions, insta_id.shards() and the like)
        ('USAGE', 'SCHEMA insta_id_admin'),
        ('SELECT, INSERT, UPDATE, DELETE', 'TABLE insta_id_admin.shard_registry'),
        ('SELECT, INSERT', 'TABLE insta_id_admin.migrations'),
        ('SELECT, INSERT, DELETE', 'TABLE insta_id_admin.applied_migrations'),
        -- which shards a move holds here: migrate skips them
        ('SELECT (shard_id, side)', 'TABLE insta_id_admin.moves')
$$;
COMMENT ON FUNCTION insta_id.shard_admin_privileges() IS
'What insta_id.grant_shard_admin grants a delegated shard administrator: the shard helpers and what they use';

