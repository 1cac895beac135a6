-- Copying a template into shards: create_shards (one transaction) and
-- create_shards_in_batches (a procedure committing every N shards), with
-- the checks made before anything is created (range, owners, lock budget).
-- search_path and privileges: as registry.sql says. Every object of a copy
-- is made by its final owner, the one owner of the template's objects
-- (_code_owner), through _run_in_schema: the code PostgreSQL evaluates
-- while making them (a CHECK validated, an index expression folded, a
-- materialized view filled) runs with that owner's rights, never the
-- caller's (docs/shards.md, "Privileges").

-- Copies the template's plan into new shards `shards`, in the caller's
-- transaction: what create_shard and then _copy_planned do for a shard, but
-- each step for every shard before the next step: their schemas made, then
-- registered, then granted, commented and owned as the template's, then
-- each copy made. A change to a schema makes PostgreSQL drop every cached
-- plan of the session, so with one between two copies, each copy (and each
-- registration) planned all its statements again.
CREATE FUNCTION insta_id._create_copies(plan jsonb, shards int[])
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    extra jsonb := plan->'extra';
    -- (the shards as given, numbered from 1 whatever the array's bounds)
    ids int[] := ARRAY(SELECT unnest(shards));
    -- (each shard's schema, in the same order)
    targets name[] := '{}';
BEGIN
    IF plan IS NULL OR shards IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    FOR i IN 1..cardinality(ids) LOOP
        targets := targets || insta_id._new_shard_schema(ids[i], NULL);
    END LOOP;
    -- (registered while the caller owns them, as create_shard registers)
    FOR i IN 1..cardinality(ids) LOOP
        PERFORM insta_id._admin_write('add', jsonb_build_object('shard', ids[i], 'schema', targets[i]));
    END LOOP;
    -- Each schema as the template's: its grants and owner, before anything
    -- is made in it (the owner of its objects may need its CREATE).
    FOR i IN 1..cardinality(ids) LOOP
        PERFORM insta_id._grant(plan->'schema_grants', format('SCHEMA %I', targets[i]));
        IF extra->>'schema_comment' IS NOT NULL THEN
            EXECUTE format('COMMENT ON SCHEMA %I IS %L', targets[i], extra->>'schema_comment');
        END IF;
        IF extra->>'schema_owner' IS NOT NULL THEN
            -- (read back as a role, so printed quoted as PostgreSQL quotes it)
            EXECUTE format('ALTER SCHEMA %I OWNER TO %s', targets[i], (extra->>'schema_owner')::regrole);
        END IF;
    END LOOP;
    FOR i IN 1..cardinality(ids) LOOP
        PERFORM insta_id._copy_planned(plan, targets[i], ids[i]);
    END LOOP;
END
$$;

-- Longer than a screen: the plan's steps must run in this order in one
-- schema (tables, sequences, then functions, views, keys, triggers,
-- grants); each step is a loop over one kind of planned object.
-- Copies every table of a template into schema target, made for it by
-- _create_copies, from the template's plan: LIKE ... INCLUDING ALL, then
-- each next_id column gets a sequence of its own and shard's number, then
-- the foreign keys, pointed at the copies when they point into the template.
CREATE FUNCTION insta_id._copy_planned(plan jsonb, target name, shard int)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- Function bodies may use tables made later in the copy (pg_dump does the same).
SET check_function_bodies = off
AS $$
DECLARE
    template name := plan->>'template';
    extra jsonb := plan->'extra';
    src jsonb;
    col jsonb;
    tbl text;
    seq text;
    seq_name name;
    -- The statements to run as the owner, in order, run in one
    -- _run_in_schema call (one security-restricted operation, one check
    -- of what would outlive it) unless something else must run between:
    -- add_id_column, or a sequence name chosen against what they make.
    pending text[];
    -- Names the pending statements may take in the copy: the template's
    -- relations', and the sequences' chosen so far.
    names text[] := ARRAY(SELECT t->>'rel' FROM jsonb_array_elements(plan->'tables') t);
    -- Every statement below that makes or changes an object of the copy
    -- runs as this role, in a security-restricted operation with the copy's
    -- schema first on search_path (deparsed statements name the copy's
    -- objects unqualified), never under this function's own path.
    owner regrole := (plan->'extra'->>'code_owner')::regrole;
BEGIN
    pending := ARRAY(SELECT jsonb_array_elements_text(extra->'types'));
    FOR src IN SELECT jsonb_array_elements(plan->'tables') LOOP
        tbl := format('%I.%I', target, src->>'rel');
        -- Indexes and statistics objects are made below under the template's
        -- names (LIKE would name them afresh: my_pk would become t_pkey).
        -- Columns of the template's types get the copy's (before any partition exists).
        pending := pending || ARRAY[
            CASE WHEN src ? 'partition_of'
                 THEN format('CREATE %sTABLE %s PARTITION OF %I.%I %s%s',
                             CASE WHEN (src->>'unlogged')::boolean THEN 'UNLOGGED ' ELSE '' END, tbl, target, src->>'partition_of',
                             src->>'bound', ' PARTITION BY ' || (src->>'partition_by'))
                 ELSE format('CREATE %sTABLE %s (LIKE %I.%I INCLUDING ALL EXCLUDING INDEXES EXCLUDING STATISTICS%s)%s',
                             CASE WHEN (src->>'unlogged')::boolean THEN 'UNLOGGED ' ELSE '' END, tbl, template, src->>'rel',
                             CASE WHEN extra->'deparsed_tables' ? (src->>'rel') THEN ' EXCLUDING DEFAULTS EXCLUDING CONSTRAINTS' ELSE '' END,
                             ' PARTITION BY ' || (src->>'partition_by')) END]
            || ARRAY(SELECT jsonb_array_elements_text(extra->'retype'->(src->>'rel')));
        FOR col IN SELECT jsonb_array_elements(src->'id_columns') LOOP
            IF (col->>'ready')::boolean THEN
                -- What add_id_column would do to the copy (bigint NOT NULL,
                -- empty), in three statements instead of seven.
                seq_name := insta_id._sequence_name(target, src->>'rel', col->>'col');
                IF seq_name = ANY (names) THEN
                    -- A name the pending statements may take: they run
                    -- first, and the name is chosen against what they made.
                    PERFORM insta_id._run_in_schema(target, owner, pending);
                    pending := '{}';
                    seq_name := insta_id._sequence_name(target, src->>'rel', col->>'col');
                END IF;
                names := names || seq_name::text;
                seq := format('%I.%I', target, seq_name);
                pending := pending || ARRAY[
                    format('CREATE SEQUENCE %s CACHE %s', seq, (plan->>'cache')::int),
                    format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT insta_id.next_id(%s, %L::pg_catalog.regclass)', tbl, col->>'col', shard, seq),
                    format('ALTER SEQUENCE %s OWNED BY %s.%I', seq, tbl, col->>'col')];
            ELSE
                PERFORM insta_id._run_in_schema(target, owner, pending || format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col->>'col'));
                pending := '{}';
                -- (which runs its statements as the table's owner, this one)
                seq := insta_id.add_id_column(tbl::regclass, col->>'col', shard)::text;
            END IF;
            -- Writers of the template's table may use its sequence: the same here.
            pending := pending || ARRAY(SELECT jsonb_array_elements_text(
                insta_id._grant_statements(col->'sequence_grants', format('SEQUENCE %s', seq))));
        END LOOP;
        pending := pending || ARRAY(
            SELECT jsonb_array_elements_text(insta_id._grant_statements(src->'grants', format('TABLE %s', tbl)))
            UNION ALL
            SELECT jsonb_array_elements_text(insta_id._grant_statements(c->'grants', format('TABLE %s', tbl), format(' (%I)', c->>'col')))
            FROM jsonb_array_elements(src->'column_grants') c);
    END LOOP;
    -- Functions, procedures and views, each after what it uses (a
    -- function's search_path naming the template names the copy instead);
    -- then defaults and CHECKs of the tables made without them (they may use
    -- the functions); indexes, primary key, unique and exclusion
    -- constraints, statistics objects, their comments; replica identities;
    -- foreign keys; triggers, row-level security, policies.
    PERFORM insta_id._run_in_schema(target, owner, pending || ARRAY(
        SELECT x.statement FROM (
            SELECT o.ord, s.ord AS sub, s.statement
            FROM jsonb_array_elements(extra->'objects') WITH ORDINALITY o(obj, ord),
            -- (a view made with pg_catalog first, as it was deparsed)
            LATERAL (SELECT e.ord, CASE WHEN e.ord = 1 AND o.obj ? 'view'
                                        THEN format('SET LOCAL search_path = pg_catalog, %1$I, pg_temp; %2$s; SET LOCAL search_path = %1$I, pg_catalog, pg_temp',
                                                    target, insta_id._requalified(e.statement, template, target))
                                        ELSE e.statement END
                     FROM jsonb_array_elements_text(o.obj->'sql') WITH ORDINALITY e(statement, ord)
                     UNION ALL
                     SELECT 1e9, format('ALTER %s SET search_path = %s', o.obj->'path'->>'function',
                                        (SELECT string_agg(CASE WHEN jsonb_typeof(p) = 'null' THEN quote_ident(target)
                                                                ELSE quote_ident(p #>> '{}') END, ', ' ORDER BY i)
                                         FROM jsonb_array_elements(o.obj->'path'->'search_path') WITH ORDINALITY p(p, i)))
                     WHERE o.obj->'path' IS NOT NULL) s
            UNION ALL
            SELECT 1e9 + e.ord, 0, e.statement FROM jsonb_array_elements_text((extra->'late') || (extra->'indexes')) WITH ORDINALITY e(statement, ord)
            UNION ALL
            SELECT 2e9 + e.ord, 0, format('ALTER TABLE %I.%I REPLICA IDENTITY %s', target, e.t->>'rel', e.t->>'replica_identity')
            FROM jsonb_array_elements(plan->'tables') WITH ORDINALITY e(t, ord) WHERE e.t->>'replica_identity' IS NOT NULL
            UNION ALL
            SELECT 3e9 + e.ord, 0, format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s', target, e.fk->>'rel', e.fk->>'name',
                                          insta_id._requalified(e.fk->>'def', template, target))
            FROM jsonb_array_elements(plan->'foreign_keys') WITH ORDINALITY e(fk, ord)
            UNION ALL
            SELECT 4e9 + e.ord, 0, e.statement FROM jsonb_array_elements_text(extra->'after') WITH ORDINALITY e(statement, ord)
            UNION ALL
            -- Materialized views populated in the template are filled last
            -- (PostgreSQL's REFRESH runs their query as their owner too).
            SELECT 5e9 + e.ord, 0, format('REFRESH MATERIALIZED VIEW %I.%I', target, e.m)
            FROM jsonb_array_elements_text(extra->'populated') WITH ORDINALITY e(m, ord)) x
        ORDER BY x.ord, x.sub));
    PERFORM insta_id._admin_write('set_template', jsonb_build_object('shard', shard, 'template', template));
    -- A copy of the template as it is now has every migration the template has.
    IF plan->'migrations' <> '[]' THEN
        PERFORM insta_id._admin_write('applied', jsonb_build_object('schema', target, 'migrations', plan->'migrations'));
    END IF;
END
$$;

-- Checks the arguments of create_shards and create_shards_in_batches, and
-- the template, before any shard is made.
CREATE FUNCTION insta_id._check_shard_range(first_shard int, last_shard int, template_schema text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF template_schema IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_range_bounds(first_shard, last_shard);
    PERFORM insta_id._check_name(template_schema);
    PERFORM insta_id._check_template(template_schema);
END
$$;

-- A copy's objects are made by the one owner of the template's objects, its
-- schema given to the template schema's owner: refuses, before making
-- anything, a caller who may not act as those roles, and an owner of the
-- objects who could not make them in the copy's schema (CREATE on it, as on
-- the template's, whose ACL the copy gets; USAGE on the template's, which
-- LIKE reads).
CREATE FUNCTION insta_id._check_owners(plan jsonb)
RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    code_owner regrole := (plan->'extra'->>'code_owner')::regrole;
    refused text := (SELECT string_agg(r, ', ' ORDER BY r)
                     FROM (SELECT DISTINCT r FROM unnest(ARRAY[code_owner::text, plan->'extra'->>'schema_owner']) r) x
                     WHERE r IS NOT NULL
                       AND NOT pg_has_role(current_user, r::regrole,
                                           CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END));
    template name := plan->>'template';
BEGIN
    IF refused IS NOT NULL THEN
        RAISE EXCEPTION 'copies of template % would be owned by %, and role % may not give objects to them',
                        quote_ident(template), refused, current_user
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'A shard''s schema and objects are owned as the template''s are; its objects are made by their owner.',
                  HINT = format('Create the shards as a role that may SET ROLE to %s (a member of it), or give the template''s objects to a role the caller is a member of.', refused);
    END IF;
    -- (both: has_schema_privilege with a list is true for any one of them)
    IF NOT (has_schema_privilege(code_owner, (SELECT n.oid FROM pg_namespace n WHERE n.nspname = template), 'CREATE')
            AND has_schema_privilege(code_owner, (SELECT n.oid FROM pg_namespace n WHERE n.nspname = template), 'USAGE')) THEN
        RAISE EXCEPTION 'role %, which owns the objects of template %, may not create objects in it', code_owner, quote_ident(template)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'A shard''s objects are made by their owner, in a schema owned and granted as the template''s is.',
                  HINT = format('GRANT USAGE, CREATE ON SCHEMA %I TO %s (the copies get the template''s grants), or give the schema to that role.', template, code_owner);
    END IF;
END
$$;

-- Refuses, before making anything, to create `shards` shards of a template in
-- one transaction when their locks would not fit in the server's lock table
-- (PostgreSQL would fail with "out of shared memory" part-way, after minutes).
-- What one shard takes is measured: shard first_shard is made in a
-- subtransaction, its locks counted, and the subtransaction rolled back.
-- How many locks the server's shared lock table holds: max_locks_per_transaction
-- entries for each server process that may take locks.
CREATE FUNCTION insta_id._lock_table_capacity()
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT current_setting('max_locks_per_transaction')::bigint
       * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int
          + current_setting('max_worker_processes')::int + current_setting('max_wal_senders')::int
          + coalesce(current_setting('autovacuum_worker_slots', true), current_setting('autovacuum_max_workers'))::int + 1)
$$;

CREATE FUNCTION insta_id._check_lock_budget(plan jsonb, first_shard int, shards int, hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    held bigint;
    per_shard bigint;
    backends bigint;
    capacity bigint;
    lock_objects CONSTANT text := 'SELECT count(*) FROM (SELECT DISTINCT locktype, database, relation, page, tuple,
        virtualxid, transactionid, classid, objid, objsubid FROM pg_locks WHERE pid = pg_backend_pid()) l';
BEGIN
    -- A lock table of 64 locks per process holds thousands: small ranges always fit.
    IF shards <= 16 THEN
        RETURN;
    END IF;
    EXECUTE lock_objects INTO held;
    BEGIN
        PERFORM insta_id._create_copies(plan, ARRAY[first_shard]);
        EXECUTE lock_objects INTO per_shard;
        RAISE EXCEPTION USING ERRCODE = 'II001';
    EXCEPTION WHEN SQLSTATE 'II001' THEN
        per_shard := per_shard - held;
    END;
    capacity := insta_id._lock_table_capacity();
    backends := capacity / current_setting('max_locks_per_transaction')::int;
    IF held + per_shard * shards > capacity THEN
        RAISE EXCEPTION 'creating % shards in one transaction needs about % locks, more than the server''s lock table holds (about %)',
                        shards, held + per_shard * shards, capacity
            USING ERRCODE = 'program_limit_exceeded',
                  DETAIL = format('Each shard of template %I takes %s locks until the transaction ends; the lock table holds max_locks_per_transaction (%s) locks for each of %s server processes.',
                                  plan->>'template', per_shard, current_setting('max_locks_per_transaction'), backends),
                  HINT = hint;
    END IF;
END
$$;

CREATE FUNCTION insta_id.create_shards(first_shard int, last_shard int, template_schema text)
RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    plan jsonb;
BEGIN
    PERFORM insta_id._check_shard_range(first_shard, last_shard, template_schema);
    -- Every wait bounded: lock_timeout, or 2 s when it is 0 (none).
    IF current_setting('lock_timeout') = '0' THEN
        PERFORM set_config('lock_timeout', '2s', true);
    END IF;
    -- No migration changes the template between reading it and the commit.
    PERFORM insta_id._lock_template_shared();
    plan := insta_id._template_plan(template_schema);
    PERFORM insta_id._check_owners(plan);
    PERFORM insta_id._check_lock_budget(plan, first_shard, last_shard - first_shard + 1,
        format('CALL insta_id.create_shards_in_batches(%s, %s, %L) commits every few shards; or raise max_locks_per_transaction.',
               first_shard, last_shard, template_schema));
    PERFORM insta_id._create_copies(plan, ARRAY(SELECT generate_series(first_shard, last_shard)));
    RETURN last_shard - first_shard + 1;
END
$$;
COMMENT ON FUNCTION insta_id.create_shards(int, int, text) IS
'Creates shards first..last (schemas insta<N>), each with a copy of every table of the template schema';

-- One batch of create_shards_in_batches: shards lo..hi that are not
-- registered yet, copied from the template's plan, in the caller's
-- transaction. Returns how many it made.
CREATE FUNCTION insta_id._create_shard_batch(lo int, hi int, plan jsonb)
RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing int[] := ARRAY(SELECT s FROM generate_series(lo, hi) s
                           WHERE NOT EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = s)
                           ORDER BY s);
BEGIN
    PERFORM insta_id._create_copies(plan, missing);
    RETURN cardinality(missing);
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
CREATE PROCEDURE insta_id.create_shards_in_batches(first_shard int, last_shard int, template_schema text,
                                                   shards_per_commit int DEFAULT 50)
LANGUAGE plpgsql
AS $$
DECLARE
    -- (pg_catalog's types: they are resolved under the caller's search_path)
    plan pg_catalog.jsonb;
    first_missing pg_catalog.int4;
    lo pg_catalog.int4;
    hi pg_catalog.int4;
    made pg_catalog.int4;
    created pg_catalog.int4 := 0;
    started pg_catalog.timestamptz;
    reported pg_catalog.timestamptz;
    waits pg_catalog.text;
BEGIN
    -- Each transaction READ COMMITTED, whatever default_transaction_isolation
    -- says: a copy runs the template owner's code only then (ddl.rs). (The
    -- CALL's own transaction has its snapshot: it ends first.)
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        COMMIT;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    END IF;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    PERFORM insta_id._check_shard_range(first_shard, last_shard, template_schema);
    -- Every wait bounded: lock_timeout, or 2 s when it is 0 (none), in each
    -- of its transactions.
    waits := CASE WHEN current_setting('lock_timeout') = '0' THEN '2s' ELSE current_setting('lock_timeout') END;
    PERFORM set_config('lock_timeout', waits, true);
    IF shards_per_commit IS NULL OR shards_per_commit < 1 THEN
        RAISE EXCEPTION 'shards_per_commit must be at least 1' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The template is read, and one batch's locks measured, once for the whole run.
    plan := insta_id._template_plan(template_schema);
    PERFORM insta_id._check_owners(plan);
    SELECT min(s) INTO first_missing FROM generate_series(first_shard, last_shard) s
    WHERE NOT EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = s);
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
        -- So when the one owner of its code is no longer the role the
        -- plan's copies run as (a function it uses given to another role,
        -- whose body may then be another's): decided again in each batch's
        -- transaction, as a migration decides in each schema's, never kept
        -- from one to the next (42501 when several own it now).
        PERFORM insta_id._lock_template_shared();
        IF insta_id._migrations_of(template_schema) <> plan->'migrations'
           OR insta_id._code_owner(template_schema)::text IS DISTINCT FROM plan->'extra'->>'code_owner' THEN
            PERFORM insta_id._check_template(template_schema);
            plan := insta_id._template_plan(template_schema);
            PERFORM insta_id._check_owners(plan);
        END IF;
        made := insta_id._create_shard_batch(lo, hi, plan);
        created := created + made;
        COMMIT;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        PERFORM pg_catalog.set_config('lock_timeout', waits, true);
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
COMMENT ON PROCEDURE insta_id.create_shards_in_batches(int, int, text, int) IS
'Creates shards first..last like create_shards, committing every shards_per_commit shards; resumable';
