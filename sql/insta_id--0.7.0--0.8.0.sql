\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.8.0'" to load this file. \quit
-- 0.8.0: moving a logical shard online (scripts/move_shard.sh).
-- insta_id.raise_high_water_mark (a shard moved in from a server whose clock
-- is ahead: its milliseconds count as used here too) and
-- insta_id.lock_shard_for_move (held by the mover; insta_id.migrate skips a
-- shard being moved and fails at the end naming it).
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

REVOKE EXECUTE ON FUNCTION insta_id.raise_high_water_mark(timestamptz) FROM PUBLIC;

-- Applies a migration to the template, then to every registered shard
-- lacking it, in shard order: one transaction per schema, run with that
-- schema first on search_path (then the caller's path), recorded in
-- insta_id.applied_migrations in the same transaction. Re-running skips the
-- schemas that have it, so a failure or a cancel is resumed by calling it
-- again; it stops at the first failing schema, naming it. Each schema's
-- statements run under lock_timeout and are retried lock_retries times
-- (waiting longer each time) rather than queueing behind a long transaction
-- while that shard's writers queue behind them. One runner at a time: a
-- second one is refused. No SET clause: PostgreSQL forbids COMMIT in a
-- procedure that has one; search_path is fixed per transaction instead.
CREATE OR REPLACE PROCEDURE insta_id.migrate(migration text, template_schema text, statements text,
                                  lock_timeout text DEFAULT '2s', lock_retries int DEFAULT 10)
LANGUAGE plpgsql
AS $$
DECLARE
    caller_path text := pg_catalog.current_setting('search_path');
    recorded record;
    target name;
    target_shard int;
    last_shard int := -1;
    attempt int;
    shards_done int := 0;
    started timestamptz := pg_catalog.clock_timestamp();
    reported timestamptz := started;
    holder int;
    moving int[] := '{}';
    err_state text;
    err_message text;
    err_detail text;
    err_hint text;
BEGIN
    -- Inside a transaction block COMMIT is refused (2D000): find out before doing anything.
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF migration IS NULL OR template_schema IS NULL OR statements IS NULL OR lock_timeout IS NULL
       OR lock_retries IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF migration = '' OR lock_retries < 0 THEN
        RAISE EXCEPTION 'a migration needs a name, and lock_retries must be at least 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = template_schema) THEN
        RAISE EXCEPTION 'template schema % does not exist', quote_ident(template_schema)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    IF EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.schema_name = template_schema) THEN
        RAISE EXCEPTION 'schema % is a shard, not a template', quote_ident(template_schema)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)

    LOOP
        IF NOT pg_try_advisory_xact_lock(1768515633, 1) THEN
            SELECT l.pid INTO holder FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.classid = 1768515633 AND l.objid = 1 AND l.objsubid = 2 AND l.granted;
            RAISE EXCEPTION 'another insta_id.migrate is running'
                USING ERRCODE = 'object_in_use',
                      DETAIL = format('Process %s holds the migration runner''s lock.', holder),
                      HINT = 'Call insta_id.migrate again once it has finished: it skips the schemas that have the migration.';
        END IF;
        IF target IS NULL THEN
            -- First transaction: one name, one set of statements, one template.
            SELECT m.template_schema, m.statements INTO recorded FROM insta_id.migrations m WHERE m.name = migration;
            IF NOT FOUND THEN
                INSERT INTO insta_id.migrations (name, template_schema, statements)
                VALUES (migration, template_schema, statements);
            ELSIF recorded.template_schema <> template_schema OR recorded.statements <> statements THEN
                RAISE EXCEPTION 'migration % was recorded with another template or other statements', quote_literal(migration)
                    USING ERRCODE = 'duplicate_object',
                          DETAIL = format('Template %I; statements: %s', recorded.template_schema, recorded.statements),
                          HINT = 'A migration is never changed once run: give the new statements a new name.';
            END IF;
        END IF;
        IF NOT EXISTS (SELECT FROM insta_id.applied_migrations a
                       WHERE a.schema_name = template_schema AND a.migration = migrate.migration) THEN
            target := template_schema;
            target_shard := NULL;
        ELSE
            -- The next shard without it; the registry is read again each time,
            -- so shards created meanwhile from the old template are not missed.
            SELECT r.shard_id, r.schema_name INTO target_shard, target FROM insta_id.shard_registry r
            WHERE r.shard_id > last_shard
              AND NOT EXISTS (SELECT FROM insta_id.applied_migrations a
                              WHERE a.schema_name = r.schema_name AND a.migration = migrate.migration)
            ORDER BY r.shard_id LIMIT 1;
            EXIT WHEN NOT FOUND;
            last_shard := target_shard;
        END IF;

        -- A shard being moved (insta_id.lock_shard_for_move) is skipped: DDL
        -- is not replicated, so it would miss the copy on the new server.
        IF target_shard IS NOT NULL AND NOT pg_try_advisory_xact_lock_shared(1768515634, target_shard) THEN
            RAISE NOTICE 'insta_id: migration %: shard % (schema %) is being moved to another server, skipped',
                migration, target_shard, quote_ident(target);
            moving := moving || target_shard;
            CONTINUE;
        END IF;
        attempt := 0;
        LOOP
            BEGIN
                PERFORM set_config('lock_timeout', lock_timeout, true);
                IF target_shard IS NULL THEN
                    PERFORM pg_advisory_xact_lock(1768515633, 2);
                END IF;
                PERFORM set_config('search_path', quote_ident(target) || ', ' || caller_path, true);
                EXECUTE statements;
                PERFORM set_config('search_path', 'pg_catalog, pg_temp', true);
                EXIT;
            EXCEPTION
                WHEN lock_not_available THEN
                    attempt := attempt + 1;
                    IF attempt > lock_retries THEN
                        RAISE EXCEPTION 'migration % could not lock what it changes in schema % within lock_timeout (%), % times',
                                        quote_literal(migration), quote_ident(target), lock_timeout, attempt
                            USING ERRCODE = 'lock_not_available',
                                  DETAIL = CASE WHEN target_shard IS NULL THEN 'The template is not migrated; nothing was changed.'
                                           ELSE 'The template and the shards done so far keep it; insta_id.pending_migrations lists the others.' END,
                                  HINT = 'Find the long transaction holding the lock (pg_stat_activity, pg_locks), or pass a longer lock_timeout or more lock_retries; then call insta_id.migrate again.';
                    END IF;
                    RAISE NOTICE 'insta_id: migration %: schema % busy, retry % of %', migration, quote_ident(target), attempt, lock_retries;
                    -- 0.1 s, 0.2 s, 0.4 s ... up to 5 s, with jitter.
                    PERFORM pg_sleep(least(0.1 * 2 ^ (attempt - 1), 5) * (0.75 + random() / 2));
                WHEN OTHERS THEN
                    GET STACKED DIAGNOSTICS err_state = RETURNED_SQLSTATE, err_message = MESSAGE_TEXT,
                                            err_detail = PG_EXCEPTION_DETAIL, err_hint = PG_EXCEPTION_HINT;
                    RAISE EXCEPTION 'migration % failed in schema %: %', quote_literal(migration),
                                    quote_ident(target) || CASE WHEN target_shard IS NULL THEN ' (the template)'
                                                                ELSE format(' (shard %s)', target_shard) END, err_message
                        USING ERRCODE = err_state,
                              DETAIL = concat_ws(' ', nullif(err_detail, ''), CASE WHEN target_shard IS NULL
                                           THEN 'Nothing was changed.'
                                           ELSE 'The template and the shards done so far keep it; insta_id.pending_migrations lists the others.' END),
                              HINT = CASE WHEN err_state = '25001' THEN
                                         'A migration runs in a transaction per schema: statements that cannot (CREATE INDEX CONCURRENTLY, ...) are run shard by shard from outside first; the migration then holds their IF NOT EXISTS form (docs/shards.md, "Migrations").'
                                     WHEN err_hint <> '' THEN err_hint
                                     ELSE 'Once the cause is fixed, call insta_id.migrate again: it goes on from this schema.' END;
            END;
        END LOOP;
        INSERT INTO insta_id.applied_migrations (schema_name, migration) VALUES (target, migration);
        shards_done := shards_done + (target_shard IS NOT NULL)::int;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF clock_timestamp() - reported >= interval '10 seconds' THEN
            RAISE NOTICE 'insta_id: migration %: % shards migrated so far (up to shard %), % a second',
                migration, shards_done, coalesce(target_shard, -1),
                round(shards_done / extract(epoch FROM clock_timestamp() - started));
            reported := clock_timestamp();
        END IF;
    END LOOP;
    COMMIT;
    IF moving <> '{}' THEN
        RAISE EXCEPTION 'migration % skipped shards being moved to another server: %', quote_literal(migration),
                        array_to_string(moving, ', ')
            USING ERRCODE = 'object_in_use',
                  DETAIL = format('%s other shards were migrated; insta_id.pending_migrations lists the skipped ones while they are here.', shards_done),
                  HINT = 'Call insta_id.migrate again once the moves are done, on the server that holds each shard: its migration history moves with it.';
    END IF;
    RAISE NOTICE 'insta_id: migration %: % shards migrated, % had it already', migration, shards_done,
        (SELECT count(*) FROM insta_id.shard_registry) - shards_done;
