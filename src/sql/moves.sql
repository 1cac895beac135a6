-- Moving a shard online: each server's half of the move, which the mover
-- (insta-id move) only sequences over its two connections.
--   lock_shard_for_move   the mover's session lock, which migrate respects
--   moves, move_step, move_done, move_arrived
--                         each server's record of how far a move got, and
--                         the registry's of where a shard came from
--   move_fence            the new server's copy refuses clients' writes
--   move_lock             the cutover's locks on the old server
--   move_state, move_carry
--                         what the rows do not carry: sequences, the
--                         high-water mark (raise_high_water_mark, in
--                         guard.sql), the migration history
--   move_reserve, move_return, move_release
--                         the old server's copy kept, fenced, for the
--                         move's rollback (and the new server's, after
--                         one), and dropped once it is not wanted
-- adopt_shard and drop_shard (registry.sql) end the move on each side.
-- search_path and privileges: as registry.sql says; none is PUBLIC's.

-- A shard being moved to another server (insta-id move): the mover
-- holds this lock, for its session, from its checks until the shard has left;
-- insta_id.migrate skips the shard meanwhile. Two movers of one shard, or a
-- mover and a migration running on it, exclude each other.
CREATE FUNCTION insta_id.lock_shard_for_move(shard_id int)
RETURNS name
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    holder int;
BEGIN
    nsp := insta_id._shard_schema(lock_shard_for_move.shard_id);
    IF NOT insta_id._lock(insta_id._move_lock_key(), lock_shard_for_move.shard_id, shared => false, session => true, wait => false) THEN
        holder := insta_id._lock_holder(insta_id._move_lock_key(), lock_shard_for_move.shard_id);
        RAISE EXCEPTION 'shard % is being moved or migrated', lock_shard_for_move.shard_id
            USING ERRCODE = 'object_in_use', DETAIL = format('Process %s holds its lock.', holder);
    END IF;
    RETURN nsp;
END
$$;
COMMENT ON FUNCTION insta_id.lock_shard_for_move(int) IS
'Marks a shard as being moved for the rest of the session (insta_id.migrate skips it); returns its schema';

