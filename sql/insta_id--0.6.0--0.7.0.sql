\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.7.0'" to load this file. \quit
-- 0.7.0: migrations across shards. insta_id.migrate (a procedure: one named
-- change on the template and every registered shard, one transaction per
-- schema, lock_timeout with retries, one runner at a time, resumable), its
-- history in insta_id.migrations and insta_id.applied_migrations (dumped
-- with the database), insta_id.pending_migrations; a shard copied from a
-- template inherits the template's history, and copies wait while a
-- migration changes the template.
-- Migrations across shards (insta_id.migrate): each one's statements, and
-- which schemas (the template and each shard) have it. Both are user data:
-- pg_dump dumps them. A shard made from a template has every migration the
-- template has.
CREATE TABLE insta_id.migrations (
    name            text PRIMARY KEY CHECK (name <> ''),
    template_schema name NOT NULL,
    statements      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE insta_id.migrations IS
'Migrations run by insta_id.migrate: name, template and statements. Dumped by pg_dump with the database.';

CREATE TABLE insta_id.applied_migrations (
    schema_name name NOT NULL,
    migration   text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, migration)
);

COMMENT ON TABLE insta_id.applied_migrations IS
'Which schema (template or shard) has which migration. Dumped by pg_dump with the database.';

SELECT pg_catalog.pg_extension_config_dump('insta_id.migrations', '');

SELECT pg_catalog.pg_extension_config_dump('insta_id.applied_migrations', '');

GRANT SELECT ON insta_id.migrations, insta_id.applied_migrations TO PUBLIC;

-- Registered shards that lack a migration their template has.
CREATE VIEW insta_id.pending_migrations AS
SELECT m.name AS migration, r.shard_id, r.schema_name
FROM insta_id.migrations m
JOIN insta_id.applied_migrations t ON t.schema_name = m.template_schema AND t.migration = m.name
CROSS JOIN insta_id.shard_registry r
WHERE NOT EXISTS (SELECT FROM insta_id.applied_migrations a
                  WHERE a.schema_name = r.schema_name AND a.migration = m.name);

COMMENT ON VIEW insta_id.pending_migrations IS
'Registered shards without a migration their template has (insta_id.migrate applies it)';

GRANT SELECT ON insta_id.pending_migrations TO PUBLIC;

-- The migrations a schema has, in name order (a template's plan carries them
-- to its copies).
CREATE FUNCTION insta_id._migrations_of(nsp name)
RETURNS jsonb
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(a.migration ORDER BY a.migration), '[]')
    FROM insta_id.applied_migrations a WHERE a.schema_name = nsp
$$;

-- What copying template takes, read from the catalogs once however many
-- shards are made from it (finding a schema's tables scans all of pg_class,
-- which grows with every shard): its tables in name order, each with its
-- next_id columns ("ready": bigint NOT NULL, so a copy needs only a sequence
-- and a default of its own) and the grants on their sequences, its grants,
-- column grants and replica identity; the schema's grants, the foreign keys,
-- and the CACHE for sequences.
-- The template was checked by _check_template.
CREATE OR REPLACE FUNCTION insta_id._template_plan(template name)
RETURNS jsonb
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH t AS (SELECT c.oid, c.relname, c.relacl, c.relowner, c.relreplident
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = template AND c.relkind = 'r')
    SELECT jsonb_build_object(
        'template', template,
        'cache', CASE insta_id.guard_mode() WHEN 'shared' THEN 32 ELSE 1 END,
        'tables', coalesce((
            SELECT jsonb_agg(jsonb_build_object('rel', t.relname, 'id_columns', coalesce((
                       SELECT jsonb_agg(jsonb_build_object('col', a.attname,
                                  'ready', a.atttypid = 'bigint'::regtype AND a.attnotnull,
                                  'sequence_grants', insta_id._grants(s.relacl, s.relowner)) ORDER BY a.attnum)
                       FROM pg_attribute a
                       LEFT JOIN pg_class s ON s.oid = pg_get_serial_sequence(format('%I.%I', template, t.relname), a.attname)::regclass
                       WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
                         AND insta_id._next_id_default_shard(t.oid, a.attname) IS NOT NULL), '[]'),
                   'grants', insta_id._grants(t.relacl, t.relowner),
                   'column_grants', coalesce((SELECT jsonb_agg(jsonb_build_object('col', a.attname, 'grants',
                                                  insta_id._grants(a.attacl, t.relowner)) ORDER BY a.attnum)
                                              FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attacl IS NOT NULL), '[]'),
                   'replica_identity', CASE t.relreplident WHEN 'f' THEN 'FULL' WHEN 'n' THEN 'NOTHING'
                                       WHEN 'i' THEN (SELECT format('USING INDEX %I', i.relname) FROM pg_index x
                                                      JOIN pg_class i ON i.oid = x.indexrelid
                                                      WHERE x.indrelid = t.oid AND x.indisreplident) END)
                   ORDER BY t.relname)
            FROM t), '[]'),
        'schema_grants', (SELECT insta_id._grants(n.nspacl, n.nspowner) FROM pg_namespace n WHERE n.nspname = template),
        'migrations', insta_id._migrations_of(template),
        'foreign_keys', coalesce((
            SELECT jsonb_agg(jsonb_build_object('rel', t.relname, 'name', k.conname, 'def', pg_get_constraintdef(k.oid))
                   ORDER BY t.relname, k.conname)
            FROM pg_constraint k JOIN t ON t.oid = k.conrelid WHERE k.contype = 'f'), '[]'))
