-- insta_id 0.9.0 -> 0.10.0: no copy of a shard mints (issue 42). A copy
-- of a shard on a server that does not hold it (a move's copy being built,
-- the copy kept for a rollback) has its sequences fenced as well as its
-- tables; the mover opens them when it adopts the shard (move_open).
-- raise_high_water_mark refuses a mark further ahead than a move needs
-- unless told. shortcode and from_shortcode, id_range and made_during are
-- new (issue 43). Every
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
-- end, the last positive ID is the bound.
CREATE FUNCTION insta_id.made_during(id bigint, during tstzrange)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT id OPERATOR(pg_catalog.>=) pg_catalog.lower(insta_id.id_range(during))
       AND id OPERATOR(pg_catalog.<=) COALESCE(pg_catalog.upper(insta_id.id_range(during)) OPERATOR(pg_catalog.-) 1,
                                               9223372036854775807)
$$;
COMMENT ON FUNCTION insta_id.made_during(bigint, tstzrange) IS
'Whether an ID was made in a time range (created_at(id) <@ during), as ID bounds an index on the key and partition pruning use';
REVOKE ALL ON FUNCTION insta_id.id_range(tstzrange), insta_id.made_during(bigint, tstzrange) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION insta_id.id_range(tstzrange), insta_id.made_during(bigint, tstzrange) TO PUBLIC;