-- The steps of each side, in order (what the table and move_step accept).
-- No search_path to set: nothing is resolved, and it inlines.
CREATE FUNCTION insta_id._move_steps(side text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT CASE side WHEN 'leaving' THEN '{published,slot,cutover,reserved,returning,returned}'::text[]
                     WHEN 'arriving' THEN '{subscribed,copying,copied,paused,resumed,sequences,adopted,map,cleanup,reserved,returned}'::text[] END
$$;

-- The state of the moves this server takes part in: one row per shard on
-- each of the two servers, written by the mover at each step in the same
-- transaction as what the step makes, so a re-run and `insta-id status` read
-- how far a move got instead of inferring it. The old server's row reaches
-- 'cutover' in the transaction that drops the shard there: the point of no
-- return, after which a re-run only finishes the move ('reserved' instead
-- when the move keeps the old copy for a rollback). The mover deletes
-- the rows when nothing of the move is left (move_done). Not configuration:
-- a dump restored elsewhere is not a server the move runs on, so pg_dump
-- leaves the rows out.
CREATE TABLE insta_id_admin.moves (
    shard_id    int  PRIMARY KEY CHECK (shard_id BETWEEN 0 AND 8191),
    side        text NOT NULL CHECK (side IN ('leaving', 'arriving')),
    schema_name name NOT NULL,
    -- The other server, as the mover names it (host:port/database; the
    -- mover refuses connection strings that hold a password).
    peer        text NOT NULL,
    step        text NOT NULL,
    started_at  timestamptz NOT NULL,
    -- Every step reached, in order: [{"step": ..., "at": ...,
    -- "timeline": ...}, ...] (0.11.0 added the timeline).
    steps       jsonb NOT NULL,
    -- Until when the old server keeps its copy, fenced, for the move's
    -- rollback (move_reserve); after it the mover drops the copy
    -- (move_release).
    reserve_until timestamptz CHECK (reserve_until IS NULL OR side = 'leaving'),
    CHECK (step = ANY (insta_id._move_steps(side)))
);
COMMENT ON TABLE insta_id_admin.moves IS
'Shard moves this server takes part in, with the step each has reached (insta-id move, insta-id status); not dumped';

-- Records that this server's side of a shard's move reached a step (the
-- first step makes the row; _move_steps lists each side's), with when and
-- the timeline the server was on: a later timeline at a re-run says the
-- server failed over since (a promoted standby), which the mover reads
-- (a logical slot made before may be gone, rows a subscription applied
-- may be missing: issue 57). 55006 when the
-- row is another move's (the other side, or another schema). At the
-- adoption's step, opens the fence of the shard's sequences (move_open:
-- 42704 if the shard is not registered here).
CREATE FUNCTION insta_id.move_step(shard_id int, side text, step text, schema_name name, peer text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := clock_timestamp();
    found_row insta_id_admin.moves;
    -- (the timeline of the WAL written now: the first 8 hex digits of its
    -- file's name)
    entry jsonb := jsonb_build_object('step', move_step.step, 'at', t, 'timeline',
                                      ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int);
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
                jsonb_build_array(entry));
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
           steps = m.steps || jsonb_build_array(entry)
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
COMMENT ON FUNCTION insta_id.move_step(int, text, text, name, text) IS
'Records the step this server''s side of a shard''s move has reached (the mover calls it)';

-- The move of a shard is over on this server (finished or undone): forgets
-- its row, if it is that side's, and the fences of its sequences that are
-- gone (a copy dropped). Whether there was a row.
CREATE FUNCTION insta_id.move_done(shard_id int, side text)
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
COMMENT ON FUNCTION insta_id.move_done(int, text) IS
'Forgets the record of one side of a shard''s move on this server, once nothing of it is left there';

-- Records where a move brought a shard registered here from (the mover
-- calls it in the adoption's transaction: on the new server for a move, on
-- the old one for a rollback's return), so that a re-run of the move tells
-- a move that finished from one given its servers swapped. 42704 when the
-- shard is not registered here.
CREATE FUNCTION insta_id.move_arrived(shard_id int, origin text, peer text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF num_nulls(move_arrived.shard_id, move_arrived.origin, move_arrived.peer) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE insta_id_admin.shard_registry r
    SET moved_from = move_arrived.origin, moved_from_label = move_arrived.peer, moved_at = clock_timestamp()
    WHERE r.shard_id = move_arrived.shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard % is not registered here', move_arrived.shard_id USING ERRCODE = 'undefined_object';
    END IF;
END
$$;
COMMENT ON FUNCTION insta_id.move_arrived(int, text, text) IS
'Records on the registry the server a move brought a shard from (the mover calls it)';

-- The write fence of a shard being moved to this server, or of the copy
-- the old server keeps for the move's rollback (move_reserve): until the
-- shard is registered here (adopt_shard, right after the cutover), a client's
-- INSERT, UPDATE, DELETE or TRUNCATE on its copy is refused (55006), since
-- IDs minted here beside the old server would collide with the stream. A
-- statement trigger on each table (argument: the shard); logical
-- replication's workers run with session_replication_role = replica, where
-- it does not fire. It reads the registry, so adopt_shard opens it without
-- the table locks that dropping a trigger takes; the mover drops the
-- triggers afterwards. SECURITY DEFINER: the writing client has no USAGE on
-- insta_id_admin (and needs none); it reads one row and raises, nothing else.
CREATE FUNCTION insta_id._move_fence()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = TG_ARGV[0]::int) THEN
        RAISE EXCEPTION 'shard % is not registered on this server: this is the copy of a move, which takes no writes', TG_ARGV[0]
            USING ERRCODE = 'object_in_use',
                  DETAIL = 'A copy being moved here, or the copy a move away from here keeps for its rollback.',
                  HINT = 'Write to the server holding the shard (a router does).';
    END IF;
    RETURN NULL;
END
$$;

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

-- Fences every table of a schema the mover has just created here (in the
-- same transaction as the schema): the trigger insta_id_move_fence on each,
-- and its sequences (_fence_sequences). Returns how many tables. 55000 when
-- the shard or the schema is registered
-- here already (the fence would never open), 3F000 without the schema, 22023
-- for insta_id's and PostgreSQL's own schemas.
CREATE FUNCTION insta_id.move_fence(schema_name name, shard_id int)
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
COMMENT ON FUNCTION insta_id.move_fence(name, int) IS
'Fences a shard''s copy being moved to this server: clients'' writes refused (55006) until it is registered here';

-- The shard's tables and sequences this backend does not hold in the
-- cutover's modes (ACCESS EXCLUSIVE; SHARE ROW EXCLUSIVE, which nextval()'s
-- ROW EXCLUSIVE waits for), by name: empty once move_lock has them all.
CREATE FUNCTION insta_id._move_unlocked(nsp name)
RETURNS text[]
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(format('%I.%I', n.nspname, c.relname) ORDER BY c.relname), '{}')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = nsp AND c.relkind IN ('r', 'p', 'S')
      AND NOT EXISTS (SELECT FROM pg_locks l
                      WHERE l.locktype = 'relation' AND l.relation = c.oid AND l.pid = pg_backend_pid() AND l.granted
                        AND (l.mode = 'AccessExclusiveLock'
                             OR c.relkind = 'S' AND l.mode IN ('ShareRowExclusiveLock', 'ExclusiveLock')))
$$;

-- 55000 unless this backend holds every table and sequence of the shard
-- (schema nsp) in the cutover's modes (move_lock): what is read or changed
-- under the lock must not change meanwhile.
CREATE FUNCTION insta_id._check_move_locked(shard_id int, nsp name)
RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF cardinality(insta_id._move_unlocked(nsp)) > 0 THEN
        RAISE EXCEPTION 'shard % is not locked for its cutover', shard_id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Not locked: %s.', array_to_string(insta_id._move_unlocked(nsp), ', ')),
                  HINT = 'Call insta_id.move_lock first, in the same transaction.';
    END IF;
END
$$;

-- The cutover's lock, taken by the mover on the old server inside the
-- transaction that ends with drop_shard: every table of the shard in
-- ACCESS EXCLUSIVE mode (the mode the drop needs: readers and writers
-- wait), then every sequence (an ALTER SEQUENCE that changes nothing keeps
-- nextval() out: next_id called without an INSERT). A lock that waits on a
-- long reader holds writers up behind it, so each try waits lock_timeout at
-- most for each table, then lets them go on for 1, 2, 3 ... seconds (a
-- WARNING each time) and tries again, `attempts` times. Tables and
-- sequences made meanwhile are locked too: it returns only once it holds
-- every one, with the WAL insert position after the tables were locked
-- (everything committed before the lock is before it). 25P01 outside a
-- transaction block (the locks would end with the statement), 42704 for a
-- shard not registered here, 55P03 when the last try fails.
CREATE FUNCTION insta_id.move_lock(shard_id int, attempts int)
RETURNS pg_lsn
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    rel record;
    position pg_lsn;
    attempt int := 1;
    passes int := 0;
BEGIN
    IF num_nulls(move_lock.shard_id, move_lock.attempts) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF move_lock.attempts NOT BETWEEN 1 AND 999 THEN
        RAISE EXCEPTION 'attempts must be between 1 and 999, not %', move_lock.attempts USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT insta_id._in_transaction_block() THEN
        RAISE EXCEPTION 'insta_id.move_lock can only be used in transaction blocks'
            USING ERRCODE = 'no_active_sql_transaction', HINT = 'Its locks must last until the cutover commits: BEGIN first.';
    END IF;
    nsp := insta_id._shard_schema(move_lock.shard_id);
    -- Until every table and sequence is held: one that appears while a try
    -- sleeps is locked on the next pass.
    WHILE cardinality(insta_id._move_unlocked(nsp)) > 0 LOOP
        passes := passes + 1;
        IF passes > move_lock.attempts + 3 THEN
            RAISE EXCEPTION 'shard % could not be locked: objects keep appearing in it', move_lock.shard_id
                USING ERRCODE = 'lock_not_available',
                      DETAIL = format('Not locked: %s.', array_to_string(insta_id._move_unlocked(nsp), ', '));
        END IF;
        BEGIN
            FOR rel IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                       WHERE n.nspname = nsp AND c.relkind IN ('r', 'p') ORDER BY c.relname LOOP
                EXECUTE format('LOCK TABLE %I.%I IN ACCESS EXCLUSIVE MODE', nsp, rel.relname);
            END LOOP;
            position := pg_current_wal_insert_lsn();
            FOR rel IN SELECT s.sequencename, s.increment_by FROM pg_sequences s WHERE s.schemaname = nsp ORDER BY s.sequencename LOOP
                EXECUTE format('ALTER SEQUENCE %I.%I INCREMENT BY %s', nsp, rel.sequencename, rel.increment_by);
            END LOOP;
        EXCEPTION WHEN lock_not_available THEN
            IF attempt >= move_lock.attempts THEN
                RAISE;
            END IF;
            RAISE WARNING 'the shard''s tables not locked within %, attempt % of %: writers go on, trying again in % s',
                current_setting('lock_timeout'), attempt, move_lock.attempts, attempt;
            PERFORM pg_sleep(attempt);
            attempt := attempt + 1;
        END;
    END LOOP;
    RETURN coalesce(position, pg_current_wal_insert_lsn());
END
$$;
COMMENT ON FUNCTION insta_id.move_lock(int, int) IS
'Locks a shard''s tables and sequences for the cutover of its move, trying again behind long readers; returns the WAL position after which nothing of it commits';

-- What logical replication does not carry, read on the old server under
-- move_lock (55000 otherwise: a writer could still change it): the shard,
-- its schema and tables (the new server's copy must have every one: rows
-- of a table made after the schema was copied would be lost), each
-- sequence's state (last_value and is_called, used or not: a sequence
-- restarted higher and not used since must not restart low on the new
-- server), the high-water mark (no ID of this database is later) and the
-- shard's migration history. A sequence the caller may not read is an
-- error (42501), never left out.
CREATE FUNCTION insta_id.move_state(shard_id int)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    seq record;
    seq_state record;
    sequences jsonb := '{}';
BEGIN
    IF move_state.shard_id IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    nsp := insta_id._shard_schema(move_state.shard_id);
    PERFORM insta_id._check_move_locked(move_state.shard_id, nsp);
    FOR seq IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = nsp AND c.relkind = 'S' ORDER BY c.relname LOOP
        EXECUTE format('SELECT last_value, is_called FROM %I.%I', nsp, seq.relname) INTO seq_state;
        sequences := sequences || jsonb_build_object(seq.relname, jsonb_build_array(seq_state.last_value, seq_state.is_called));
    END LOOP;
    RETURN jsonb_build_object(
        'shard', move_state.shard_id,
        'schema', nsp,
        'tables', (SELECT coalesce(jsonb_agg(c.relname ORDER BY c.relname), '[]')
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = nsp AND c.relkind IN ('r', 'p')),
        'sequences', sequences,
        'mark', insta_id.high_water_mark(),
        'history', (SELECT coalesce(jsonb_agg(jsonb_build_object('migration', a.migration, 'applied_at', a.applied_at) ORDER BY a.migration), '[]')
                    FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp));
END
$$;
COMMENT ON FUNCTION insta_id.move_state(int) IS
'What a shard''s move carries to the new server beside its rows: tables, sequences, high-water mark, migration history (read under move_lock)';

-- On the new server, in one transaction before the old one drops the
-- shard: checks that the copy has every table of the old one, sets each
-- sequence of the copy to the old one's state, raises the high-water mark
-- to the old server's (so IDs stay unique when this clock is behind),
-- replaces the shard's migration history, and records the step
-- 'sequences'. The rollback of a move runs it on the old server, on the
-- copy kept there (move_reserve) within its window, and records
-- 'returning'. Returns this server's mark. 55000 unless a move of that
-- shard into that schema (or a kept copy of it) is recorded here and the
-- shard is not registered, when the rollback's window has closed, when
-- the copy lacks a table, or when a sequence of the copy
-- is already past the old one's (used here during the move: carrying it
-- back could repeat its values); 42P01 for a sequence the copy lacks,
-- 42809 for a relation of that name that is not a sequence; 22023 for a
-- malformed state or another shard's.
CREATE FUNCTION insta_id.move_carry(shard_id int, state jsonb)
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
COMMENT ON FUNCTION insta_id.move_carry(int, jsonb) IS
'Carries a shard''s sequences, high-water mark and migration history (insta_id.move_state of the old server) onto its copy here';

