-- Migrations across shards: insta_id.migrate runs a named change on a
-- template and on every registered shard of it, one transaction per schema,
-- recorded in migrations/applied_migrations (user data, dumped by pg_dump).
-- search_path and privileges: as registry.sql says. Each schema's
-- statements go through the gate (gate.sql): as the one owner of the
-- schema's objects and of the code PostgreSQL may run for them, never as
-- the caller or the schema's owner.

-- Migrations across shards (insta_id.migrate): each one's statements, and
-- which schemas (the template and each shard) have it. Both are user data:
-- pg_dump dumps them. A shard made from a template has every migration the
-- template has.
CREATE TABLE insta_id_admin.migrations (
    name            text PRIMARY KEY CHECK (name <> ''),
    template_schema name NOT NULL,
    statements      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE insta_id_admin.migrations IS
'Migrations run by insta_id.migrate: name, template and statements. Dumped by pg_dump with the database.';
CREATE TABLE insta_id_admin.applied_migrations (
    schema_name name NOT NULL,
    migration   text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, migration)
);
COMMENT ON TABLE insta_id_admin.applied_migrations IS
'Which schema (template or shard) has which migration. Dumped by pg_dump with the database.';
SELECT pg_catalog.pg_extension_config_dump('insta_id_admin.migrations', '');
SELECT pg_catalog.pg_extension_config_dump('insta_id_admin.applied_migrations', '');