END
$$;

-- A shard being moved to another server (scripts/move_shard.sh): the mover
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
    PERFORM insta_id._check_shard_id(lock_shard_for_move.shard_id);
    SELECT r.schema_name INTO nsp FROM insta_id.shard_registry r WHERE r.shard_id = lock_shard_for_move.shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard % does not exist', lock_shard_for_move.shard_id USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT pg_try_advisory_lock(1768515634, lock_shard_for_move.shard_id) THEN
        SELECT l.pid INTO holder FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.classid = 1768515634 AND l.objid = lock_shard_for_move.shard_id
          AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid() LIMIT 1;
        RAISE EXCEPTION 'shard % is being moved or migrated', lock_shard_for_move.shard_id
            USING ERRCODE = 'object_in_use', DETAIL = format('Process %s holds its lock.', holder);
    END IF;
    RETURN nsp;
END
$$;

COMMENT ON FUNCTION insta_id.lock_shard_for_move(int) IS
'Marks a shard as being moved for the rest of the session (insta_id.migrate skips it); returns its schema';

-- DDL helpers are for administrators: superusers, and roles granted EXECUTE.
-- The internal functions they call stay executable: each does only what its
-- caller's own privileges allow (CREATE on the schema, EXECUTE on create_shard).
REVOKE EXECUTE ON FUNCTION
    insta_id.create_shard(int, text), insta_id.add_id_column(regclass, name, int),
    insta_id.create_shards(int, int, text), insta_id.drop_shard(int, boolean),
    insta_id.adopt_shard(text, int), insta_id._copy_template(name, name, int),
    insta_id.lock_shard_for_move(int)
FROM PUBLIC;