-- The cutover on the old server of a move that keeps the old copy for its
-- rollback, in move_lock's transaction in place of drop_shard: the shard
-- is no longer registered here, its schema stays, fenced (move_fence:
-- clients' writes refused, the replication back from the new server
-- applied), and the step 'reserved' is recorded with the time until which
-- the copy is kept: now plus keep. Returns that time. 55000 unless the
-- shard is locked for its cutover (move_lock) and its move away from here
-- is recorded; 22023 for a keep not between a second and 7 days; 42704 for
-- a shard not registered here.
CREATE FUNCTION insta_id.move_reserve(shard_id int, keep interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    recorded insta_id_admin.moves;
    until timestamptz;
BEGIN
    IF num_nulls(move_reserve.shard_id, move_reserve.keep) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF move_reserve.keep < interval '1 second' OR move_reserve.keep > interval '7 days' THEN
        RAISE EXCEPTION 'a move''s rollback window must be between 1 second and 7 days, not %', move_reserve.keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    nsp := insta_id._shard_schema(move_reserve.shard_id);
    PERFORM insta_id._check_move_locked(move_reserve.shard_id, nsp);
    SELECT * INTO recorded FROM insta_id_admin.moves m
    WHERE m.shard_id = move_reserve.shard_id AND m.side = 'leaving' AND m.schema_name = nsp FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no move of shard % away from this server is recorded', move_reserve.shard_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    DELETE FROM insta_id_admin.shard_registry r WHERE r.shard_id = move_reserve.shard_id;
    PERFORM insta_id.move_fence(nsp, move_reserve.shard_id);
    until := clock_timestamp() + move_reserve.keep;
    PERFORM insta_id.move_step(move_reserve.shard_id, 'leaving', 'reserved', nsp, recorded.peer);
    UPDATE insta_id_admin.moves m SET reserve_until = until WHERE m.shard_id = move_reserve.shard_id;
    RETURN until;
END
$$;
COMMENT ON FUNCTION insta_id.move_reserve(int, interval) IS
'The cutover of a move that keeps the old copy for its rollback: the shard unregistered here, its schema fenced and kept until now + keep';

-- The cutover on the new server of a move's rollback, in move_lock's
-- transaction in place of drop_shard: the shard is no longer registered
-- here, its schema stays, fenced (move_fence: clients' writes refused, its
-- sequences mint nothing), and the step 'returned' is recorded. The
-- rollback drops the copy (move_release) once the clients are on the old
-- server: a drop's time grows with what the schema holds, and in the
-- cutover all of it is spent with clients paused. Returns the schema.
-- 55000 unless the shard is locked for its cutover (move_lock) and its
-- move here is recorded; 42704 for a shard not registered here; 22004 for
-- NULL.
CREATE FUNCTION insta_id.move_return(shard_id int)
RETURNS name
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    recorded insta_id_admin.moves;
BEGIN
    IF move_return.shard_id IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    nsp := insta_id._shard_schema(move_return.shard_id);
    PERFORM insta_id._check_move_locked(move_return.shard_id, nsp);
    SELECT * INTO recorded FROM insta_id_admin.moves m
    WHERE m.shard_id = move_return.shard_id AND m.side = 'arriving' AND m.schema_name = nsp FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no move of shard % to this server is recorded', move_return.shard_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    DELETE FROM insta_id_admin.shard_registry r WHERE r.shard_id = move_return.shard_id;
    PERFORM insta_id.move_fence(nsp, move_return.shard_id);
    PERFORM insta_id.move_step(move_return.shard_id, 'arriving', 'returned', nsp, recorded.peer);
    RETURN nsp;
END
$$;
COMMENT ON FUNCTION insta_id.move_return(int) IS
'The cutover of a rollback on the server the shard had moved to: the shard unregistered here, its schema fenced until the rollback drops it (move_release)';

-- Drops the copy this server keeps for a move's rollback (move_reserve),
-- once its window has passed or the rollback is not wanted, or the copy a
-- rollback left here, fenced (move_return), once its clients are on the
-- old server: its schema, as drop_shard drops a shard's (under its locks,
-- never another schema's objects: 2BP01), its migration history and, of
-- a kept copy, the move's record (a rollback's is the mover's to end, with
-- the replication back: move_done). The mover drops the replication back
-- into a kept copy first. Returns the schema. 42704 when no such copy of
-- the shard is here; 55000 when the shard or the schema is registered here
-- (the copy is a shard again) or a subscription still applies into it;
-- 22004 for NULL.
CREATE FUNCTION insta_id.move_release(shard_id int)
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
    WHERE m.shard_id = move_release.shard_id
      AND (m.side = 'leaving' AND m.step IN ('reserved', 'returning') OR m.side = 'arriving' AND m.step = 'returned')
    FOR UPDATE;
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
    -- Each lock waited for as long as the caller's lock_timeout says
    -- (drop_shard's 2 s when it is 0, as drop_shard's own default).
    PERFORM insta_id.drop_shard(move_release.shard_id, force => true,
                                lock_timeout => CASE current_setting('lock_timeout') WHEN '0' THEN '2s'
                                                ELSE current_setting('lock_timeout') END);
    DELETE FROM insta_id_admin.sequence_fences s WHERE s.schema_name = recorded.schema_name;
    DELETE FROM insta_id_admin.moves m WHERE m.shard_id = move_release.shard_id AND m.side = 'leaving';
    RETURN recorded.schema_name;
END
$$;
COMMENT ON FUNCTION insta_id.move_release(int) IS
'Drops the copy of a shard this server kept for a move''s rollback (and the move''s record), or the copy a rollback left here';