-- What PUBLIC reads of them (a deploy checks that every shard has a
-- migration): functions, for the reason insta_id.shards() gives; a
-- migration's statements only to those who may run migrations.
CREATE FUNCTION insta_id.migrations(OUT name text, OUT template_schema name, OUT created_at timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.name, m.template_schema, m.created_at FROM insta_id_admin.migrations m ORDER BY m.name
$$;
COMMENT ON FUNCTION insta_id.migrations() IS
'Migrations run by insta_id.migrate: name, template and when (their statements are in insta_id_admin.migrations)';

CREATE FUNCTION insta_id.applied_migrations(OUT schema_name name, OUT migration text, OUT applied_at timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.schema_name, a.migration, a.applied_at FROM insta_id_admin.applied_migrations a
    ORDER BY a.schema_name, a.migration
$$;
COMMENT ON FUNCTION insta_id.applied_migrations() IS 'Which schema (template or shard) has which migration';

-- Registered shards that lack a migration their template has.
CREATE FUNCTION insta_id.pending_migrations(OUT migration text, OUT shard_id int, OUT schema_name name)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT m.name, r.shard_id, r.schema_name
    FROM insta_id_admin.migrations m
    JOIN insta_id_admin.applied_migrations t ON t.schema_name = m.template_schema AND t.migration = m.name
    JOIN insta_id_admin.shard_registry r ON r.template_schema IS NULL OR r.template_schema = m.template_schema
    WHERE NOT EXISTS (SELECT FROM insta_id_admin.applied_migrations a
                      WHERE a.schema_name = r.schema_name AND a.migration = m.name)
    ORDER BY m.name, r.shard_id
$$;
COMMENT ON FUNCTION insta_id.pending_migrations() IS
'Registered shards without a migration their template has (insta_id.migrate applies it)';

-- Waits for this session's commits as synchronous_commit says, once
-- (src/commits.rs): migrate commits each schema without waiting.
CREATE FUNCTION insta_id._wait_for_commits()
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_wait_for_commits';

-- The migrations a schema has, in name order (a template's plan carries them
-- to its copies).
CREATE FUNCTION insta_id._migrations_of(nsp name)
RETURNS jsonb
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(a.migration ORDER BY a.migration), '[]')
    FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp
$$;

-- Longer than a screen: a procedure that COMMITs between schemas keeps its
-- loop, retries and bookkeeping in one body (a called function cannot
-- COMMIT); the per-schema work is _run_in_schema's.
-- Applies a migration to the template, then to every registered shard of
-- that template lacking it (and to shards of no recorded template), in shard
-- order: one transaction per schema, through the gate (insta_id._gate: as
-- the one owner of the schema's objects, in a security-restricted
-- operation with search_path = <schema>, pg_catalog, pg_temp), recorded in
-- insta_id_admin.applied_migrations in the same transaction. Re-running skips the
-- schemas that have it, so a failure or a cancel is resumed by calling it
-- again; it stops at the first failing schema, naming it. Each schema's
-- statements run under lock_timeout and are retried lock_retries times
-- (waiting longer each time) rather than queueing behind a long transaction
-- while that shard's writers queue behind them; a shard still busy then is
-- skipped, naming who holds what it needs, and the others are migrated:
-- the call then fails (55P03) listing the skipped shards, which a call
-- again finishes. (The template is never skipped: it fails there.) One runner at a time: a
-- second one is refused. No SET clause: PostgreSQL forbids COMMIT in a
-- procedure that has one; search_path is fixed per transaction instead, by
-- the first statement after each COMMIT. Until then only qualified names
-- run: the declarations' types are pg_catalog's and have no initial values
-- (an expression there would run under the caller's search_path).
-- The shards lacking it are read in one pass, in shard order, and walked
-- one by one, each checked again at its turn; at the end of the list the
-- registry is read again for shards made meanwhile above the last one
-- walked. (A read of the next shard at each step was O(N) a step whenever
-- the statistics were older than the shards, as right after
-- create_shards_in_batches: every later shard read and sorted, 1.6 ms a
-- shard at 3000 shards; and an anti-join read all of applied_migrations:
-- its key is probed a shard at a time, OFFSET 0.)
CREATE PROCEDURE insta_id.migrate(migration text, template_schema text, statements text,
                                  lock_timeout text DEFAULT '2s', lock_retries int DEFAULT 10)
LANGUAGE plpgsql
AS $$
DECLARE
    recorded_template pg_catalog.name;
    recorded_statements pg_catalog.text;
    target pg_catalog.name;
    target_shard pg_catalog.int4;
    last_shard pg_catalog.int4;
    attempt pg_catalog.int4;
    shards_done pg_catalog.int4;
    started pg_catalog.timestamptz;
    reported pg_catalog.timestamptz;
    holder pg_catalog.int4;
    todo pg_catalog.int4[];
    pos pg_catalog.int4;
    found_schema pg_catalog.name;
    moving pg_catalog.int4[];
    skipped pg_catalog.int4[];
    had_it pg_catalog.int8;
    held pg_catalog.text[];
    busy pg_catalog.text;
    err_state pg_catalog.text;
    err_message pg_catalog.text;
    err_detail pg_catalog.text;
    err_hint pg_catalog.text;
BEGIN
    -- Inside a transaction block COMMIT is refused (2D000): find out before doing anything.
    COMMIT;
    -- Each transaction READ COMMITTED, whatever default_transaction_isolation
    -- says: the gate decides from what it reads after its locks (ddl.rs).
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    last_shard := -1;
    shards_done := 0;
    started := clock_timestamp();
    reported := started;
    todo := '{}';
    pos := 1;
    moving := '{}';
    skipped := '{}';
    held := '{}';
    IF migration IS NULL OR migrate.template_schema IS NULL OR statements IS NULL OR lock_timeout IS NULL
       OR lock_retries IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF migration = '' OR lock_retries < 0 THEN
        RAISE EXCEPTION 'a migration needs a name, and lock_retries must be at least 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM insta_id._check_name(migrate.template_schema);
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = migrate.template_schema) THEN
        RAISE EXCEPTION 'template schema % does not exist', quote_ident(migrate.template_schema)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.schema_name = migrate.template_schema) THEN
        RAISE EXCEPTION 'schema % is a shard, not a template', quote_ident(migrate.template_schema)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)

    LOOP
        IF NOT insta_id._lock(insta_id._schema_lock_key(), 1, shared => false, session => false, wait => false) THEN
            holder := insta_id._lock_holder(insta_id._schema_lock_key(), 1);
            PERFORM insta_id._wait_for_commits();
            RAISE EXCEPTION 'another insta_id.migrate is running'
                USING ERRCODE = 'object_in_use',
                      DETAIL = format('Process %s holds the migration runner''s lock.', holder),
                      HINT = 'Call insta_id.migrate again once it has finished: it skips the schemas that have the migration.';
        END IF;
        IF target IS NULL THEN
            -- (what the last NOTICE reports: shards made meanwhile, which
            -- are copied with the migration, are not counted)
            had_it := (SELECT count(*) FROM insta_id_admin.shard_registry r
                       WHERE (r.template_schema IS NULL OR r.template_schema = migrate.template_schema)
                         AND EXISTS (SELECT FROM insta_id_admin.applied_migrations a
                                     WHERE a.schema_name = r.schema_name AND a.migration = migrate.migration));
            -- First transaction: one name, one set of statements, one template.
            SELECT m.template_schema, m.statements INTO recorded_template, recorded_statements
            FROM insta_id_admin.migrations m WHERE m.name = migration;
            IF NOT FOUND THEN
                PERFORM insta_id._admin_write('migration', pg_catalog.jsonb_build_object(
                    'name', migration, 'template', migrate.template_schema, 'statements', statements));
            ELSIF recorded_template <> migrate.template_schema OR recorded_statements <> statements THEN
                RAISE EXCEPTION 'migration % was recorded with another template or other statements', quote_literal(migration)
                    USING ERRCODE = 'duplicate_object',
                          DETAIL = format('Template %I; statements: %s', recorded_template, recorded_statements),
                          HINT = 'A migration is never changed once run: give the new statements a new name.';
            END IF;
        END IF;
        IF NOT EXISTS (SELECT FROM insta_id_admin.applied_migrations a
                       WHERE a.schema_name = migrate.template_schema AND a.migration = migrate.migration) THEN
            target := migrate.template_schema;
            target_shard := NULL;
        ELSE
            -- The next shard without it (see above): the list, read again
            -- at its end so that shards created meanwhile from the old
            -- template are not missed; each still the template's, without it.
            IF pos > cardinality(todo) THEN
                todo := ARRAY(SELECT r.shard_id FROM insta_id_admin.shard_registry r
                              WHERE r.shard_id > last_shard
                                AND (r.template_schema IS NULL OR r.template_schema = migrate.template_schema)
                                AND NOT EXISTS (SELECT FROM insta_id_admin.applied_migrations a
                                                WHERE a.schema_name = r.schema_name AND a.migration = migrate.migration OFFSET 0)
                              ORDER BY r.shard_id);
                pos := 1;
                EXIT WHEN cardinality(todo) = 0;
            END IF;
            last_shard := todo[pos];
            pos := pos + 1;
            SELECT r.schema_name INTO found_schema FROM insta_id_admin.shard_registry r
            WHERE r.shard_id = last_shard
              AND (r.template_schema IS NULL OR r.template_schema = migrate.template_schema)
              AND NOT EXISTS (SELECT FROM insta_id_admin.applied_migrations a
                              WHERE a.schema_name = r.schema_name AND a.migration = migrate.migration OFFSET 0);
            CONTINUE WHEN NOT FOUND;  -- (dropped, or made again, meanwhile)
            target_shard := last_shard;
            target := found_schema;
        END IF;

        -- A shard being moved (insta_id.lock_shard_for_move) is skipped: DDL
        -- is not replicated, so it would miss the copy on the new server.
        IF target_shard IS NOT NULL
           AND NOT insta_id._lock(insta_id._move_lock_key(), target_shard, shared => true, session => false, wait => false) THEN
            RAISE NOTICE 'insta_id: migration %: shard % (schema %) is being moved to another server, skipped',
                migration, target_shard, quote_ident(target);
            moving := moving || target_shard;
            CONTINUE;
        END IF;
        -- So is one moved here whose old server keeps a copy following it
        -- for a rollback (this server's record of the move stays until the
        -- copy is dropped): the rows that follow would no longer fit it.
        IF target_shard IS NOT NULL AND EXISTS (SELECT FROM insta_id_admin.moves m
                                                WHERE m.shard_id = target_shard AND m.side = 'arriving') THEN
            RAISE NOTICE 'insta_id: migration %: shard % (schema %) was moved here and is not done yet (its old copy may follow it for a rollback), skipped',
                migration, target_shard, quote_ident(target);
            moving := moving || target_shard;
            CONTINUE;
        END IF;
        -- The shard's registry row, held against a drop_shard (which takes
        -- it FOR UPDATE) until this schema's transaction ends; its schema
        -- must exist: a migration never runs under another schema.
        IF target_shard IS NOT NULL THEN
            busy := NULL;
            BEGIN
                PERFORM insta_id._admin_write('lock', pg_catalog.jsonb_build_object('shard', target_shard, 'exclusive', false));
            EXCEPTION WHEN lock_not_available THEN
                -- (a drop_shard of it waiting, or a session holding its row)
                busy := 'its registry row is held';
            END;
            IF busy IS NOT NULL THEN
                RAISE NOTICE 'insta_id: migration %: shard % (schema %): %, skipped', migration, target_shard, quote_ident(target), busy;
                skipped := skipped || target_shard;
                held := held || format('shard %s: %s', target_shard, busy);
                CONTINUE;
            END IF;
            CONTINUE WHEN NOT EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = target_shard);  -- dropped meanwhile
        END IF;
        IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = target) THEN
            PERFORM insta_id._wait_for_commits();
            RAISE EXCEPTION 'migration % stopped: schema % of shard % does not exist', quote_literal(migration),
                            quote_ident(target), target_shard
                USING ERRCODE = 'invalid_schema_name',
                      DETAIL = 'The template and the shards before it have the migration.',
                      HINT = format('Restore the schema, or unregister the shard (insta_id.drop_shard(%s)); then call insta_id.migrate again.', target_shard);
        END IF;
        attempt := 0;
        busy := NULL;
        LOOP
            BEGIN
                PERFORM set_config('lock_timeout', lock_timeout, true);
                IF target_shard IS NULL THEN
                    PERFORM insta_id._lock(insta_id._schema_lock_key(), 2, shared => false, session => false, wait => true);
                END IF;
                -- As the owner of the schema's objects: the statements, and the
                -- owner's code they reach (triggers, defaults, functions), never
                -- run with the caller's rights, nor with the schema owner's
                -- (a DBA's schema where the application makes its tables).
                -- Objects of several owners: refused (42501) here. The schema's
                -- lock first, held to COMMIT: no object arrives in it between
                -- that check and the statements that would resolve it.
                PERFORM insta_id._lock_schema((SELECT n.oid FROM pg_namespace n WHERE n.nspname = target));
                PERFORM insta_id._gate(target, NULL, ARRAY[statements]);
                EXIT;
            EXCEPTION
                WHEN lock_not_available THEN
                    GET STACKED DIAGNOSTICS err_detail = PG_EXCEPTION_DETAIL;
                    attempt := attempt + 1;
                    IF attempt > lock_retries AND target_shard IS NOT NULL THEN
                        -- Who holds it: named by the lock that gave up, else read now.
                        busy := coalesce(nullif(err_detail, ''),
                                         insta_id._lock_holders_in((SELECT n.oid FROM pg_namespace n WHERE n.nspname = target)),
                                         'its holder has let go since');
                        RAISE NOTICE 'insta_id: migration %: shard % (schema %) still busy after % tries, skipped: %',
                            migration, target_shard, quote_ident(target), attempt, busy;
                        skipped := skipped || target_shard;
                        held := held || format('shard %s: %s', target_shard, busy);
                        EXIT;
                    ELSIF attempt > lock_retries THEN
                        RAISE EXCEPTION 'migration % could not lock what it changes in schema % within lock_timeout (%), % times',
                                        quote_literal(migration), quote_ident(target), lock_timeout, attempt
                            USING ERRCODE = 'lock_not_available',
                                  -- (who held it, as the gate named it)
                                  DETAIL = concat_ws(' ', nullif(err_detail, ''),
                                                     CASE WHEN target_shard IS NULL THEN 'The template is not migrated; nothing was changed.'
                                                     ELSE 'The template and the shards done so far keep it; insta_id.pending_migrations() lists the others.' END),
                                  HINT = 'Find the long transaction holding the lock (pg_stat_activity, pg_locks), or pass a longer lock_timeout or more lock_retries; then call insta_id.migrate again.';
                    END IF;
                    RAISE NOTICE 'insta_id: migration %: schema % busy, retry % of %', migration, quote_ident(target), attempt, lock_retries;
                    -- 0.1 s, 0.2 s, 0.4 s ... up to 5 s, with jitter.
                    PERFORM pg_sleep(least(0.1 * 2 ^ (attempt - 1), 5) * (0.75 + random() / 2));
                WHEN OTHERS THEN
                    GET STACKED DIAGNOSTICS err_state = RETURNED_SQLSTATE, err_message = MESSAGE_TEXT,
                                            err_detail = PG_EXCEPTION_DETAIL, err_hint = PG_EXCEPTION_HINT;
                    -- (the schemas done so far keep it, durably)
                    PERFORM insta_id._wait_for_commits();
                    RAISE EXCEPTION 'migration % failed in schema %: %', quote_literal(migration),
                                    quote_ident(target) || CASE WHEN target_shard IS NULL THEN ' (the template)'
                                                                ELSE format(' (shard %s)', target_shard) END, err_message
                        USING ERRCODE = err_state,
                              DETAIL = concat_ws(' ', nullif(err_detail, ''), CASE WHEN target_shard IS NULL
                                           THEN 'Nothing was changed.'
                                           ELSE 'The template and the shards done so far keep it; insta_id.pending_migrations() lists the others.' END),
                              HINT = CASE WHEN err_state = '25001' THEN
                                         'A migration runs in a transaction per schema: statements that cannot (CREATE INDEX CONCURRENTLY, ...) are run shard by shard from outside first; the migration then holds their IF NOT EXISTS form (docs/shards.md, "Migrations").'
                                     WHEN err_hint <> '' THEN err_hint
                                     WHEN err_state = '42501' THEN
                                         'A migration runs as the one owner of the schema''s objects, in a security-restricted operation: it may do what that role may, and deferred triggers must fire within its statements (SET CONSTRAINTS ALL IMMEDIATE after the changes; docs/shards.md, "Privileges").'
                                     ELSE 'Once the cause is fixed, call insta_id.migrate again: it goes on from this schema.' END;
            END;
        END LOOP;
        IF busy IS NULL THEN
            PERFORM insta_id._admin_write('applied', pg_catalog.jsonb_build_object('schema', target, 'migrations', pg_catalog.jsonb_build_array(migration)));
            shards_done := shards_done + (target_shard IS NOT NULL)::int;
        END IF;
        -- A schema's COMMIT does not wait for its WAL to reach the disk (or
        -- a synchronous standby): one lost in a crash is lost whole, its
        -- record in applied_migrations with it, and a call again applies
        -- it. Before the runner returns, or stops at an error of its own,
        -- it waits once (_wait_for_commits), as the caller's
        -- synchronous_commit says (set only for this COMMIT), for its last
        -- commit and so for every earlier one: WAL is flushed in order.
        -- (A flush a schema was a third of a migration's time.)
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
        COMMIT;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        -- (COMMIT ends the settings: every wait of the next schema bounded too)
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        PERFORM pg_catalog.set_config('lock_timeout', lock_timeout, true);
        IF clock_timestamp() - reported >= interval '10 seconds' THEN
            RAISE NOTICE 'insta_id: migration %: % shards migrated so far (up to shard %), % a second',
                migration, shards_done, coalesce(target_shard, -1),
                round(shards_done / extract(epoch FROM clock_timestamp() - started));
            reported := clock_timestamp();
        END IF;
    END LOOP;
    PERFORM insta_id._wait_for_commits();
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF skipped <> '{}' THEN
        RAISE EXCEPTION 'migration % skipped shards it could not lock within lock_timeout (%), % times: %', quote_literal(migration),
                        lock_timeout, lock_retries + 1, array_to_string(skipped, ', ')
            USING ERRCODE = 'lock_not_available',
                  DETAIL = concat_ws(' ', format('%s other shards were migrated.', shards_done),
                                     'Busy: ' || array_to_string(held, '; ') || '.',
                                     CASE WHEN moving <> '{}' THEN format('Skipped as being moved: %s.', array_to_string(moving, ', ')) END),
                  HINT = 'End or wait for those transactions (pg_stat_activity; pg_terminate_backend), or pass a longer lock_timeout or more lock_retries; then call insta_id.migrate again: it migrates only the shards that lack it.';
    END IF;
    IF moving <> '{}' THEN
        RAISE EXCEPTION 'migration % skipped shards being moved to another server: %', quote_literal(migration),
                        array_to_string(moving, ', ')
            USING ERRCODE = 'object_in_use',
                  DETAIL = format('%s other shards were migrated; insta_id.pending_migrations() lists the skipped ones while they are here.', shards_done),
                  HINT = 'Call insta_id.migrate again once the moves are done (a kept old copy released: insta-id move --release), on the server that holds each shard: its migration history moves with it.';
    END IF;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    RAISE NOTICE 'insta_id: migration %: % shards migrated, % had it already', migration, shards_done, had_it;
END
$$;
COMMENT ON PROCEDURE insta_id.migrate(text, text, text, text, int) IS
'Runs a named migration on the template and every registered shard lacking it, one transaction per schema; resumable';