$$;

-- Copies every table of a template into schema target, from the template's
-- plan: LIKE ... INCLUDING ALL, then each next_id column gets a sequence of
-- its own and shard's number, then the foreign keys, pointed at the copies
-- when they point into the template.
CREATE OR REPLACE FUNCTION insta_id._copy_planned(plan jsonb, target name, shard int)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    template name := plan->>'template';
    src jsonb;
    col jsonb;
    fk jsonb;
    tbl regclass;
    seq regclass;
BEGIN
    PERFORM insta_id._grant(plan->'schema_grants', format('SCHEMA %I', target));
    FOR src IN SELECT jsonb_array_elements(plan->'tables') LOOP
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING ALL)', target, src->>'rel', template, src->>'rel');
        tbl := format('%I.%I', target, src->>'rel')::regclass;
        FOR col IN SELECT jsonb_array_elements(src->'id_columns') LOOP
            IF (col->>'ready')::boolean THEN
                -- What add_id_column would do to the copy (bigint NOT NULL,
                -- empty), in two statements instead of seven.
                seq := insta_id._new_sequence(target, src->>'rel', col->>'col', (plan->>'cache')::int);
                EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT insta_id.next_id(%s, %L::regclass); '
                               'ALTER SEQUENCE %s OWNED BY %s.%I',
                               tbl, col->>'col', shard, seq, seq, tbl, col->>'col');
            ELSE
                EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col->>'col');
                seq := insta_id.add_id_column(tbl, col->>'col', shard);
            END IF;
            -- Writers of the template's table may use its sequence: the same here.
            PERFORM insta_id._grant(col->'sequence_grants', format('SEQUENCE %s', seq));
        END LOOP;
        PERFORM insta_id._grant(src->'grants', format('TABLE %s', tbl));
        FOR col IN SELECT jsonb_array_elements(src->'column_grants') LOOP
            PERFORM insta_id._grant(col->'grants', format('TABLE %s', tbl), format(' (%I)', col->>'col'));
        END LOOP;
        IF src->>'replica_identity' IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %s REPLICA IDENTITY %s', tbl, src->>'replica_identity');
        END IF;
    END LOOP;
    FOR fk IN SELECT jsonb_array_elements(plan->'foreign_keys') LOOP
        EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s', target, fk->>'rel', fk->>'name',
                       replace(fk->>'def', 'REFERENCES ' || quote_ident(template) || '.',
                                           'REFERENCES ' || quote_ident(target) || '.'));
    END LOOP;
    -- A copy of the template as it is now has every migration the template
    -- has. (Only then is INSERT on the history needed.)
    IF plan->'migrations' <> '[]' THEN
        INSERT INTO insta_id.applied_migrations (schema_name, migration)
        SELECT target, m FROM jsonb_array_elements_text(plan->'migrations') m;
    END IF;
END
$$;

-- insta_id's advisory locks, first key 1768515633 ('iid1'): (key, 1) is
-- held by the migration runner in each of its transactions; (key, 2)
-- exclusively while a migration changes a template, shared while shards are
-- copied from one, so a copy never mixes a template's tables before a
-- migration with its history after it.
CREATE FUNCTION insta_id._lock_template_shared()
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_advisory_xact_lock_shared(1768515633, 2) $$;

CREATE OR REPLACE FUNCTION insta_id.create_shards(first_shard int, last_shard int, template_schema text)
RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    plan jsonb;
BEGIN
    PERFORM insta_id._check_shard_range(first_shard, last_shard, template_schema);
    -- No migration changes the template between reading it and the commit.
    PERFORM insta_id._lock_template_shared();
    plan := insta_id._template_plan(template_schema);
    PERFORM insta_id._check_lock_budget(plan, first_shard, last_shard - first_shard + 1,
        format('CALL insta_id.create_shards_in_batches(%s, %s, %L) commits every few shards; or raise max_locks_per_transaction.',
               first_shard, last_shard, template_schema));
    FOR shard IN first_shard..last_shard LOOP
        PERFORM insta_id._copy_planned(plan, insta_id.create_shard(shard), shard);
    END LOOP;
    RETURN last_shard - first_shard + 1;
END
$$;

-- create_shards for any number of shards: commits every shards_per_commit
-- shards, so its locks never outgrow the lock table, a cancel or failure
-- keeps every shard committed so far (each complete and registered, or
-- absent), and calling it again skips the shards that exist.
-- No SET clause: PostgreSQL forbids COMMIT in a procedure that has one. The
-- procedure fixes search_path itself for each of its transactions (COMMIT
-- ends a transaction-local setting) and leaves the work to functions that
-- fix theirs.
CREATE OR REPLACE PROCEDURE insta_id.create_shards_in_batches(first_shard int, last_shard int, template_schema text,
                                                   shards_per_commit int DEFAULT 50)
LANGUAGE plpgsql
AS $$
DECLARE
    plan jsonb;
    first_missing int;
    lo int;
    hi int;
    made int;
    created int := 0;
    started timestamptz;
    reported timestamptz;
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    PERFORM insta_id._check_shard_range(first_shard, last_shard, template_schema);
    IF shards_per_commit IS NULL OR shards_per_commit < 1 THEN
        RAISE EXCEPTION 'shards_per_commit must be at least 1' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The template is read, and one batch's locks measured, once for the whole run.
    plan := insta_id._template_plan(template_schema);
    SELECT min(s) INTO first_missing FROM generate_series(first_shard, last_shard) s
    WHERE NOT EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.shard_id = s);
    IF first_missing IS NOT NULL THEN
        PERFORM insta_id._check_lock_budget(plan, first_missing, least(shards_per_commit, last_shard - first_missing + 1),
            'Pass a smaller shards_per_commit, or raise max_locks_per_transaction.');
    END IF;
    started := clock_timestamp();
    reported := started;
    lo := first_shard;
    WHILE lo <= last_shard LOOP
        hi := least(lo::bigint + shards_per_commit - 1, last_shard)::int;
        -- A migration of the template between two batches: read it again.
        PERFORM insta_id._lock_template_shared();
        IF insta_id._migrations_of(template_schema) <> plan->'migrations' THEN
            PERFORM insta_id._check_template(template_schema);
            plan := insta_id._template_plan(template_schema);
        END IF;
        made := insta_id._create_shard_batch(lo, hi, plan);
        created := created + made;
        COMMIT;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF clock_timestamp() - reported >= interval '10 seconds' AND hi < last_shard THEN
            RAISE NOTICE 'insta_id: shards %..% done of %..%: % created, % a second',
                first_shard, hi, first_shard, last_shard, created,
                round(created / extract(epoch FROM clock_timestamp() - started));
            reported := clock_timestamp();
        END IF;
        lo := hi + 1;
    END LOOP;
    RAISE NOTICE 'insta_id: shards %..%: % created, % existed already',
        first_shard, last_shard, created, last_shard - first_shard + 1 - created;
END
$$;

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
CREATE PROCEDURE insta_id.migrate(migration text, template_schema text, statements text,
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
    RAISE NOTICE 'insta_id: migration %: % shards migrated, % had it already', migration, shards_done,
        (SELECT count(*) FROM insta_id.shard_registry) - shards_done;
END
$$;

COMMENT ON PROCEDURE insta_id.migrate(text, text, text, text, int) IS
'Runs a named migration on the template and every registered shard lacking it, one transaction per schema; resumable';

CREATE OR REPLACE FUNCTION insta_id.drop_shard(shard_id int, force boolean DEFAULT false)
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
    IF EXISTS (SELECT FROM insta_id.applied_migrations a WHERE a.schema_name = nsp) THEN
        DELETE FROM insta_id.applied_migrations a WHERE a.schema_name = nsp;
    END IF;
END
$$;

REVOKE EXECUTE ON PROCEDURE insta_id.create_shards_in_batches(int, int, text, int),
    insta_id.migrate(text, text, text, text, int) FROM PUBLIC;
