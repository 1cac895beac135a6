-- insta_id 0.10.0 -> 0.11.0: one gate for tenants' code (issue 54). Every
-- statement a helper runs on a shard's relation goes through _gate or
-- _gate_query (src/sql/gate.sql): as the one owner of the code PostgreSQL
-- may evaluate for it, or refused; insta_id's tables are written only
-- through _admin_write, which checks each write; drop_shard and
-- add_id_column take a lock_timeout. Every function below is the one in
-- src/sql/; t/007_upgrade checks that an updated database matches a fresh
-- 0.11.0 install.
\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.11.0'" to load this file. \quit

-- The gate's lock on relations, in the order given (src/locks.rs,
-- src/sql/gate.sql).
CREATE FUNCTION insta_id._lock_relations(rels oid[])
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_lock_relations';

-- The advisory locks this session holds, one text a lock and mode
-- (src/locks.rs): what the gate's _session_state reads, without pg_locks'
-- text for every lock of the server. Restricted: a parallel worker's are
-- not the session's.
CREATE FUNCTION insta_id._advisory_holds()
RETURNS text[]
LANGUAGE c VOLATILE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_advisory_holds';


-- (0.9.0's returned one owner: a row now, for its callers to inline)
-- The owner of an object whose code PostgreSQL may run: one row, or none
-- for a kind that has no owner (text search parsers and templates are a
-- superuser's C code; a trigger or constraint is its table's). A body of
-- SQL's own, every name bound when it is made (no search_path to set), so
-- that a caller's plan inlines it: one index probe an object, where a
-- call would cost tens of microseconds (thousands of objects in a schema).
DROP FUNCTION insta_id._object_owner(oid, oid);
CREATE FUNCTION insta_id._object_owner(classid oid, objid oid)
RETURNS TABLE (owner oid)
-- (not STRICT: a strict function is not inlined; a NULL matches nothing)
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT x.relowner FROM pg_catalog.pg_class x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.proowner FROM pg_catalog.pg_proc x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.typowner FROM pg_catalog.pg_type x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.collowner FROM pg_catalog.pg_collation x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_collation'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.conowner FROM pg_catalog.pg_conversion x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_conversion'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.oprowner FROM pg_catalog.pg_operator x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_operator'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.opcowner FROM pg_catalog.pg_opclass x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_opclass'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.opfowner FROM pg_catalog.pg_opfamily x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_opfamily'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.cfgowner FROM pg_catalog.pg_ts_config x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_ts_config'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.dictowner FROM pg_catalog.pg_ts_dict x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_ts_dict'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid
    UNION ALL
    SELECT x.stxowner FROM pg_catalog.pg_statistic_ext x
    WHERE classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass AND x.oid OPERATOR(pg_catalog.=) objid;
END;

-- The relations a statement on rels (and, with nsp, on any relation of
-- schema nsp) may reach: those, their partitions and inheritance children
-- and parents, the tables their foreign keys link in either direction
-- (with keys: a statement that writes, whose rows PostgreSQL checks and
-- cascades through them), and the tables their rules' actions and
-- policies' subqueries name, until nothing new is found; in OID order.
-- A read (keys false) runs no foreign key's code: followed, a table many
-- shards reference would bring every shard into each read's reach, its
-- locks and its owners. The walk: src/gate_walk.rs, over index scans of
-- the catalogs under the catalog snapshot (what committed before the
-- call), as DDL reads them.
CREATE FUNCTION insta_id._gate_relations(nsp oid, rels oid[], keys boolean)
RETURNS oid[]
-- (not STRICT: nsp NULL walks rels alone)
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_gate_relations';

-- The objects whose owners decide who runs a statement in schema nsp on
-- relations reach (_gate_relations' answer): the relations, every object
-- of the schema (first on search_path while the statement runs: an
-- unqualified name may resolve to any of them) and the relations'
-- statistics objects, whoever owns them (used false); and the code their
-- parts (indexes, constraints, defaults and generated columns, triggers,
-- policies, rules, statistics) use, and the code that code uses,
-- functions, operators and their commutators and negators, operator
-- classes' families, types, domains' CHECKs, ranges' functions, composite
-- types' fields, built-in objects skipped (used true: a superuser's does
-- not count). The walk and what it follows: src/gate_walk.rs.
CREATE FUNCTION insta_id._gate_objects(nsp oid, reach oid[])
RETURNS TABLE (classid oid, objid oid, used boolean)
LANGUAGE c STABLE STRICT PARALLEL SAFE ROWS 100
AS 'MODULE_PATHNAME', 'insta_id_gate_objects';

-- The owners that decide who runs a statement in schema nsp on relations
-- reach: of every object _gate_objects finds, code used whose owner is a
-- superuser not counted; each once, in OID order. hold: each owner read
-- once its object is held (src/locks.rs, held_owner: a run: no owner
-- changes before the statements); else as the catalogs have it (a check).
CREATE FUNCTION insta_id._gate_owners(nsp oid, reach oid[], hold boolean)
RETURNS oid[]
-- (VOLATILE: with hold, it locks what it read)
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_gate_owners';


-- Who runs a statement on rels (and on schema nsp's relations and objects,
-- when nsp is given, as a migration does): the one owner of the relations
-- _gate_relations finds, of their parts, and of the code outside them that
-- those parts use (see this file's header). Several owners: 42501, naming
-- them. None (nothing but superusers' code, no relation): the schema's
-- owner. The decision only: _gate runs the statements. walked: the
-- relations _gate_lock found and locked, and the objects found are held
-- to the end of the transaction (NULL: walked here, nothing locked, for a
-- check that runs nothing).
CREATE FUNCTION insta_id._gate_owner(nsp name, rels regclass[], walked oid[] DEFAULT NULL)
RETURNS regrole
-- (VOLATILE: a run's decision locks what it read)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- (no JIT for a query over a few rows, and one plan kept for every call)
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    nsp_oid oid;
    schema_owner regrole;
    reach oid[];
    owners regrole[];
    classids oid[];
    objids oid[];
    object_owners regrole[];
    used_by boolean[];
    listing text;
BEGIN
    SELECT n.oid, n.nspowner::regrole INTO nsp_oid, schema_owner FROM pg_namespace n WHERE n.nspname = nsp;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schema % does not exist', quote_ident(nsp) USING ERRCODE = 'invalid_schema_name';
    END IF;
    reach := coalesce(walked, insta_id._gate_relations(CASE WHEN rels IS NULL THEN nsp_oid END, rels::oid[], true));
    -- For a run (walked), each owner is read once its object is held
    -- (locked, as ALTER ... OWNER TO locks it), a superuser's too, so that
    -- no owner changes between this decision and the statements (the
    -- code's new owner could then replace its body, to run as the role
    -- decided); for a check, as the catalogs read.
    owners := insta_id._gate_owners(nsp_oid, reach, walked IS NOT NULL)::regrole[];
    IF coalesce(cardinality(owners), 0) = 0 THEN
        RETURN schema_owner;
    ELSIF cardinality(owners) = 1 THEN
        RETURN owners[1];
    END IF;
    -- Refused: each owner's objects (held already, for a run).
    SELECT array_agg(x.classid), array_agg(x.objid), array_agg(w.owner), array_agg(x.used)
    INTO classids, objids, object_owners, used_by
    FROM insta_id._gate_objects(nsp_oid, reach) x, insta_id._object_owner(x.classid, x.objid) w
    -- (what the code used is superusers' does not count)
    WHERE w.owner IS NOT NULL AND NOT (x.used AND (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = w.owner));
    -- (the first five of each owner's, in name order, and how many more)
    SELECT string_agg(format('%s: %s%s', w.owner, array_to_string(w.objects[1:5], ', '),
                             CASE WHEN cardinality(w.objects) > 5 THEN format(' and %s more', cardinality(w.objects) - 5) END),
                      '; ' ORDER BY w.owner::text)
    INTO listing
    FROM (SELECT x.owner, array_agg(DISTINCT x.what ORDER BY x.what) AS objects
          FROM (SELECT y.owner, pg_describe_object(y.classid, y.objid, 0)
                                || CASE WHEN y.used THEN ' (used by its objects)' ELSE '' END AS what
                FROM unnest(classids, objids, object_owners, used_by) y(classid, objid, owner, used)) x
          GROUP BY x.owner) w;
    RAISE EXCEPTION '%', CASE WHEN rels IS NULL
                              THEN format('the objects of schema %s have %s owners', quote_ident(nsp), cardinality(owners))
                              ELSE format('the code a statement on %s may run has %s owners', array_to_string(rels, ', '), cardinality(owners)) END
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = format('Owned by %s.', listing),
              HINT = CASE WHEN rels IS NULL
                          THEN format('insta_id runs a schema''s statements as the one role that owns its objects, so that no owner''s code runs with another''s rights. Give them to one role (ALTER ... OWNER TO, or REASSIGN OWNED BY ... TO ...); schema %s itself may stay another role''s.', quote_ident(nsp))
                          ELSE format('insta_id runs a statement on a table as the one role that owns it and the code PostgreSQL may run for it (triggers, CHECKs, defaults, indexes, policies, and those of its partitions and, for a write, of the tables its foreign keys link) and the objects of schema %s, first on search_path while it runs, so that no owner''s code runs with another''s rights. Give them to one role (ALTER ... OWNER TO, or REASSIGN OWNED BY ... TO ...).', quote_ident(nsp)) END;
END
$$;

-- The one owner of the objects of schema nsp (a template's: its copies are
-- made by it; a migration's target).
CREATE OR REPLACE FUNCTION insta_id._code_owner(nsp name)
RETURNS regrole
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT insta_id._gate_owner(nsp, NULL)
$$;


-- The processes holding a lock on an object (a relation's, when classid is
-- pg_class; else an object lock, as a schema's or a function's), for the
-- DETAIL of a wait that timed out: pid, role, application, mode and since
-- when.
CREATE FUNCTION insta_id._lock_holders(classid oid, objid oid)
RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(format('process %s (role %s, application %s) holds %s on it since %s',
                             l.pid, coalesce(quote_ident(a.usename), '?'), coalesce(quote_literal(a.application_name), '?'),
                             l.mode, coalesce(a.xact_start::text, 'its start')), '; ' ORDER BY l.pid, l.mode)
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    -- (the arguments named by the function's name: pg_locks has columns
    -- classid and objid too)
    WHERE CASE WHEN _lock_holders.classid = 'pg_class'::regclass
               THEN l.locktype = 'relation' AND l.relation = _lock_holders.objid
               ELSE l.locktype = 'object' AND l.classid = _lock_holders.classid
                    AND l.objid = _lock_holders.objid AND l.objsubid = 0 END
      AND l.granted AND l.pid <> pg_backend_pid()
      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
$$;


-- The same for every relation of schema nsp (a migration's statements may
-- lock any of them).
CREATE FUNCTION insta_id._lock_holders_in(nsp oid)
RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(format('%s: %s', c.oid::regclass, h.holders), '; ' ORDER BY c.relname)
    FROM pg_class c, LATERAL (SELECT insta_id._lock_holders('pg_class'::regclass, c.oid) AS holders) h
    WHERE c.relnamespace = nsp AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND h.holders IS NOT NULL
$$;


-- Locks the schema put first on search_path (its own lock, which every
-- CREATE in it holds shared: no object arrives in it between the decision
-- and the statements, where an unqualified name could resolve to it), and
-- the relations a statement on rels (NULL: on any relation of schema nsp)
-- may reach (see the header; keys: whether it writes, _gate_relations),
-- each wait bounded by lock_timeout: 55P03 names the schema or relation
-- and who holds it. Returns those relations: walked
-- (_gate_relations) after each round of locks, until a walk finds none
-- unlocked, so that the last walk read a reach all locked before it began
-- (in READ COMMITTED, where each statement reads what committed before
-- it). The first round locks, in the order of their OIDs, what a walk
-- before any lock finds (a parent before its partitions, as DDL takes
-- them), or for a migration its schema's own relations, which one index
-- read finds: a schema that reaches nothing outside it is walked once.
-- Ten rounds without an end (relations attached faster than they are
-- locked): 55P03, which a migration retries. The helpers set lock_timeout
-- (their argument, 2 s by default); a caller whose lock_timeout is 0
-- (none) waits 2 s here, never without bound.
CREATE FUNCTION insta_id._gate_lock(nsp name, rels oid[], keys boolean)
RETURNS oid[]
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- (one plan whatever rels is: planned afresh, the first round's read
-- cost more than its locks)
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    nsp_oid oid := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = nsp);
    caller_timeout text := current_setting('lock_timeout');
    locked oid[] := '{}';
    reach oid[];
BEGIN
    IF caller_timeout = '0' THEN
        PERFORM set_config('lock_timeout', '2s', true);
    END IF;
    -- (a transaction creating objects in it, another insta_id helper
    -- acting on it, or ALTER DEFAULT PRIVILEGES IN SCHEMA, which any role
    -- may run, make it wait: 55P03 naming the schema and who holds it)
    PERFORM insta_id._lock_schema(nsp_oid);
    -- (the schema's relations by their dependency on it, as _gate_relations
    -- reads them, of the kinds it returns)
    reach := CASE WHEN rels IS NULL THEN ARRAY(
                 SELECT c.oid FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
                 WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = nsp_oid AND d.refobjsubid = 0
                   AND d.classid = 'pg_class'::regclass AND d.deptype = 'n' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
                 ORDER BY c.oid)
             ELSE insta_id._gate_relations(NULL, rels, keys) END;
    FOR turn IN 1..10 LOOP
        -- (one call a round, in reach's order; what an earlier round locked
        -- is taken again at once. A wait that times out: 55P03 naming the
        -- relation and who holds it)
        PERFORM insta_id._lock_relations(reach);
        locked := locked || reach;
        -- (a statement of its own: a snapshot taken after the locks)
        reach := insta_id._gate_relations(CASE WHEN rels IS NULL THEN nsp_oid END, rels, keys);
        IF reach <@ locked THEN
            PERFORM set_config('lock_timeout', caller_timeout, true);
            RETURN reach;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'the relations a statement in schema % may reach kept changing while they were locked', quote_ident(nsp)
        USING ERRCODE = 'lock_not_available',
              DETAIL = format('Not locked after ten rounds: %s.', (SELECT string_agg(r::regclass::text, ', ') FROM unnest(reach) r WHERE NOT r = ANY (locked))),
              HINT = 'Partitions or foreign keys were being added to them meanwhile; try again once that ends. Nothing was changed.';
END
$$;


-- What a session holds that the owner's code could leave behind or take
-- away: its advisory locks (_advisory_holds, as pg_locks shows them: database, classid, objid, objsubid
-- (1 and 2: SQL's forms; 3: insta_id's own), shared), its cursors and its
-- prepared statements, one text each. PL/pgSQL, whose plan a session
-- keeps: before PostgreSQL 18 a SQL function's was made again in each
-- transaction, twice a shard for a migration (a fifth of the gate's time
-- on 15).
CREATE FUNCTION insta_id._session_state()
RETURNS text[]
LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ARRAY(SELECT h FROM unnest(insta_id._advisory_holds()) h
                 UNION ALL SELECT 'cursor ' || c.name FROM pg_cursors c
                 UNION ALL SELECT 'prepared ' || p.name FROM pg_prepared_statements p
                 ORDER BY 1);
END
$$;


-- Puts back what the owner's code left in the session since state: every
-- session-level hold of an advisory lock it took (one pg_advisory_unlock
-- a hold, until _session_state no longer lists it: no release is asked of a lock
-- not held), its prepared statements; its cursors and transaction-level
-- locks go with the subtransaction rolled back before. What it released
-- of the caller's cannot be given back: 42501.
CREATE FUNCTION insta_id._restore_session(state text[], nsp name)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    item text;
    now_held text[];
    f text[];
    key bigint;
    a int;
    b int;
BEGIN
    FOREACH item IN ARRAY insta_id._session_state() LOOP
        CONTINUE WHEN item = ANY (state);
        f := string_to_array(item, ' ');
        IF f[1] = 'prepared' THEN
            EXECUTE format('DEALLOCATE %I', substr(item, 10));
        ELSIF f[1] = 'lock' AND f[5] IN ('1', '2') THEN
            key := (f[3]::bigint << 32) | f[4]::bigint;
            a := (f[3]::bigint - CASE WHEN f[3]::bigint >= 2147483648 THEN 4294967296 ELSE 0 END)::int;
            b := (f[4]::bigint - CASE WHEN f[4]::bigint >= 2147483648 THEN 4294967296 ELSE 0 END)::int;
            FOR i IN 1..100000 LOOP
                EXIT WHEN NOT item = ANY (insta_id._session_state());
                PERFORM CASE WHEN f[5] = '1' AND f[6] IN ('t', 'true') THEN pg_advisory_unlock_shared(key)
                             WHEN f[5] = '1' THEN pg_advisory_unlock(key)
                             WHEN f[6] IN ('t', 'true') THEN pg_advisory_unlock_shared(a, b)
                             ELSE pg_advisory_unlock(a, b) END;
            END LOOP;
        END IF;
    END LOOP;
    now_held := insta_id._session_state();
    SELECT min(x) INTO item FROM unnest(state) x WHERE x LIKE 'lock %' AND NOT x = ANY (now_held);
    IF item IS NOT NULL THEN
        RAISE EXCEPTION 'code run for schema %''s owner released the caller''s advisory lock (%)', quote_ident(nsp), substr(item, 6)
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Code of a table''s owner may not release what the caller''s session holds (insta_id''s move and migration locks among them); it cannot be taken back for it.',
                  HINT = 'Take or release no advisory lock in triggers, defaults, CHECKs or index expressions reached by insta_id''s helpers; then start again what held the lock.';
    END IF;
END
$$;


-- Runs statements (or one query, whose first value it returns) as owner
-- in schema nsp (_run_in_schema, src/ddl.rs), in a subtransaction, and
-- refuses (42501) what they would leave in the caller's session: an
-- advisory lock taken (PostgreSQL shows a session's hold and a
-- transaction's alike, so neither is allowed), a cursor left open, a
-- prepared statement; all rolled back, released or deallocated. A lock of
-- the caller's they released: 42501 too. A session holding an advisory
-- lock of SQL's own is refused first (55000): a hold taken again inside
-- would show nothing new. An error of the statements goes on as it was
-- raised, whole (after the same putting back).
CREATE FUNCTION insta_id._gate_run(nsp name, owner regrole, statements text[], query text)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state text[] := insta_id._session_state();
    after text[];
    value text;
    left_behind text;
BEGIN
    SELECT min(x) INTO left_behind FROM unnest(state) x WHERE x ~ '^lock \S+ \S+ \S+ [12] ';
    IF left_behind IS NOT NULL THEN
        RAISE EXCEPTION 'this session holds an advisory lock (%): insta_id runs a table owner''s code only in a session that holds none', substr(left_behind, 6)
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The owner''s code taking the same lock again could not be told from the caller''s hold.',
                  HINT = 'Release it (pg_advisory_unlock, or end the transaction holding it), then call the helper again.';
    END IF;
    BEGIN
        IF query IS NULL THEN
            PERFORM insta_id._run_in_schema(nsp, owner, statements);
        ELSE
            value := insta_id._query_in_schema(nsp, owner, query);
        END IF;
        after := insta_id._session_state();
        SELECT string_agg(x, ', ') INTO left_behind FROM unnest(after) x
        WHERE NOT x = ANY (state) AND x !~ '^lock \S+ \S+ \S+ 3 ';
        IF left_behind IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'II002';  -- (rolls the block back)
        END IF;
    EXCEPTION WHEN OTHERS THEN
        PERFORM insta_id._restore_session(state, nsp);
        IF SQLSTATE = 'II002' THEN
            RAISE EXCEPTION 'code run for schema %''s owner left in the caller''s session: %', quote_ident(nsp), left_behind
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'An advisory lock, a cursor or a prepared statement would outlive it, held or run later as the caller. Its changes were rolled back and those released.',
                      HINT = 'Take no advisory lock, and leave no cursor or prepared statement, in triggers, defaults, CHECKs or index expressions reached by insta_id''s helpers.';
        END IF;
        RAISE;
    END;
    -- (the same state, sorted alike: nothing to put back; a read of the locks
    -- a call saved, three a shard in a migration)
    IF after IS DISTINCT FROM state THEN
        PERFORM insta_id._restore_session(state, nsp);
    END IF;
    RETURN value;
END
$$;


-- The gate: statements on relations rels (NULL: on anything in schema nsp,
-- as a migration), run as their code's one owner (see the header).
CREATE FUNCTION insta_id._gate(nsp name, rels regclass[], statements text[])
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    walked oid[];
BEGIN
    walked := insta_id._gate_lock(nsp, rels::oid[], true);
    -- (a statement after the locks': the owner decided from what they hold)
    PERFORM insta_id._gate_run(nsp, insta_id._gate_owner(nsp, rels, walked), statements, NULL);
END
$$;


-- The gate for one value read from relations rels (the first column of the
-- query's first row, as text): planning a query folds the owner's code.
CREATE FUNCTION insta_id._gate_query(nsp name, rels regclass[], query text)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    walked oid[];
BEGIN
    -- (a read: no foreign key's code runs)
    walked := insta_id._gate_lock(nsp, rels::oid[], false);
    RETURN insta_id._gate_run(nsp, insta_id._gate_owner(nsp, rels, walked), NULL, query);
END
$$;


-- The one writer of insta_id's tables (src/registry.rs): a delegated shard
-- administrator holds no INSERT, UPDATE or DELETE on them, so every helper
-- writes through _admin_write, which checks what the role calling it may
-- write (_admin_write_check, adopt_shard's rules) and then writes it
-- (_admin_write_apply) as the tables' owner. Its operations, and args:
--   add           {shard, schema}       register a schema as a shard
--   set_template  {shard, template}     the template a shard was copied from
--   remove        {shard}               unregister a shard, with its history
--   migration     {name, template, statements}   record a migration
--   applied       {schema, migrations}  a schema has these migrations
--   lock          {shard, exclusive}    a shard's row locked (drop_shard: FOR
--                                       UPDATE; migrate: FOR SHARE), which
--                                       needs UPDATE on the table: by a role
--                                       that may act as the owner of its
--                                       schema or objects (as migrate runs)
CREATE FUNCTION insta_id._admin_write(op text, args jsonb)
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_admin_write';


-- Whether role caller may make write op: each schema it names exists, is
-- no system schema or template, and is one the caller may act as the owner
-- of (for a migration's history, the owner of its objects will do: the
-- gate runs its statements as that role). Raises, or returns.
CREATE FUNCTION insta_id._admin_write_check(caller regrole, op text, args jsonb)
RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
-- (one plan for each statement whatever op is: a plan made for the op
-- given is cheaper than the generic one, so the plan cache made a new one
-- at every call, half a write's time)
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    nsp name;
    shard int := (args->>'shard')::int;
    may boolean;
BEGIN
    nsp := CASE op WHEN 'add' THEN args->>'schema'
                   WHEN 'applied' THEN args->>'schema'
                   WHEN 'migration' THEN args->>'template'
                   WHEN 'set_template' THEN (SELECT r.schema_name FROM insta_id_admin.shard_registry r WHERE r.shard_id = shard)
                   WHEN 'remove' THEN (SELECT r.schema_name FROM insta_id_admin.shard_registry r WHERE r.shard_id = shard)
                   WHEN 'lock' THEN (SELECT r.schema_name FROM insta_id_admin.shard_registry r WHERE r.shard_id = shard) END;
    IF op NOT IN ('add', 'set_template', 'remove', 'migration', 'applied', 'lock') THEN
        RAISE EXCEPTION 'no such write of insta_id''s tables: %', op USING ERRCODE = 'invalid_parameter_value';
    ELSIF op = 'lock' AND nsp IS NULL THEN
        RETURN;  -- (a row gone meanwhile is not locked: the caller reads it again)
    ELSIF op IN ('set_template', 'remove') AND nsp IS NULL THEN
        RAISE EXCEPTION 'shard % does not exist', shard USING ERRCODE = 'undefined_object';
    END IF;
    IF op = 'add' THEN
        PERFORM insta_id._check_shard_id(shard);
        -- A shard being moved here or away: registering it would open its
        -- copy's fence (insta_id._move_fence) and its routing to that
        -- schema. The mover (a superuser) registers it at its adoption.
        IF EXISTS (SELECT FROM insta_id_admin.moves m WHERE m.shard_id = shard)
           AND NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = caller) THEN
            RAISE EXCEPTION 'shard % is being moved to or from this server', shard
                USING ERRCODE = 'object_in_use',
                      DETAIL = 'Only the move registers it (insta-id move), as a superuser.';
        END IF;
        IF nsp IN ('public', 'insta_id', 'insta_id_admin', 'insta_id_mark', 'information_schema') OR nsp LIKE 'pg\_%'
           OR EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.template_schema = nsp)
           OR EXISTS (SELECT FROM insta_id_admin.migrations m WHERE m.template_schema = nsp) THEN
            RAISE EXCEPTION 'schema % cannot be a shard', quote_ident(nsp)
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'It is public, one of insta_id''s own schemas, a system schema or the template of shards.';
        END IF;
    END IF;
    IF op = 'set_template' THEN
        -- A template is what the caller copied from: one it may act as the
        -- owner of (of its objects: the copy is made as that role), never
        -- a shard or one of the system's or insta_id's schemas (a schema
        -- recorded as a template can no longer be adopted as a shard).
        SELECT pg_has_role(caller, n.nspowner, 'USAGE') INTO may FROM pg_namespace n WHERE n.nspname = args->>'template';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'schema % does not exist', quote_ident(args->>'template') USING ERRCODE = 'invalid_schema_name';
        END IF;
        IF args->>'template' IN ('public', 'insta_id', 'insta_id_admin', 'insta_id_mark', 'information_schema')
           OR args->>'template' LIKE 'pg\_%'
           OR EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.schema_name = args->>'template') THEN
            RAISE EXCEPTION 'schema % cannot be a template', quote_ident(args->>'template')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT may THEN
            BEGIN
                may := pg_has_role(caller, insta_id._code_owner(args->>'template'), 'USAGE');
            EXCEPTION WHEN insufficient_privilege THEN
                may := false;
            END;
        END IF;
        IF NOT may THEN
            RAISE EXCEPTION 'role % may not act as the owner of template %', caller, quote_ident(args->>'template')
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
    IF op IN ('applied', 'migration') AND EXISTS (
           SELECT FROM jsonb_array_elements_text(coalesce(args->'migrations', '[]')) m
           WHERE NOT EXISTS (SELECT FROM insta_id_admin.migrations x WHERE x.name = m)) THEN
        RAISE EXCEPTION 'no such migration among %', args->'migrations' USING ERRCODE = 'undefined_object';
    END IF;
    -- A shard whose schema is gone (drop_shard dropped it first) may be
    -- unregistered by any caller of drop_shard: nothing is left to reach.
    IF op IN ('remove', 'lock') AND NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = nsp) THEN
        RETURN;
    END IF;
    SELECT pg_has_role(caller, n.nspowner, 'USAGE') INTO may FROM pg_namespace n WHERE n.nspname = nsp;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schema % does not exist', quote_ident(nsp) USING ERRCODE = 'invalid_schema_name';
    END IF;
    IF NOT may AND op IN ('applied', 'migration', 'lock') THEN
        BEGIN
            may := pg_has_role(caller, insta_id._code_owner(nsp), 'USAGE');
        EXCEPTION WHEN insufficient_privilege THEN
            may := false;  -- (objects of several owners)
        END;
    END IF;
    IF NOT may THEN
        RAISE EXCEPTION '%', CASE op WHEN 'lock' THEN format('role %s may not act as the owner of schema %s, whose shard it would lock', caller, quote_ident(nsp))
                                 ELSE format('role %s may not act as the owner of schema %s, which this would record in insta_id''s tables', caller, quote_ident(nsp)) END
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Operation %s: %s.', op, args),
                  HINT = 'Only a role that may act as a schema''s owner may register, re-point or unregister it, or record its migrations.';
    END IF;
END
$$;


-- The write itself, run by _admin_write as the tables' owner once checked.
-- Nobody's but the extension owner's.
CREATE FUNCTION insta_id._admin_write_apply(op text, args jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
BEGIN
    CASE op
    WHEN 'lock' THEN
        IF (args->>'exclusive')::boolean THEN
            PERFORM FROM insta_id_admin.shard_registry r WHERE r.shard_id = (args->>'shard')::int FOR UPDATE;
        ELSE
            PERFORM FROM insta_id_admin.shard_registry r WHERE r.shard_id = (args->>'shard')::int FOR SHARE;
        END IF;
    WHEN 'add' THEN
        INSERT INTO insta_id_admin.shard_registry (shard_id, schema_name) VALUES ((args->>'shard')::int, args->>'schema');
    WHEN 'set_template' THEN
        UPDATE insta_id_admin.shard_registry r SET template_schema = args->>'template' WHERE r.shard_id = (args->>'shard')::int;
    WHEN 'remove' THEN
        DELETE FROM insta_id_admin.shard_registry r WHERE r.shard_id = (args->>'shard')::int RETURNING r.schema_name INTO nsp;
        IF EXISTS (SELECT FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp) THEN
            DELETE FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp;
        END IF;
    WHEN 'migration' THEN
        INSERT INTO insta_id_admin.migrations (name, template_schema, statements)
        VALUES (args->>'name', args->>'template', args->>'statements');
    WHEN 'applied' THEN
        INSERT INTO insta_id_admin.applied_migrations (schema_name, migration)
        SELECT args->>'schema', m FROM jsonb_array_elements_text(args->'migrations') m;
    END CASE;
END
$$;


CREATE OR REPLACE FUNCTION insta_id.create_shard(shard_id int, schema_name text DEFAULT NULL)
RETURNS name
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
BEGIN
    nsp := insta_id._new_shard_schema(create_shard.shard_id, create_shard.schema_name);
    PERFORM insta_id._admin_write('add', jsonb_build_object('shard', create_shard.shard_id, 'schema', nsp));
    RETURN nsp;
END
$$;
COMMENT ON FUNCTION insta_id.create_shard(int, text) IS
'Creates the schema of a logical shard (default name insta<N>) and registers it';

-- create_shard's schema, not yet registered: the checks, then CREATE SCHEMA.
-- (_create_copies makes every schema of its shards before registering
-- them: see there.)
CREATE FUNCTION insta_id._new_shard_schema(shard_id int, schema_name text)
RETURNS name
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    taken name;
BEGIN
    IF _new_shard_schema.shard_id IS NULL THEN
        RAISE EXCEPTION 'shard id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_id(_new_shard_schema.shard_id);
    PERFORM insta_id._check_name(_new_shard_schema.schema_name);
    nsp := coalesce(_new_shard_schema.schema_name, 'insta' || _new_shard_schema.shard_id);
    SELECT r.schema_name INTO taken FROM insta_id_admin.shard_registry r WHERE r.shard_id = _new_shard_schema.shard_id;
    IF FOUND THEN
        RAISE EXCEPTION 'shard % already exists', _new_shard_schema.shard_id
            USING ERRCODE = 'unique_violation', DETAIL = format('Its schema is %I.', taken);
    END IF;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.schema_name = nsp)
       OR EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = nsp) THEN
        RAISE EXCEPTION 'schema % already exists', quote_ident(nsp)
            USING ERRCODE = 'duplicate_schema',
                  HINT = 'To register a schema restored from another server, use insta_id.adopt_shard.';
    END IF;
    EXECUTE format('CREATE SCHEMA %I', nsp);
    RETURN nsp;
END
$$;
REVOKE ALL ON FUNCTION insta_id._new_shard_schema(int, text) FROM PUBLIC;


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
    PERFORM insta_id._admin_write('add', jsonb_build_object('shard', adopt_shard.shard_id, 'schema', adopt_shard.schema_name));
END
$$;
COMMENT ON FUNCTION insta_id.adopt_shard(text, int) IS
'Registers an existing schema (for example restored from another server) as a logical shard';


-- What of another schema (or of none) DROP SCHEMA ... CASCADE of shard
-- schema `nsp` would drop with it, described, NULL when nothing: drop_shard
-- refuses those (2BP01), and the fleet tool asks before a move or a
-- rollback whose end drops a copy (a refusal after the cutover committed
-- would leave the copy behind).
CREATE FUNCTION insta_id._shard_dependents_outside(nsp oid)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
-- What DROP SCHEMA ... CASCADE would drop, found as PostgreSQL finds
-- it: every object that depends on the schema, and on those, by any
-- kind of dependency (normal, automatic as a partition's or a
-- column's, internal), a column taking only what depends on that
-- column; and the whole that an internal part or an extension's
-- member belongs to (a view for its rule). Any of it outside the
-- shard is refused: views, foreign keys, partitions, columns of its
-- types or collations, functions taking them, operators on its
-- functions, and schemaless objects (casts, transforms, extensions).
WITH RECURSIVE doomed(classid, objid, objsubid) AS (
    SELECT d.classid, d.objid, d.objsubid FROM pg_depend d
    WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = _shard_dependents_outside.nsp AND d.refobjsubid = 0
    UNION
    SELECT y.classid, y.objid, y.objsubid FROM doomed x, LATERAL (
        SELECT d.classid, d.objid, d.objsubid FROM pg_depend d
        WHERE d.refclassid = x.classid AND d.refobjid = x.objid AND (x.objsubid = 0 OR d.refobjsubid = x.objsubid)
        UNION ALL
        SELECT d.refclassid, d.refobjid, 0 FROM pg_depend d
        WHERE d.classid = x.classid AND d.objid = x.objid AND d.deptype IN ('i', 'e')) y)
SELECT string_agg(DISTINCT pg_describe_object(x.classid, x.objid, x.objsubid), ', '
                  ORDER BY pg_describe_object(x.classid, x.objid, x.objsubid))
FROM doomed x
-- (a part listed with its whole: a row type, an array type, a TOAST table)
WHERE NOT EXISTS (SELECT FROM pg_depend p WHERE p.classid = x.classid AND p.objid = x.objid AND p.deptype = 'i')
  AND coalesce(CASE x.classid
          -- (a TOAST table and its index: their table's schema, the table
          -- found by the TOAST table's internal dependency on it: pg_class
          -- has no index on reltoastrelid, 21 ms a read at 3000 shards)
          WHEN 'pg_class'::regclass THEN (SELECT CASE WHEN c.relnamespace = 'pg_toast'::regnamespace
                                                      THEN (SELECT t.relnamespace FROM pg_depend d JOIN pg_class t ON t.oid = d.refobjid
                                                            WHERE d.classid = 'pg_class'::regclass
                                                              AND d.objid = coalesce((SELECT i.indrelid FROM pg_index i
                                                                                      WHERE i.indexrelid = c.oid), c.oid)
                                                              AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'i')
                                                      ELSE c.relnamespace END
                                          FROM pg_class c WHERE c.oid = x.objid)
          WHEN 'pg_type'::regclass THEN (SELECT y.typnamespace FROM pg_type y WHERE y.oid = x.objid)
          WHEN 'pg_proc'::regclass THEN (SELECT p.pronamespace FROM pg_proc p WHERE p.oid = x.objid)
          WHEN 'pg_rewrite'::regclass THEN (SELECT c.relnamespace FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
                                            WHERE r.oid = x.objid)
          WHEN 'pg_attrdef'::regclass THEN (SELECT c.relnamespace FROM pg_attrdef a JOIN pg_class c ON c.oid = a.adrelid
                                            WHERE a.oid = x.objid)
          WHEN 'pg_constraint'::regclass THEN (SELECT coalesce(c.relnamespace, k.connamespace) FROM pg_constraint k
                                               LEFT JOIN pg_class c ON c.oid = k.conrelid WHERE k.oid = x.objid)
          WHEN 'pg_trigger'::regclass THEN (SELECT c.relnamespace FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                                            WHERE t.oid = x.objid)
          WHEN 'pg_policy'::regclass THEN (SELECT c.relnamespace FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
                                           WHERE p.oid = x.objid)
          WHEN 'pg_amop'::regclass THEN (SELECT f.opfnamespace FROM pg_amop a JOIN pg_opfamily f ON f.oid = a.amopfamily
                                         WHERE a.oid = x.objid)
          WHEN 'pg_amproc'::regclass THEN (SELECT f.opfnamespace FROM pg_amproc a JOIN pg_opfamily f ON f.oid = a.amprocfamily
                                           WHERE a.oid = x.objid)
          -- (default privileges in the schema: anyone may set theirs)
          WHEN 'pg_default_acl'::regclass THEN (SELECT a.defaclnamespace FROM pg_default_acl a WHERE a.oid = x.objid)
          -- (a publication loses the shard's tables or the schema, and stays)
          WHEN 'pg_publication_rel'::regclass THEN (SELECT c.relnamespace FROM pg_publication_rel r
                                                    JOIN pg_class c ON c.oid = r.prrelid WHERE r.oid = x.objid)
          WHEN 'pg_publication_namespace'::regclass THEN (SELECT r.pnnspid FROM pg_publication_namespace r
                                                          WHERE r.oid = x.objid)
          -- (operators, operator classes, collations, statistics,
          -- text search objects, ...: the schema PostgreSQL names;
          -- none for casts and other schemaless objects)
          ELSE (SELECT n.oid FROM pg_namespace n
                WHERE n.nspname = (pg_identify_object(x.classid, x.objid, x.objsubid)).schema)
          END, 0) <> _shard_dependents_outside.nsp;
$$;
REVOKE ALL ON FUNCTION insta_id._shard_dependents_outside(oid) FROM PUBLIC;

DROP FUNCTION insta_id.drop_shard(int, boolean);
-- Longer than a screen: every refusal (rows, dependents outside the shard,
-- a move in progress) is decided under the locks the drop then uses.
-- Every lock it waits for, at most lock_timeout (a role without grants can
-- hold a shard's relation by OID: its ACCESS EXCLUSIVE request would queue
-- every writer of the shard behind it); on timeout, 55P03 names the holder.
CREATE FUNCTION insta_id.drop_shard(shard_id int, force boolean DEFAULT false, lock_timeout text DEFAULT '2s')
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- The row check reads every row or fails (42501): a row-level security
-- policy that would hide rows from the caller never makes a table look empty.
SET row_security = off
AS $$
DECLARE
    nsp name;
    nsp_oid oid;
    rel regclass;
    obj record;
    outside text;
BEGIN
    IF drop_shard.lock_timeout IS NULL THEN
        RAISE EXCEPTION 'lock_timeout must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM set_config('lock_timeout', drop_shard.lock_timeout, true);  -- a bad value fails here (22023)
    -- The registry row, locked: a migration of this shard (which holds it
    -- FOR SHARE) finishes first, and none starts meanwhile. (Read again
    -- once locked: a row gone meanwhile is no shard.)
    PERFORM insta_id._admin_write('lock', jsonb_build_object('shard', drop_shard.shard_id, 'exclusive', true));
    SELECT r.schema_name INTO nsp FROM insta_id_admin.shard_registry r WHERE r.shard_id = drop_shard.shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard % does not exist', drop_shard.shard_id USING ERRCODE = 'undefined_object';
    END IF;
    nsp_oid := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = nsp);
    IF nsp_oid IS NOT NULL THEN
        -- The schema's own lock first: no object arrives in it (every CREATE
        -- there holds that lock shared) between the check and the DROP.
        IF NOT insta_id._lock_schema(nsp_oid) THEN
            nsp_oid := NULL;  -- dropped meanwhile
        ELSE
            -- Its relations, types and routines too, in a fixed order, as DROP
            -- would lock them: what would come to depend on them from outside
            -- (a view, a foreign key, a function taking a type) waits, and is
            -- seen below. (Before PostgreSQL 17, making a function or a
            -- column of a type does not lock the type: see docs/shards.md.)
            FOR obj IN SELECT d.classid, d.objid FROM pg_depend d
                       WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = nsp_oid AND d.refobjsubid = 0
                         AND d.classid IN ('pg_class'::regclass, 'pg_type'::regclass, 'pg_proc'::regclass)
                       ORDER BY d.classid, d.objid LOOP
                BEGIN
                    PERFORM insta_id._lock_object(obj.classid, obj.objid);
                EXCEPTION WHEN lock_not_available THEN
                    RAISE EXCEPTION 'drop_shard(%) could not lock % within lock_timeout (%)', drop_shard.shard_id,
                                    pg_describe_object(obj.classid, obj.objid, 0), drop_shard.lock_timeout
                        USING ERRCODE = 'lock_not_available',
                              DETAIL = concat_ws(' ', insta_id._lock_holders(obj.classid, obj.objid) || '.', 'Nothing was dropped.'),
                              HINT = 'End or wait for that transaction (pg_stat_activity; pg_terminate_backend), or pass a longer lock_timeout; then call drop_shard again.';
                END;
            END LOOP;
        END IF;
    END IF;
    IF nsp_oid IS NOT NULL THEN
        outside := insta_id._shard_dependents_outside(nsp_oid);
        IF outside IS NOT NULL THEN
            RAISE EXCEPTION 'objects outside shard % depend on it', drop_shard.shard_id
                USING ERRCODE = 'dependent_objects_still_exist',
                      DETAIL = format('Dropping schema %I would also drop: %s.', nsp, outside),
                      HINT = 'Drop or change them first; drop_shard drops the shard''s own objects only, with force too.';
        END IF;
        IF NOT coalesce(force, false) THEN
            FOR rel IN SELECT c.oid FROM pg_class c WHERE c.relnamespace = nsp_oid AND c.relkind IN ('r', 'p') ORDER BY c.relname LOOP
                -- Locked above (ACCESS EXCLUSIVE): no row arrives between
                -- the check and the drop. Read through the gate: planning
                -- the query folds the owner's index expressions, predicates,
                -- partition keys and statistics expressions.
                IF insta_id._gate_query(nsp, ARRAY[rel], format('SELECT true FROM %s LIMIT 1', rel)) IS NOT NULL THEN
                    RAISE EXCEPTION 'shard % still has rows in %', drop_shard.shard_id, rel
                        USING ERRCODE = 'object_not_in_prerequisite_state',
                              HINT = 'Use insta_id.drop_shard(shard_id, force => true) to drop it with its data.';
                END IF;
            END LOOP;
        END IF;
        -- (by its name as it is now: the schema locked is the one dropped)
        EXECUTE format('DROP SCHEMA %I CASCADE', (SELECT n.nspname FROM pg_namespace n WHERE n.oid = nsp_oid));
    END IF;
    PERFORM insta_id._admin_write('remove', jsonb_build_object('shard', drop_shard.shard_id));
END
$$;
COMMENT ON FUNCTION insta_id.drop_shard(int, boolean, text) IS
'Drops a logical shard: its schema and registry row; refuses while it has rows unless force; waits at most lock_timeout for each lock';


DROP FUNCTION insta_id.add_id_column(regclass, name, int);
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


-- Longer than a screen: one refusal per kind of object a copy cannot carry,
-- each a short query naming the objects, so the DBA sees all of them at once.
-- Checks once, before any shard is made, that template can be copied.
CREATE OR REPLACE FUNCTION insta_id._check_template(template name)
RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
-- (no JIT: its one query's estimate grows with every shard's catalog rows,
-- 3.7 million at 4000 rich shards against jit_above_cost's 100,000;
-- compiling it took 1.2 s a call there, for a query that reads the
-- template's rows)
SET jit = off
AS $$
DECLARE
    tmpl oid := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = template);
    bad name;
    uncopyable text;
BEGIN
    -- Every query below names the template by its OID: the planner then
    -- filters each catalog to the template before any function runs on a
    -- row (by name, with statistics older than the last thousand shards, it
    -- ran _next_id_default_shard on every column of every shard: minutes).
    IF tmpl IS NULL THEN
        RAISE EXCEPTION 'template schema % does not exist', quote_ident(template)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    -- A default that depends on a sequence but is not next_id's (nextval(),
    -- serial) would keep drawing from the template's sequence in every copy.
    -- (each table's defaults, then each default's dependencies, in that
    -- order whatever the statistics (OFFSET 0): from the other end, all
    -- the defaults of the database that use a sequence, 0.47 s a call at
    -- 3000 shards)
    SELECT c.relname INTO bad
    FROM pg_class c, LATERAL (SELECT d.oid, a.attname FROM pg_attrdef d
                              JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                              WHERE d.adrelid = c.oid OFFSET 0) x
    WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p')
      AND EXISTS (SELECT FROM (SELECT dep.refclassid, dep.refobjid, dep.deptype FROM pg_depend dep
                               WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = x.oid OFFSET 0) dep
                  JOIN pg_class s ON s.oid = dep.refobjid AND s.relkind = 'S'
                  WHERE dep.refclassid = 'pg_class'::regclass AND dep.deptype = 'n')
      AND insta_id._next_id_default_shard(c.oid, x.attname) IS NULL
    ORDER BY c.relname
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'template table %.% has a default that uses a sequence', quote_ident(template), quote_ident(bad)
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'In templates, use insta_id.next_id defaults (insta_id.add_id_column) or identity columns.';
    END IF;
    -- Objects a copy would leave out, or that would still use the
    -- template's objects in every copy: refused by name, never skipped.
    SELECT string_agg(what, ', ' ORDER BY what) INTO uncopyable FROM (
        SELECT format('%s %I.%I', CASE c.relkind WHEN 'f' THEN 'foreign table' WHEN 'S' THEN 'sequence' END,
                      template, c.relname) AS what
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.oid = tmpl AND (c.relkind = 'f'
              -- a sequence not made for a column: an identity's, or one a
              -- column owns and draws from with next_id (a copy makes its
              -- own); not one only owned (OWNED BY), which no copy holds
              OR (c.relkind = 'S' AND NOT EXISTS (
                      SELECT FROM pg_depend d
                      LEFT JOIN pg_attrdef ad ON d.deptype = 'a' AND ad.adrelid = d.refobjid AND ad.adnum = d.refobjsubid
                      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.refobjsubid > 0
                        AND (d.deptype = 'i'
                             OR (insta_id._next_id_call(insta_id._without_locations(ad.adbin::text),
                                                        'insta_id.next_id(integer, regclass)'::regprocedure))[2] = c.oid))))
        UNION ALL
        -- A partition and its partitioned table are copied together.
        -- (from the template's relations, each probed (OFFSET 0): not by
        -- reading every partition of the database, as statistics older
        -- than the shards made the plan do, 60 ms at 3000 shards)
        SELECT format('partition %s of %s (one of them outside the template)', h.inhrelid::regclass, h.inhparent::regclass)
        FROM pg_class t, LATERAL (SELECT h.inhrelid, h.inhparent FROM pg_inherits h WHERE h.inhrelid = t.oid
                                  UNION ALL
                                  SELECT h.inhrelid, h.inhparent FROM pg_inherits h WHERE h.inhparent = t.oid OFFSET 0) h
        JOIN pg_class c ON c.oid = h.inhrelid JOIN pg_class p ON p.oid = h.inhparent
        WHERE t.relnamespace = tmpl AND c.relkind IN ('r', 'p', 'f') AND (c.relnamespace = tmpl) <> (p.relnamespace = tmpl)
        UNION ALL
        SELECT format('inheritance of %I.%I', template, c.relname)
        FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.oid = tmpl AND c.relkind = 'r' AND NOT c.relispartition
        UNION ALL
        -- (the key is made with the table, before the copy's functions and its types' columns)
        SELECT DISTINCT format('partitioned table %I.%I (its partition key uses function %s)', template, c.relname, d.refobjid::regprocedure)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_partitioned_table pt ON pt.partrelid = c.oid
        JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.refclassid = 'pg_proc'::regclass
        WHERE n.oid = tmpl AND d.refobjid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = n.oid)
        UNION ALL
        SELECT format('partitioned table %I.%I (its partition key uses type %s)', template, c.relname, a.atttypid::regtype)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_partitioned_table pt ON pt.partrelid = c.oid
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (pt.partattrs::int2[])
        JOIN pg_type y ON y.oid = a.atttypid
        WHERE n.oid = tmpl AND y.typnamespace = n.oid
        UNION ALL
        SELECT format('aggregate %s', p.oid::regprocedure) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.oid = tmpl AND p.prokind = 'a'
        UNION ALL
        -- Objects with a schema that a copy does not make.
        SELECT format('operator %s', o.oid::regoperator) FROM pg_operator o WHERE o.oprnamespace = tmpl
        UNION ALL
        SELECT format('operator class %I.%I', template, c.opcname) FROM pg_opclass c WHERE c.opcnamespace = tmpl
        UNION ALL
        SELECT format('operator family %I.%I', template, f.opfname) FROM pg_opfamily f WHERE f.opfnamespace = tmpl
        UNION ALL
        SELECT format('collation %I.%I', template, c.collname) FROM pg_collation c WHERE c.collnamespace = tmpl
        UNION ALL
        SELECT format('conversion %I.%I', template, c.conname) FROM pg_conversion c WHERE c.connamespace = tmpl
        UNION ALL
        SELECT format('text search configuration %I.%I', template, c.cfgname) FROM pg_ts_config c WHERE c.cfgnamespace = tmpl
        UNION ALL
        SELECT format('text search dictionary %I.%I', template, d.dictname) FROM pg_ts_dict d WHERE d.dictnamespace = tmpl
        UNION ALL
        -- A body is text: a name qualified with the template's schema in it
        -- (in any spelling, in a string for dynamic SQL too) would be the
        -- template's object in every copy.
        SELECT format('function %s (its body names schema %I)', p.oid::regprocedure, template)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
        WHERE n.oid = tmpl AND l.lanname NOT IN ('c', 'internal')
          AND insta_id._names_schema(p.prosrc, template)
        UNION ALL
        SELECT format('%s type %I.%I', CASE y.typtype WHEN 'r' THEN 'range' WHEN 'm' THEN 'multirange' ELSE 'base' END,
                      template, y.typname)
        FROM pg_type y JOIN pg_namespace n ON n.oid = y.typnamespace
        WHERE n.oid = tmpl AND (y.typtype IN ('r', 'm') OR (y.typtype = 'b' AND y.typcategory <> 'A'))
        UNION ALL
        SELECT format('rule %I on %I.%I', r.rulename, template, c.relname)
        FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.oid = tmpl AND r.rulename <> '_RETURN'
        UNION ALL
        -- A generation expression is copied as it is (it cannot be set anew).
        SELECT DISTINCT format('generated column %I.%I.%I (uses %s)', template, c.relname, a.attname, d.what)
        -- (each table's generated columns, then their dependencies, in that
        -- order (OFFSET 0): from the dependencies of every default of the
        -- database, 160 ms at 3000 shards). Any object of the template's
        -- (pg_identify_object quotes the schema's name), and what no
        -- dependency records (_tied_to_schema).
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
        LATERAL (SELECT a.attname, ad.oid, ad.adbin FROM pg_attribute a JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                 WHERE a.attrelid = c.oid AND a.attgenerated <> '' OFFSET 0) a,
        LATERAL (SELECT pg_describe_object(d.refclassid, d.refobjid, 0) AS what FROM pg_depend d
                 WHERE d.classid = 'pg_attrdef'::regclass AND d.objid = a.oid
                   AND NOT (d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid)
                   AND (pg_identify_object(d.refclassid, d.refobjid, 0)).schema = quote_ident(template)
                 UNION ALL
                 SELECT 'a constant or an empty ARRAY[] that may name an object by OID' WHERE insta_id._names_unrecorded(a.adbin, ARRAY[tmpl])
                 UNION ALL
                 -- (its own table, by a regclass constant: no dependency recorded)
                 SELECT pg_describe_object('pg_class'::regclass, c.oid, 0) WHERE c.oid = ANY (insta_id._tree_regclasses(a.adbin::text))
                 OFFSET 0) d
        WHERE n.oid = tmpl AND c.relkind IN ('r', 'p')
        UNION ALL
        -- Types are made before functions.
        SELECT DISTINCT format('domain %I.%I (its constraint or default uses function %s)', template, y.typname, d.refobjid::regprocedure)
        FROM pg_type y JOIN pg_namespace n ON n.oid = y.typnamespace
        JOIN pg_depend d ON d.refclassid = 'pg_proc'::regclass
             AND ((d.classid = 'pg_constraint'::regclass AND d.objid IN (SELECT k.oid FROM pg_constraint k WHERE k.contypid = y.oid))
               OR (d.classid = 'pg_type'::regclass AND d.objid = y.oid))
        WHERE n.oid = tmpl AND y.typtype = 'd'
          AND d.refobjid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = n.oid)
        UNION ALL
        -- A table's row type as a column type.
        SELECT format('column %I.%I.%I (of type %s)', template, c.relname, a.attname, a.atttypid::regtype)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        JOIN pg_type y ON y.oid = a.atttypid
        LEFT JOIN pg_type e ON e.oid = y.typelem AND y.typcategory = 'A'
        JOIN pg_class r ON r.oid IN (y.typrelid, e.typrelid) AND r.relkind <> 'c'
        WHERE n.oid = tmpl AND c.relkind IN ('r', 'p') AND r.relnamespace = n.oid) o;
    IF uncopyable IS NOT NULL THEN
        RAISE EXCEPTION 'template schema % holds objects a shard copy would leave out', quote_ident(template)
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = format('Not copied: %s.', uncopyable),
                  HINT = 'A copy holds tables, partitioned tables with their partitions (columns, defaults, constraints, indexes, comments, storage, statistics, foreign keys, replica identity), enum, composite and domain types, functions and procedures, views and materialized views, triggers, row-level security and policies, grants and owners. Move the rest out of the template, or create it in each shard afterwards; insta_id.shard_drift shows what differs.';
    END IF;
    -- Objects of one owner, who makes every object of a copy (42501 naming them).
    PERFORM insta_id._code_owner(template);
END
$$;

-- Longer than a screen: one SQL statement, a UNION ALL branch per kind of
-- object the copy carries, so the template's catalog is read once per call;
-- each branch is independent.
-- What a copy of template holds besides its tables: its functions and
-- procedures, views and materialized views (each created after what it
-- uses), their indexes, grants and comments; then triggers, row-level
-- security and policies on its tables and views. No ownership: a copy's
-- objects are made by their owner (the template's objects' one owner,
-- "code_owner"; the schema's as "schema_owner"). As statements with every name
-- unqualified, run with the copy's schema first on search_path: they are
-- deparsed with the template first on search_path, so a reference to one of
-- the template's objects comes out unqualified and, run in a copy, names the
-- copy's own. A function's SET search_path naming the template is given the
-- copy's schema instead ({"function": ..., "search_path": [...]}, "@" for the
-- copy's schema).
CREATE OR REPLACE FUNCTION insta_id._template_objects(template name)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- (no JIT, as _check_template: its estimates grow with the shards)
SET jit = off
AS $$
DECLARE
    tmpl oid := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = template);
    -- The template's tables and views, by their dependency on the schema
    -- (as _gate_lock reads a schema's): one index read, where each read of
    -- pg_class by relnamespace (no index leads with it) scanned an index of
    -- every relation of the database, 13 ms at 5000 shards, 21 times a call.
    rels oid[] := ARRAY(SELECT d.objid FROM pg_depend d
                        WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = tmpl AND d.refobjsubid = 0
                          AND d.classid = 'pg_class'::regclass AND d.deptype = 'n');
    pending jsonb;
    ready jsonb;
    placed text[] := '{}';
    out jsonb := '[]';
BEGIN
    -- Routines and views, keyed p<oid> / c<oid>, with what each uses among them.
    WITH obj AS (
        SELECT 'p' || p.oid AS key, p.oid AS sort,
               format('%I(%s)', p.proname, insta_id._deparse(template, 'identity', p.oid)) AS sig,
               CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END AS kind,
               -- CREATE OR REPLACE FUNCTION <template>.f(...) ... as CREATE FUNCTION f(...) ...
               jsonb_build_array(insta_id._unqualified_create(insta_id._deparse(template, 'function', p.oid),
                   'CREATE OR REPLACE ' || CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, template, p.proname)) AS ddl,
               p.proacl AS acl, p.proowner AS owner, obj_description(p.oid, 'pg_proc') AS comment,
               -- (the setting read as PostgreSQL reads it; the template as null)
               (SELECT jsonb_agg(CASE WHEN e = template THEN NULL ELSE e END)
                FROM unnest(insta_id._identifier_list(substr(c, 13))) e) AS path,
               ARRAY(SELECT CASE d.refclassid WHEN 'pg_proc'::regclass THEN 'p' || d.refobjid
                                              WHEN 'pg_class'::regclass THEN 'c' || d.refobjid
                                              ELSE 'c' || (SELECT y.typrelid FROM pg_type y WHERE y.oid = d.refobjid) END
                     FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid) AS uses
        FROM pg_proc p LEFT JOIN LATERAL unnest(p.proconfig) c ON c LIKE 'search_path=%'
        WHERE p.pronamespace = tmpl
        UNION ALL
        SELECT 'c' || c.oid, c.oid, quote_ident(c.relname),
               CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'MATERIALIZED VIEW' END,
               -- (a materialized view made empty: filling it runs its query,
               -- which PostgreSQL's REFRESH does as its owner, after the copy;
               -- named qualified, as pg_catalog comes first where it is made)
               jsonb_build_array(format('CREATE %s %I.%I%s AS %s%s', CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'MATERIALIZED VIEW' END,
                   template, c.relname, ' WITH (' || insta_id._options(c.reloptions) || ')', rtrim(insta_id._deparse(template, 'view', c.oid), ';'),
                   CASE WHEN c.relkind = 'm' THEN ' WITH NO DATA' ELSE '' END))
               || coalesce((SELECT jsonb_agg(insta_id._deparse(template, 'index', x.indexrelid) ORDER BY x.indexrelid)
                            FROM pg_index x WHERE x.indrelid = c.oid), '[]')
               || coalesce((SELECT jsonb_agg(format('COMMENT ON COLUMN %I.%I IS %L', c.relname, a.attname, d.description))
                            FROM pg_attribute a JOIN pg_description d ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass
                                 AND d.objsubid = a.attnum
                            WHERE a.attrelid = c.oid AND a.attnum > 0), '[]'),
               c.relacl, c.relowner, obj_description(c.oid, 'pg_class'), NULL,
               ARRAY(SELECT CASE d.refclassid WHEN 'pg_proc'::regclass THEN 'p' || d.refobjid ELSE 'c' || d.refobjid END
                     FROM pg_rewrite r JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                     WHERE r.ev_class = c.oid AND d.refobjid <> c.oid
                       AND d.refclassid IN ('pg_proc'::regclass, 'pg_class'::regclass))
        FROM pg_class c WHERE c.oid = ANY (rels) AND c.relkind IN ('v', 'm'))
    SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object('key', o.key, 'sort', o.sort,
               'uses', to_jsonb(ARRAY(SELECT u FROM unnest(o.uses) u WHERE u IN (SELECT key FROM obj) AND u <> o.key)),
               'sql', o.ddl
                      || insta_id._grant_statements(insta_id._grants(o.acl, o.owner),
                             CASE WHEN o.kind LIKE '%VIEW' THEN 'TABLE' ELSE o.kind END || ' ' || o.sig, '', o.acl IS NOT NULL)
                      || CASE WHEN o.comment IS NULL THEN '[]'::jsonb
                              ELSE jsonb_build_array(format('COMMENT ON %s %s IS %L', o.kind, o.sig, o.comment)) END,
               'path', CASE WHEN o.path @> '[null]' THEN jsonb_build_object('function', o.kind || ' ' || o.sig, 'search_path', o.path) END,
               'view', CASE WHEN o.kind LIKE '%VIEW' THEN true END)))
    INTO pending FROM obj o;
    -- Each after what it uses: rounds of those whose uses are all placed.
    WHILE jsonb_array_length(coalesce(pending, '[]')) > 0 LOOP
        SELECT jsonb_agg(e ORDER BY (e->>'sort')::oid) INTO ready FROM jsonb_array_elements(pending) e
        WHERE ARRAY(SELECT jsonb_array_elements_text(e->'uses')) <@ placed;
        IF ready IS NULL THEN  -- cannot happen (views and routines form no cycles); creation order then
            ready := (SELECT jsonb_agg(e ORDER BY (e->>'sort')::oid) FROM jsonb_array_elements(pending) e);
        END IF;
        SELECT out || coalesce(jsonb_agg(e - 'uses' - 'sort' - 'key'), '[]'), placed || array_agg(e->>'key')
        INTO out, placed FROM jsonb_array_elements(ready) e;
        SELECT jsonb_agg(e) INTO pending FROM jsonb_array_elements(pending) e WHERE NOT (e->>'key' = ANY (placed));
    END LOOP;
    -- Triggers, row-level security and policies of tables and views.
    RETURN jsonb_build_object('objects', out, 'after', coalesce((
        SELECT jsonb_agg(stmt ORDER BY ord, rel, name) FROM (
            -- (a partitioned table's trigger is cloned onto its partitions)
            SELECT 1 AS ord, c.relname AS rel, t.tgname AS name, insta_id._deparse(template, 'trigger', t.oid) AS stmt
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.oid = ANY (rels) AND NOT t.tgisinternal AND t.tgparentid = 0
            UNION ALL
            SELECT 2, c.relname, t.tgname, format('ALTER TABLE %I %s TRIGGER %I', c.relname,
                       CASE t.tgenabled WHEN 'D' THEN 'DISABLE' WHEN 'R' THEN 'ENABLE REPLICA' ELSE 'ENABLE ALWAYS' END, t.tgname)
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.oid = ANY (rels) AND NOT t.tgisinternal AND t.tgenabled <> 'O'
            UNION ALL
            SELECT 3, c.relname, t.tgname, format('COMMENT ON TRIGGER %I ON %I IS %L', t.tgname, c.relname, d.description)
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            JOIN pg_description d ON d.objoid = t.oid AND d.classoid = 'pg_trigger'::regclass
            WHERE c.oid = ANY (rels)
            UNION ALL
            SELECT 4, c.relname, '', format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', c.relname)
            FROM pg_class c WHERE c.oid = ANY (rels) AND c.relrowsecurity
            UNION ALL
            SELECT 4, c.relname, '', format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', c.relname)
            FROM pg_class c WHERE c.oid = ANY (rels) AND c.relforcerowsecurity
            UNION ALL
            SELECT 5, c.relname, p.polname,
                   format('CREATE POLICY %I ON %I AS %s FOR %s TO %s%s%s', p.polname, c.relname,
                          CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
                          CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE'
                                        WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
                          (SELECT string_agg(CASE WHEN r = 0 THEN 'PUBLIC' ELSE r::regrole::text END, ', ')
                           FROM unnest(p.polroles) r),
                          ' USING (' || insta_id._deparse(template, 'expr', p.polrelid, p.polqual) || ')',
                          ' WITH CHECK (' || insta_id._deparse(template, 'expr', p.polrelid, p.polwithcheck) || ')')
            FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.oid = ANY (rels)) s), '[]'),
        -- Enum, composite and domain types, in creation order, with their
        -- constraints, grants and comments (a domain's default or constraint
        -- naming one of the template's relations waits for it: 'late').
        'types', coalesce((
            SELECT jsonb_agg(stmt ORDER BY o, ord, sub) FROM (
                SELECT y.oid AS o, 1 AS ord, 0::bigint AS sub, CASE y.typtype
                       WHEN 'e' THEN format('CREATE TYPE %I AS ENUM (%s)', y.typname,
                                            (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
                                             FROM pg_enum e WHERE e.enumtypid = y.oid))
                       WHEN 'c' THEN format('CREATE TYPE %I AS (%s)', y.typname,
                                            (SELECT string_agg(format('%I %s%s', a.attname, insta_id._deparse(template, 'type', a.atttypid, NULL, a.atttypmod),
                                                        ' COLLATE ' || insta_id._deparse(template, 'collation', nullif(a.attcollation, t.typcollation))), ', ' ORDER BY a.attnum)
                                             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                                             WHERE a.attrelid = y.typrelid AND a.attnum > 0 AND NOT a.attisdropped))
                       ELSE format('CREATE DOMAIN %I AS %s%s%s%s', y.typname, insta_id._deparse(template, 'type', y.typbasetype, NULL, y.typtypmod),
                                   ' COLLATE ' || insta_id._deparse(template, 'collation', nullif(y.typcollation, b.typcollation)),
                                   CASE WHEN y.typdefaultbin IS NOT NULL AND NOT insta_id._tree_regclasses(y.typdefaultbin::text) && rels
                                        THEN ' DEFAULT ' || insta_id._deparse(template, 'expr', 0, y.typdefaultbin) END,
                                   CASE WHEN y.typnotnull THEN ' NOT NULL' ELSE '' END) END AS stmt
                FROM pg_type y LEFT JOIN pg_type b ON b.oid = y.typbasetype
                WHERE y.typnamespace = tmpl AND (y.typtype IN ('e', 'd')
                      OR (y.typtype = 'c' AND (SELECT c.relkind FROM pg_class c WHERE c.oid = y.typrelid) = 'c'))
                UNION ALL
                SELECT y.oid, 2, 0, format('ALTER DOMAIN %I ADD CONSTRAINT %I %s', y.typname, k.conname, insta_id._deparse(template, 'constraint', k.oid))
                -- (each domain's constraints by index (OFFSET 0): not from a
                -- read of every CHECK of the database, 35 ms at 5000 shards)
                FROM pg_type y, LATERAL (SELECT k.oid, k.conname, k.conbin FROM pg_constraint k
                                         WHERE k.contypid = y.oid AND k.contype = 'c' OFFSET 0) k
                WHERE y.typnamespace = tmpl AND y.typtype = 'd' AND NOT insta_id._tree_regclasses(k.conbin::text) && rels
                UNION ALL
                -- (in their order: a REVOKE from PUBLIC before a GRANT to it)
                SELECT y.oid, 3, g.n, g.g
                FROM pg_type y, jsonb_array_elements_text(insta_id._grant_statements(insta_id._grants(y.typacl, y.typowner),
                         CASE y.typtype WHEN 'd' THEN 'DOMAIN ' ELSE 'TYPE ' END || quote_ident(y.typname), '', true)) WITH ORDINALITY g(g, n)
                WHERE y.typnamespace = tmpl AND y.typtype IN ('e', 'd', 'c') AND y.typacl IS NOT NULL
                UNION ALL
                SELECT y.oid, 4, 0, format('COMMENT ON %s %I IS %L', CASE y.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, y.typname, d.description)
                FROM pg_type y JOIN pg_description d ON d.objoid = y.oid AND d.classoid = 'pg_type'::regclass
                WHERE y.typnamespace = tmpl AND y.typtype IN ('e', 'd', 'c')) s), '[]'),
        -- Materialized views the copy fills (REFRESH) once it is complete.
        'populated', coalesce((SELECT jsonb_agg(c.relname ORDER BY c.oid) FROM pg_class c
                               WHERE c.oid = ANY (rels) AND c.relkind = 'm' AND c.relispopulated), '[]'),
        -- Tables LIKE would leave tied to the template: a column of one of its
        -- types, a default or CHECK using one of its types or functions.
        -- Their copies are made without defaults and CHECKs, the columns
        -- given the copy's types ('retype'), and once the copy's functions
        -- exist, the defaults and CHECKs deparsed ('late').
        'deparsed_tables', coalesce((SELECT jsonb_agg(c.relname ORDER BY c.relname) FROM pg_class c
                                     WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND insta_id._tied_to_schema(c.oid)), '[]'),
        'retype', coalesce((
            SELECT jsonb_object_agg(relname, stmts) FROM (
            SELECT c.relname, jsonb_agg(format('ALTER TABLE %I ALTER COLUMN %I TYPE %s%s USING NULL', c.relname, a.attname,
                                    insta_id._deparse(template, 'type', a.atttypid, NULL, a.atttypmod),
                                    ' COLLATE ' || insta_id._deparse(template, 'collation', nullif(a.attcollation, y.typcollation))) ORDER BY a.attnum) AS stmts
            FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            JOIN pg_type y ON y.oid = a.atttypid LEFT JOIN pg_type e ON e.oid = y.typelem AND y.typcategory = 'A'
            -- (a partition's follow its parent's)
            WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND tmpl IN (y.typnamespace, e.typnamespace)
            GROUP BY c.relname) r), '{}'),
        -- Also, once the tables exist, a domain's default and constraints
        -- that name the template's relations; and last a partition's own
        -- defaults (made with PARTITION OF, it has its parent's), each after
        -- its parent's, since SET DEFAULT on a table sets its partitions' too.
        'late', coalesce((
            SELECT jsonb_agg(stmt ORDER BY stage, rel, ord, name) FROM (
                SELECT 0 AS stage, y.typname AS rel, 1 AS ord, '' AS name,
                       format('ALTER DOMAIN %I SET DEFAULT %s', y.typname, insta_id._deparse(template, 'expr', 0, y.typdefaultbin)) AS stmt
                FROM pg_type y
                WHERE y.typnamespace = tmpl AND y.typtype = 'd' AND insta_id._tree_regclasses(y.typdefaultbin::text) && rels
                UNION ALL
                SELECT 0, y.typname, 2, k.conname, format('ALTER DOMAIN %I ADD CONSTRAINT %I %s', y.typname, k.conname, insta_id._deparse(template, 'constraint', k.oid))
                FROM pg_type y, LATERAL (SELECT k.oid, k.conname, k.conbin FROM pg_constraint k
                                         WHERE k.contypid = y.oid AND k.contype = 'c' OFFSET 0) k
                WHERE y.typnamespace = tmpl AND y.typtype = 'd' AND insta_id._tree_regclasses(k.conbin::text) && rels
                UNION ALL
                -- (a next_id column's default is the copy's own, whatever its partitions')
                SELECT 1 + (SELECT count(*) FROM pg_partition_ancestors(c.oid)), c.relname, 1, a.attname,
                       CASE WHEN d.adbin IS NULL THEN format('ALTER TABLE %I ALTER COLUMN %I DROP DEFAULT', c.relname, a.attname)
                            ELSE format('ALTER TABLE %I ALTER COLUMN %I SET DEFAULT %s', c.relname, a.attname, insta_id._deparse(template, 'expr', d.adrelid, d.adbin)) END
                FROM pg_class c JOIN pg_inherits h ON h.inhrelid = c.oid
                JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
                JOIN pg_attribute pa ON pa.attrelid = h.inhparent AND pa.attname = a.attname
                LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
                LEFT JOIN pg_attrdef pd ON pd.adrelid = pa.attrelid AND pd.adnum = pa.attnum
                WHERE c.oid = ANY (rels) AND c.relispartition
                  AND pg_get_expr(d.adbin, d.adrelid) IS DISTINCT FROM pg_get_expr(pd.adbin, pd.adrelid)
                  AND insta_id._next_id_default_shard(pa.attrelid, pa.attname) IS NULL
                  AND insta_id._next_id_default_shard(c.oid, a.attname) IS NULL
                UNION ALL
                -- What LIKE and PARTITION OF leave out of a column, or take
                -- from its type or parent: statistics target, options,
                -- storage, compression; and a partition's own NOT NULL
                -- (which, as a default, is set on its partitions too) and
                -- comments.
                SELECT 1 + (SELECT count(*) FROM pg_partition_ancestors(c.oid)), c.relname, 5, a.attname, s.stmt
                FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                JOIN pg_type y ON y.oid = a.atttypid
                LEFT JOIN pg_inherits h ON c.relispartition AND h.inhrelid = c.oid
                LEFT JOIN pg_attribute pa ON pa.attrelid = h.inhparent AND pa.attname = a.attname
                -- (a copy's column has its type's storage or, made from it, its root's)
                LEFT JOIN pg_attribute ra ON ra.attrelid = pg_partition_root(c.oid) AND ra.attname = a.attname,
                LATERAL (SELECT format('ALTER TABLE ONLY %I ALTER COLUMN %I ', c.relname, a.attname) AS alter) x,
                LATERAL (VALUES
                    (CASE WHEN a.attstattarget >= 0 THEN x.alter || 'SET STATISTICS ' || a.attstattarget END),
                    -- (but Debian 15.20's pg_attver, which it sets on every column it makes)
                    (x.alter || 'SET (' || insta_id._options(ARRAY(SELECT o FROM unnest(a.attoptions) o
                                                                   WHERE o NOT LIKE 'pg\_attver=%')) || ')'),
                    (CASE WHEN a.attstorage <> y.typstorage OR a.attstorage <> coalesce(ra.attstorage, a.attstorage)
                          THEN x.alter || 'SET STORAGE ' || CASE a.attstorage WHEN 'p' THEN 'PLAIN' WHEN 'e' THEN 'EXTERNAL'
                                                                              WHEN 'm' THEN 'MAIN' ELSE 'EXTENDED' END END),
                    (CASE WHEN a.attcompression <> '' OR a.attcompression <> coalesce(ra.attcompression, a.attcompression)
                          THEN x.alter || 'SET COMPRESSION ' || CASE a.attcompression WHEN 'p' THEN 'pglz' WHEN 'l' THEN 'lz4'
                                                                                      ELSE 'default' END END),
                    (CASE WHEN a.attnotnull AND NOT pa.attnotnull
                          THEN format('ALTER TABLE %I ALTER COLUMN %I SET NOT NULL', c.relname, a.attname) END),
                    (CASE WHEN c.relispartition
                          THEN format('COMMENT ON COLUMN %I.%I IS ', c.relname, a.attname) || quote_literal(col_description(c.oid, a.attnum)) END)) s(stmt)
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND s.stmt IS NOT NULL
                UNION ALL
                SELECT 1 AS stage, c.relname AS rel, 1 AS ord, a.attname AS name,
                       format('ALTER TABLE %I ALTER COLUMN %I SET DEFAULT %s', c.relname, a.attname, insta_id._deparse(template, 'expr', d.adrelid, d.adbin)) AS stmt
                FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
                JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND insta_id._tied_to_schema(c.oid)
                  AND insta_id._next_id_default_shard(c.oid, a.attname) IS NULL
                UNION ALL
                SELECT 1, c.relname, 2, k.conname, format('ALTER TABLE %I ADD CONSTRAINT %I %s', c.relname, k.conname, insta_id._deparse(template, 'constraint', k.oid))
                FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'c' AND k.conislocal
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND (insta_id._tied_to_schema(c.oid) OR c.relispartition)
                UNION ALL
                -- Storage parameters (fillfactor, autovacuum_*), which LIKE leaves out.
                SELECT 1, c.relname, 4, '', format('ALTER TABLE %I SET (%s)', c.relname, insta_id._options(c.reloptions))
                FROM pg_class c WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND c.reloptions IS NOT NULL
                UNION ALL
                -- A table's comment, which LIKE leaves out (and a partition,
                -- made without LIKE, its constraints' too).
                SELECT 1, c.relname, 3, '', format('COMMENT ON TABLE %I IS %L', c.relname, d.description)
                FROM pg_class c JOIN pg_description d ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p')
                UNION ALL
                SELECT 1, c.relname, 3, k.conname, format('COMMENT ON CONSTRAINT %I ON %I IS %L', k.conname, c.relname, d.description)
                FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'c'
                JOIN pg_description d ON d.objoid = k.oid AND d.classoid = 'pg_constraint'::regclass
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND (insta_id._tied_to_schema(c.oid) OR c.relispartition)
                  AND k.conislocal) s), '[]'),
        'indexes', coalesce((
            SELECT jsonb_agg(stmt ORDER BY rel, ord, o) FROM (
                -- A partitioned table's index (made ON ONLY it, for pg_dump)
                -- is made for its partitions too; theirs are not made again.
                SELECT c.relname AS rel, 1 AS ord, x.indexrelid AS o,
                       CASE WHEN k.oid IS NOT NULL
                            THEN format('ALTER TABLE %I ADD CONSTRAINT %I %s', c.relname, k.conname, insta_id._deparse(template, 'constraint', k.oid))
                            WHEN c.relkind = 'p'
                            THEN regexp_replace(insta_id._deparse(template, 'index', x.indexrelid), ' ON ONLY ', ' ON ')
                            ELSE insta_id._deparse(template, 'index', x.indexrelid) END AS stmt
                FROM pg_class c JOIN pg_index x ON x.indrelid = c.oid
                LEFT JOIN pg_constraint k ON k.conindid = x.indexrelid AND k.conrelid = c.oid AND k.contype IN ('p', 'u', 'x')
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p')
                  AND NOT EXISTS (SELECT FROM pg_inherits h WHERE h.inhrelid = x.indexrelid)
                UNION ALL
                SELECT c.relname, 2, d.objoid, format('COMMENT ON INDEX %I IS %L', i.relname, d.description)
                FROM pg_class c JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid
                JOIN pg_description d ON d.objoid = i.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p')
                UNION ALL
                SELECT c.relname, 2, d.objoid, format('COMMENT ON CONSTRAINT %I ON %I IS %L', k.conname, c.relname, d.description)
                FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype IN ('p', 'u', 'x')
                JOIN pg_description d ON d.objoid = k.oid AND d.classoid = 'pg_constraint'::regclass
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p') AND k.conparentid = 0
                UNION ALL
                SELECT c.relname, 3, x.indexrelid, format('ALTER TABLE %I CLUSTER ON %I', c.relname, i.relname)
                FROM pg_class c JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid
                WHERE c.oid = ANY (rels) AND c.relkind = 'r' AND x.indisclustered
                UNION ALL
                -- CREATE STATISTICS <its schema>.name ON ... as CREATE STATISTICS name ON ...
                SELECT c.relname, 4, x.oid, insta_id._unqualified_create(insta_id._deparse(template, 'statistics', x.oid),
                           'CREATE STATISTICS', n.nspname, x.stxname)
                FROM pg_class c JOIN pg_statistic_ext x ON x.stxrelid = c.oid JOIN pg_namespace n ON n.oid = x.stxnamespace
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p')
                UNION ALL
                SELECT c.relname, 5, x.oid, format('COMMENT ON STATISTICS %I IS %L', x.stxname, d.description)
                FROM pg_class c JOIN pg_statistic_ext x ON x.stxrelid = c.oid
                JOIN pg_description d ON d.objoid = x.oid AND d.classoid = 'pg_statistic_ext'::regclass
                WHERE c.oid = ANY (rels) AND c.relkind IN ('r', 'p')) s), '[]'),
        'schema_comment', obj_description(tmpl, 'pg_namespace'),
        'schema_owner', (SELECT n.nspowner::regrole::text FROM pg_namespace n
                         WHERE n.oid = tmpl AND n.nspowner <> current_user::regrole),
        -- Who makes every object of a copy (refused here, 42501, when the
        -- template's objects have several owners).
        'code_owner', insta_id._code_owner(template)::text);
END
$$;

-- GRANT statements giving what _grants listed on an object ("TABLE
-- insta7.users", "FUNCTION f(integer)", ...), to columns when given
-- ("(name)"); first a REVOKE from PUBLIC when revoke_public (an ACL other
-- than the default one, which may have taken PUBLIC's rights away).
-- (PL/pgSQL, whose plan the session keeps: a copy calls it for each of its
-- tables, columns and sequences, and before PostgreSQL 18 a SQL function
-- with a SET clause was planned again at each call)
CREATE OR REPLACE FUNCTION insta_id._grant_statements(grants jsonb, object text, columns text DEFAULT '',
                                           revoke_public boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE WHEN revoke_public THEN jsonb_build_array(format('REVOKE ALL ON %s FROM PUBLIC', object)) ELSE '[]' END
        || coalesce((SELECT jsonb_agg(format('GRANT %s%s ON %s TO %s%s', g->>'privilege', columns, object, g->>'grantee',
                                             CASE WHEN (g->>'grantable')::boolean THEN ' WITH GRANT OPTION' ELSE '' END))
                     FROM jsonb_array_elements(coalesce(grants, '[]')) g), '[]');
END
$$;

-- The shard id of the next_id DEFAULT of a column, or NULL when the column
-- has no such default (found through the dependency of the default on next_id).
CREATE OR REPLACE FUNCTION insta_id._next_id_default_shard(tbl regclass, col name)
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

-- Refuses (55000) a column holding a value at or above the first ID
-- next_id can mint now for shard: old keys and new IDs would meet. Returns
-- the largest value (NULL: no rows). Read through the gate: planning a
-- query on the table folds its indexes' expressions and predicates, the
-- owner's code. With row_security off, so
-- that a policy hiding rows from the owner fails the read (42501) rather
-- than hide the largest value.
CREATE OR REPLACE FUNCTION insta_id._check_below_ids(tbl regclass, col name, shard int)
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
CREATE OR REPLACE FUNCTION insta_id.adopt_id_column(tbl regclass, col name DEFAULT 'id', shard_id int DEFAULT NULL,
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


-- The types of a node tree's constants and of its empty ARRAY[]s
-- (src/sql_text.rs).
CREATE FUNCTION insta_id._tree_const_types(tree text)
RETURNS oid[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_tree_const_types';
REVOKE ALL ON FUNCTION insta_id._tree_const_types(text) FROM PUBLIC;

-- The OIDs of a node tree's regclass constants (src/sql_text.rs): a
-- CHECK's or a generated column's naming its own table is recorded as no
-- dependency.
CREATE FUNCTION insta_id._tree_regclasses(tree text)
RETURNS oid[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_tree_regclasses';
REVOKE ALL ON FUNCTION insta_id._tree_regclasses(text) FROM PUBLIC;
-- Text with names qualified with schema from_nsp qualified with to_nsp
-- instead, where shard_drift's placeholder would be (src/placeholder.rs:
-- names and reg* constants, never strings or quoted names): a view's names
-- the template qualifies (pg_catalog's hide them), a foreign key's table.
CREATE FUNCTION insta_id._requalified(text text, from_nsp name, to_nsp name)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_requalified';
REVOKE ALL ON FUNCTION insta_id._requalified(text, name, name) FROM PUBLIC;

-- Whether a default's, a CHECK's, an index's, a trigger's WHEN or a
-- policy's node tree may name an object of schemas nsps where PostgreSQL
-- records no dependency: an empty ARRAY[] of one of their types, or a
-- constant whose value may hold OIDs, whatever it names: of a reg* type
-- or a row type (a catalog's has regproc fields), or an array, domain,
-- range or multirange over one. A scalar reg* constant and a constant's
-- own type are recorded.
CREATE FUNCTION insta_id._names_unrecorded(tree pg_node_tree, nsps oid[])
RETURNS boolean
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE types(oid, inner_type) AS (
        SELECT u.type, false FROM unnest(insta_id._tree_const_types(tree::text)) u(type)
        UNION
        -- (what a value of the type is made of: a domain's base type, an
        -- array's element, a range's subtype, a multirange's range)
        SELECT x.oid, true FROM types t JOIN pg_type y ON y.oid = t.oid
        CROSS JOIN LATERAL (VALUES (y.typbasetype), (y.typelem),
                                   ((SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = y.oid)),
                                   ((SELECT r.rngtypid FROM pg_range r WHERE r.rngmultitypid = y.oid))) x(oid)
        WHERE x.oid <> 0)
    SELECT EXISTS (
        SELECT FROM types t JOIN pg_type y ON y.oid = t.oid
        WHERE y.typnamespace = ANY (nsps) OR y.typtype = 'c'
           OR (t.inner_type AND y.oid = ANY ('{regproc, regprocedure, regoper, regoperator, regclass, regtype, regconfig,
                                               regdictionary, regnamespace, regrole, regcollation}'::regtype[])))
$$;
REVOKE ALL ON FUNCTION insta_id._names_unrecorded(pg_node_tree, oid[]) FROM PUBLIC;

-- (template_plan.sql: probed by object, not by a scan of pg_depend; a
-- regclass constant naming tbl itself ties it too)
-- Whether LIKE would leave a copy of table tbl tied to the table's schema:
-- a column of one of the schema's types (or an array of one), or a default
-- or CHECK naming any of its objects (a type, a function, an operator, a
-- relation by a regclass constant, tbl itself too, ...), recorded as a
-- dependency or not (_names_unrecorded; a CHECK's regclass constant
-- naming tbl: PostgreSQL records its columns only). LIKE copies their
-- node trees, OIDs and all.
CREATE OR REPLACE FUNCTION insta_id._tied_to_schema(tbl oid)
RETURNS boolean
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH nsp AS (SELECT c.relnamespace AS oid, n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = tbl)
    SELECT EXISTS (SELECT FROM pg_attribute a JOIN pg_type y ON y.oid = a.atttypid
                   LEFT JOIN pg_type e ON e.oid = y.typelem AND y.typcategory = 'A', nsp
                   WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped AND nsp.oid IN (y.typnamespace, e.typnamespace))
        -- (each default's and CHECK's dependencies probed by the object,
        -- in a subquery the planner keeps apart (OFFSET 0): as one join,
        -- with the statistics of a database that grew since they were
        -- taken, the plan hashed all of pg_depend, which grows with every
        -- shard: 140 ms a table at 1400 shards)
        OR EXISTS (SELECT FROM (SELECT 'pg_attrdef'::regclass::oid, ad.oid FROM pg_attrdef ad WHERE ad.adrelid = tbl
                                UNION ALL
                                SELECT 'pg_constraint'::regclass, k.oid FROM pg_constraint k WHERE k.conrelid = tbl AND k.contype = 'c'
                               ) o(classid, objid),
                   LATERAL (SELECT x.refclassid, x.refobjid FROM pg_depend x
                            WHERE x.classid = o.classid AND x.objid = o.objid OFFSET 0) d, nsp
                   WHERE NOT (d.refclassid = 'pg_class'::regclass AND d.refobjid = tbl)
                     -- (a next_id default's sequence: each copy is given its own)
                     AND NOT (o.classid = 'pg_attrdef'::regclass AND d.refclassid = 'pg_class'::regclass
                              AND (SELECT c.relkind FROM pg_class c WHERE c.oid = d.refobjid) = 'S')
                     -- (pg_identify_object quotes the schema's name as a name is written)
                     AND (pg_identify_object(d.refclassid, d.refobjid, 0)).schema = quote_ident(nsp.nspname))
        OR EXISTS (SELECT FROM (SELECT ad.adbin FROM pg_attrdef ad WHERE ad.adrelid = tbl
                                UNION ALL
                                SELECT k.conbin FROM pg_constraint k WHERE k.conrelid = tbl AND k.contype = 'c') o(tree), nsp
                   WHERE insta_id._names_unrecorded(o.tree, ARRAY[nsp.oid]) OR tbl = ANY (insta_id._tree_regclasses(o.tree::text)))
        -- (and a CHECK NOT VALID, which LIKE copies validated)
        OR EXISTS (SELECT FROM pg_constraint k WHERE k.conrelid = tbl AND k.contype = 'c' AND NOT k.convalidated)
$$;

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
REVOKE ALL ON FUNCTION insta_id._create_copies(jsonb, int[]) FROM PUBLIC;

-- Longer than a screen: the plan's steps must run in this order in one
-- schema (tables, sequences, then functions, views, keys, triggers,
-- grants); each step is a loop over one kind of planned object.
-- Copies every table of a template into schema target, made for it by
-- _create_copies, from the template's plan: LIKE ... INCLUDING ALL, then
-- each next_id column gets a sequence of its own and shard's number, then
-- the foreign keys, pointed at the copies when they point into the template.
CREATE OR REPLACE FUNCTION insta_id._copy_planned(plan jsonb, target name, shard int)
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


CREATE OR REPLACE FUNCTION insta_id.create_shards(first_shard int, last_shard int, template_schema text)
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

-- create_shards and create_shards_in_batches measure one shard's locks
-- through _create_copies, as they make shards (src/sql/template_copy.sql).
CREATE OR REPLACE FUNCTION insta_id._check_lock_budget(plan jsonb, first_shard int, shards int, hint text)
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

-- One batch of create_shards_in_batches: its missing shards made by
-- _create_copies, every schema before any copy (src/sql/template_copy.sql).
CREATE OR REPLACE FUNCTION insta_id._create_shard_batch(lo int, hi int, plan jsonb)
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
CREATE OR REPLACE PROCEDURE insta_id.create_shards_in_batches(first_shard int, last_shard int, template_schema text,
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


-- A migration's commits, waited for once (issue 58): each schema commits
-- without waiting for its WAL flush.
-- Waits for this session's commits as synchronous_commit says, once
-- (src/commits.rs): migrate commits each schema without waiting.
CREATE FUNCTION insta_id._wait_for_commits()
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_wait_for_commits';
REVOKE ALL ON FUNCTION insta_id._wait_for_commits() FROM PUBLIC;

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
CREATE OR REPLACE PROCEDURE insta_id.migrate(migration text, template_schema text, statements text,
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


-- Longer than a screen: every refusal before the first CREATE.
CREATE OR REPLACE FUNCTION insta_id.create_partitions(parent regclass, period interval DEFAULT '1 month',
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
    -- (before the read of the default partition too: every wait bounded)
    PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)

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
        -- (read through the gate: planning the query folds its indexes' expressions)
        IF def IS NOT NULL AND insta_id._gate_query(t.nsp, ARRAY[def],
               format('SELECT 1 FROM %s WHERE %I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<) %s LIMIT 1',
                      def, t.col, p->>'low', t.col, p->>'high')) IS NOT NULL THEN
            RAISE EXCEPTION 'the default partition % holds rows of % to %', def, p->>'from', p->>'before'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Move them out of it first: PostgreSQL refuses a partition whose rows the default partition holds.';
        END IF;
        made := made || (p->>'low')::bigint;
        stmts := stmts || format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%s) TO (%s)',
                                 t.nsp, p->>'name', parent, p->>'low', p->>'high');
    END LOOP;

    IF cardinality(stmts) > 0 THEN
        PERFORM insta_id._gate(t.nsp, ARRAY[parent], stmts);
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


CREATE OR REPLACE FUNCTION insta_id.drop_partitions(parent regclass, older_than interval, action text DEFAULT 'list',
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
            PERFORM insta_id._gate(t.nsp, ARRAY[parent], ARRAY[format('ALTER TABLE %s DETACH PARTITION %s', parent, old.part)]);
        ELSIF action = 'drop' THEN
            -- (no CASCADE: a view on it stops the drop, 2BP01)
            PERFORM insta_id._gate(t.nsp, ARRAY[parent], ARRAY[format('DROP TABLE %s', old.part)]);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION insta_id.drop_partitions(regclass, interval, text, text) IS
'Lists, detaches or drops the ID-range partitions of a table whose IDs were all made more than older_than ago; idempotent';


-- A delegated shard administrator (README, "Who may do what"): a role that
-- is not a superuser and creates, migrates and drops shards. Everything it
-- needs from insta_id is this one list: the helpers, the internal functions
-- they call (they are SECURITY INVOKER: each call is checked against the
-- caller), and SELECT on the registry and migration tables (written only
-- through _admin_write, which checks each write). A DBA grants
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
        ('EXECUTE', 'FUNCTION insta_id.add_id_column(regclass, name, int, text)'),
        ('EXECUTE', 'FUNCTION insta_id.adopt_id_column(regclass, name, int, boolean, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.create_partitions(regclass, interval, interval, timestamptz, text)'),
        ('EXECUTE', 'FUNCTION insta_id.drop_partitions(regclass, interval, text, text)'),
        ('EXECUTE', 'FUNCTION insta_id.drop_shard(int, boolean, text)'),
        ('EXECUTE', 'FUNCTION insta_id.adopt_shard(text, int)'),
        ('EXECUTE', 'PROCEDURE insta_id.migrate(text, text, text, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.shard_drift(text, int, int)'),
        -- what they call
        ('EXECUTE', 'FUNCTION insta_id._admin_write(text, jsonb)'),
        ('EXECUTE', 'FUNCTION insta_id._admin_write_check(regrole, text, jsonb)'),
        ('EXECUTE', 'FUNCTION insta_id._advisory_holds()'),
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
        ('EXECUTE', 'FUNCTION insta_id._create_copies(jsonb, int[])'),
        ('EXECUTE', 'FUNCTION insta_id._create_shard_batch(int, int, jsonb)'),
        ('EXECUTE', 'FUNCTION insta_id._deparse(name, text, oid, pg_node_tree, int)'),
        ('EXECUTE', 'FUNCTION insta_id._describe_schemas(oid[], oid)'),
        ('EXECUTE', 'FUNCTION insta_id._gate(name, regclass[], text[])'),
        ('EXECUTE', 'FUNCTION insta_id._gate_lock(name, oid[], boolean)'),
        ('EXECUTE', 'FUNCTION insta_id._gate_objects(oid, oid[])'),
        ('EXECUTE', 'FUNCTION insta_id._gate_owner(name, regclass[], oid[])'),
        ('EXECUTE', 'FUNCTION insta_id._gate_owners(oid, oid[], boolean)'),
        ('EXECUTE', 'FUNCTION insta_id._gate_query(name, regclass[], text)'),
        ('EXECUTE', 'FUNCTION insta_id._gate_relations(oid, oid[], boolean)'),
        ('EXECUTE', 'FUNCTION insta_id._gate_run(name, regrole, text[], text)'),
        ('EXECUTE', 'FUNCTION insta_id._grant(jsonb, text, text)'),
        ('EXECUTE', 'FUNCTION insta_id._grant_statements(jsonb, text, text, boolean)'),
        ('EXECUTE', 'FUNCTION insta_id._grants(aclitem[], oid)'),
        ('EXECUTE', 'FUNCTION insta_id._identifier_list(text)'),
        ('EXECUTE', 'FUNCTION insta_id._next_id_call(text, oid)'),
        ('EXECUTE', 'FUNCTION insta_id._lock(int, int, boolean, boolean, boolean)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_holder(int, int)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_holders(oid, oid)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_holders_in(oid)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_object(oid, oid)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_relations(oid[])'),
        ('EXECUTE', 'FUNCTION insta_id._lock_schema(oid)'),
        ('EXECUTE', 'FUNCTION insta_id._lock_table_capacity()'),
        ('EXECUTE', 'FUNCTION insta_id._lock_template_shared()'),
        ('EXECUTE', 'FUNCTION insta_id._migrations_of(name)'),
        ('EXECUTE', 'FUNCTION insta_id._move_lock_key()'),
        ('EXECUTE', 'FUNCTION insta_id._names_objects(text)'),
        ('EXECUTE', 'FUNCTION insta_id._names_unrecorded(pg_node_tree, oid[])'),
        ('EXECUTE', 'FUNCTION insta_id._names_schema(text, name)'),
        ('EXECUTE', 'FUNCTION insta_id._new_shard_schema(int, text)'),
        ('EXECUTE', 'FUNCTION insta_id._next_id_default_shard(regclass, name)'),
        ('EXECUTE', 'FUNCTION insta_id._object_owner(oid, oid)'),
        ('EXECUTE', 'FUNCTION insta_id._options(text[])'),
        ('EXECUTE', 'FUNCTION insta_id._query_in_schema(name, regrole, text)'),
        ('EXECUTE', 'FUNCTION insta_id._run_in_schema(name, regrole, text[])'),
        ('EXECUTE', 'FUNCTION insta_id._search_path_lines(text, name)'),
        ('EXECUTE', 'FUNCTION insta_id._schema_lock_key()'),
        ('EXECUTE', 'FUNCTION insta_id._restore_session(text[], name)'),
        ('EXECUTE', 'FUNCTION insta_id._sequence_name(name, name, name)'),
        ('EXECUTE', 'FUNCTION insta_id._session_state()'),
        ('EXECUTE', 'FUNCTION insta_id._shard_dependents_outside(oid)'),
        ('EXECUTE', 'FUNCTION insta_id._table_shard(regclass, name, int)'),
        ('EXECUTE', 'FUNCTION insta_id._template_objects(name)'),
        ('EXECUTE', 'FUNCTION insta_id._time_partitioned(regclass)'),
        ('EXECUTE', 'FUNCTION insta_id._time_partitions(regclass)'),
        ('EXECUTE', 'FUNCTION insta_id._template_plan(name)'),
        ('EXECUTE', 'FUNCTION insta_id._tied_to_schema(oid)'),
        ('EXECUTE', 'FUNCTION insta_id._tree_const_types(text)'),
        ('EXECUTE', 'FUNCTION insta_id._tree_regclasses(text)'),
        ('EXECUTE', 'FUNCTION insta_id._requalified(text, name, name)'),
        ('EXECUTE', 'FUNCTION insta_id._tree_relids(text)'),
        ('EXECUTE', 'FUNCTION insta_id._unqualified_create(text, text, name, name)'),
        ('EXECUTE', 'FUNCTION insta_id._view_definitions(oid[])'),
        ('EXECUTE', 'FUNCTION insta_id._wait_for_commits()'),
        ('EXECUTE', 'FUNCTION insta_id._with_placeholder(text, oid)'),
        ('EXECUTE', 'FUNCTION insta_id._without_locations(text)'),
        ('EXECUTE', 'FUNCTION insta_id._without_relids(text)'),
        -- what they read of insta_id's tables (what PUBLIC reads of them
        -- goes through functions, insta_id.shards() and the like). They
        -- write them only through _admin_write, which checks each write.
        ('USAGE', 'SCHEMA insta_id_admin'),
        ('SELECT', 'TABLE insta_id_admin.shard_registry'),
        ('SELECT', 'TABLE insta_id_admin.migrations'),
        ('SELECT', 'TABLE insta_id_admin.applied_migrations'),
        -- which shards a move holds here: migrate skips them
        ('SELECT (shard_id, side)', 'TABLE insta_id_admin.moves')
$$;
COMMENT ON FUNCTION insta_id.shard_admin_privileges() IS
'What insta_id.grant_shard_admin grants a delegated shard administrator: the shard helpers and what they use';


REVOKE ALL ON FUNCTION
    insta_id._object_owner(oid, oid), insta_id._lock_relations(oid[]), insta_id._advisory_holds(), insta_id._gate_relations(oid, oid[], boolean), insta_id._gate_objects(oid, oid[]),
    insta_id._gate_owner(name, regclass[], oid[]), insta_id._gate_owners(oid, oid[], boolean),
    insta_id._lock_holders(oid, oid), insta_id._lock_holders_in(oid), insta_id._gate_lock(name, oid[], boolean),
    insta_id._session_state(), insta_id._restore_session(text[], name), insta_id._gate_run(name, regrole, text[], text),
    insta_id._gate(name, regclass[], text[]), insta_id._gate_query(name, regclass[], text), insta_id._admin_write(text, jsonb),
    insta_id._admin_write_check(regrole, text, jsonb), insta_id._admin_write_apply(text, jsonb),
    insta_id.drop_shard(int, boolean, text), insta_id.add_id_column(regclass, name, int, text)
FROM PUBLIC;

-- shard_drift in one call at any number of shards (issue 58): views
-- deparsed a schema at a time, each schema's locks released before the
-- next (src/sql/drift.sql).
-- If a default's node tree, without positions, is a call of next_id (of
-- OID next_id) on an integer and a regclass constant: {shard, sequence's
-- OID} (src/sql_text.rs); else NULL.
CREATE FUNCTION insta_id._next_id_call(tree text, next_id oid)
RETURNS bigint[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_next_id_call';
REVOKE ALL ON FUNCTION insta_id._next_id_call(text, oid) FROM PUBLIC;

-- A node tree's text without its tokens' positions (src/sql_text.rs):
-- ' :location N' removed, which moves with the length of the schema's
-- name a statement was written with.
CREATE FUNCTION insta_id._without_locations(tree text)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_without_locations';
REVOKE ALL ON FUNCTION insta_id._without_locations(text) FROM PUBLIC;

-- A view's query tree (pg_rewrite.ev_action) without its tokens' positions
-- and without the OIDs of the relations it reads (src/sql_text.rs), and
-- those OIDs in order: what shard_drift compares of a view, its
-- relations by their names in the view's own schema.
CREATE FUNCTION insta_id._without_relids(tree text)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_without_relids';
REVOKE ALL ON FUNCTION insta_id._without_relids(text) FROM PUBLIC;

CREATE FUNCTION insta_id._tree_relids(tree text)
RETURNS oid[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_tree_relids';
REVOKE ALL ON FUNCTION insta_id._tree_relids(text) FROM PUBLIC;

-- A row of _describe_schemas with <schema>. for the name of schema nsp,
-- where it qualifies a name: in names, in the literal of a constant of a
-- reg* or a user's type and in a function's body, never in a string or a
-- quoted name (src/placeholder.rs). The name looked up by oid, a cache hit
-- (STABLE: a schema can be renamed).
CREATE FUNCTION insta_id._with_placeholder(detail text, nsp oid)
RETURNS text
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_with_placeholder';
REVOKE ALL ON FUNCTION insta_id._with_placeholder(text, oid) FROM PUBLIC;

-- The line pg_get_functiondef prints for a stored search_path setting,
-- and the same with '<schema>' for each name that is schema
-- (src/placeholder.rs); NULL if malformed.
CREATE FUNCTION insta_id._search_path_lines(setting text, schema name)
RETURNS text[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_search_path_lines';
REVOKE ALL ON FUNCTION insta_id._search_path_lines(text, name) FROM PUBLIC;

-- Whether such a tree may name a user's object by OID (src/sql_text.rs):
-- a template view whose tree does is never taken for a shard's.
CREATE FUNCTION insta_id._names_objects(tree text)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_names_objects';
REVOKE ALL ON FUNCTION insta_id._names_objects(text) FROM PUBLIC;

-- The definitions of views and materialized views. pg_get_viewdef locks
-- the view and every relation it reads until the end of the transaction:
-- here each schema's are deparsed in a subtransaction rolled back at once,
-- which releases its locks (the variables keep what was read), so that
-- one call holds one schema's locks at a time, whatever the number of
-- schemas: shard_drift over 8192 shards with views, in one call, on a
-- stock server. A schema whose views cannot be read within lock_timeout
-- (a tenant's lock on them), or whose tables went meanwhile (a drop_shard
-- beside the call), is reported, not left out: each of its views'
-- definition reads "not read (why)". PARALLEL UNSAFE: subtransactions.
CREATE FUNCTION insta_id._view_definitions(views oid[])
RETURNS TABLE (view oid, definition text)
LANGUAGE plpgsql STABLE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    one oid[];
    defs text[];
BEGIN
    FOR one IN SELECT array_agg(c.oid ORDER BY c.oid) FROM pg_class c
               WHERE c.oid = ANY (_view_definitions.views) AND c.relkind IN ('v', 'm')
               GROUP BY c.relnamespace LOOP
        BEGIN
            defs := ARRAY(SELECT pg_get_viewdef(v.oid) FROM unnest(one) WITH ORDINALITY v(oid, i) ORDER BY v.i);
            RAISE EXCEPTION 'read' USING ERRCODE = 'raise_exception';
        EXCEPTION
            WHEN raise_exception THEN
                NULL;    -- (the locks released; defs kept)
            WHEN lock_not_available OR undefined_table OR internal_error THEN
                defs := array_fill(format('not read (%s)', SQLERRM), ARRAY[cardinality(one)]);
        END;
        RETURN QUERY SELECT * FROM unnest(one, defs);
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION insta_id._view_definitions(oid[]) FROM PUBLIC;

DROP FUNCTION insta_id._describe_schemas(oid[]);
-- What schemas hold, as (object, detail) pairs comparable across shards: the
-- schema's own name, and next_id's shard number and sequence in a default,
-- written as placeholders; rel is the relation a row describes (0: the
-- schema, its types, functions and statistics objects). Tables, views, their columns (type, NOT NULL,
-- identity, generated, default, collation, statistics target, options,
-- storage, compression), indexes, constraints, triggers,
-- policies and row-level security, replica identity, storage options,
-- statistics objects, functions and procedures, enum, domain and composite
-- types, owners, and grants on the schema, its tables, functions and
-- types. For many schemas at once: one pass over each catalog (pg_class has
-- no index on the schema alone).
-- Described once per template, not once per shard (issue 58): a table
-- or view whose catalog rows are its namesake's in schema template (key,
-- below) is not described at all. Its rows would be the template's, so
-- one row stands for them all: object and detail NULL, rel the template's
-- relation. (Deparsing each table's indexes, constraints, triggers and
-- policies, and each view, built their relation cache entries, and
-- columns were a row each: most of a call over thousands of shards.)
-- template 0: every relation described.
-- Longer than a screen: one SQL statement, a UNION ALL branch per kind of
-- object, so each catalog is read once for all schemas; the branches are
-- independent and each is short.
-- Views described are deparsed by _view_definitions, the one deparser that
-- locks (a schema at a time); the rest is read from the catalogs without
-- locks. PARALLEL UNSAFE: _view_definitions is.
CREATE FUNCTION insta_id._describe_schemas(nsps oid[], template oid)
RETURNS TABLE (nsp oid, rel oid, object text, detail text)
LANGUAGE sql STABLE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
-- (its estimates, over CTEs without statistics, cross jit_optimize_above_cost
-- at any number of shards: where PostgreSQL has JIT, compiling the plan took
-- 4 s a call, the whole call 0.13 s without it, at 100 shards)
SET jit = off
AS $$
    -- The schemas, and each one's shard number if it is a registered
    -- shard's.
    WITH s AS (SELECT n.oid, n.nspname, g.shard_id
               FROM pg_namespace n LEFT JOIN insta_id_admin.shard_registry g ON g.schema_name = n.nspname
               WHERE n.oid = ANY (nsps)),
    -- The schemas' relations and indexes, from one pass over pg_class
    -- (past a quarter of shared_buffers a scan reads through a small ring:
    -- each pass over thousands of shards' pg_class was read again).
    classes AS MATERIALIZED (
        SELECT c.oid, c.relnamespace, c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relowner,
               c.relforcerowsecurity, c.relreplident, c.relacl, c.reloptions, c.relam
        FROM pg_class c JOIN s ON s.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'i', 'I')),
    rel AS (SELECT c.oid, c.relnamespace, c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relowner,
                   c.relforcerowsecurity, c.relreplident, c.relacl, c.reloptions
            FROM classes c
            WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')),
    -- Each relation's columns (pg_attribute read once), with their
    -- defaults as keyed, each printed only if it must be (pg_get_expr was
    -- a sixth of a call): next_id's call as a placeholder for the shard
    -- and its sequence, once they are the shard's own; a default naming no user's object (now()) by its
    -- node tree without positions, which prints alike wherever it is alike
    -- (a generated column's names columns: by number, and the columns'
    -- names are keyed); any other as printed (a generated column's
    -- deparsed with its table, whose relation cache entry that builds; a
    -- default names no column). The relations described print theirs.
    cols AS MATERIALIZED (
        SELECT c.attrelid, c.relnamespace, c.attnum, c.attname, c.atttypid, c.atttypmod, c.attcollation, c.attnotnull,
               c.attidentity, c.attgenerated, c.statistics, c.options, c.attstorage, c.attcompression,
               -- (a registered shard's own number and sequence only: any
               -- other is printed, and differs from the template's)
               CASE WHEN c.call IS NOT NULL
                         AND (c.relnamespace = template OR c.shard_id IS NULL
                              OR (c.call[1] = c.shard_id
                                  AND (SELECT q.relnamespace FROM pg_class q WHERE q.oid = c.call[2]::oid) = c.relnamespace))
                    THEN 'insta_id.next_id(<shard>, <its sequence>)'
                    WHEN c.call IS NULL AND NOT insta_id._names_objects(c.tree) THEN c.tree
                    ELSE pg_get_expr(c.adbin, CASE WHEN c.attgenerated <> '' THEN c.adrelid ELSE 0 END) END AS expr
        FROM (SELECT x.*, insta_id._next_id_call(x.tree, 'insta_id.next_id(integer, regclass)'::regprocedure) AS call
              FROM (SELECT a.attrelid, r.relnamespace, a.attnum, a.attname, a.atttypid, a.atttypmod, a.attcollation,
                           a.attnotnull, a.attidentity, a.attgenerated, d.adbin, d.adrelid, s.shard_id,
                           -- (the planner's settings: but Debian 15.20's pg_attver,
                           -- which that build puts on every column it makes, alone
                           -- there in most: no regexp for them)
                           nullif(a.attstattarget, -1) AS statistics, a.attstorage, a.attcompression,
                           CASE WHEN a.attoptions IS NULL OR (cardinality(a.attoptions) = 1 AND a.attoptions[1] LIKE 'pg\_attver=%') THEN NULL
                                ELSE nullif(ltrim(regexp_replace(array_to_string(a.attoptions, ','), '(^|,)pg_attver=[^,]*', ''), ','), '') END AS options,
                           insta_id._without_locations(d.adbin::text) AS tree
                    FROM rel r JOIN s ON s.oid = r.relnamespace
                    JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
                    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                    OFFSET 0) x) c),    -- (each read once)
    -- A relation's key: what its own rows print (owner, grants, options,
    -- columns) and what the deparsers of its indexes, constraints,
    -- triggers and policies read, as one value: the relation's kind, its
    -- columns by number (names are printed; an operator class or
    -- collation is printed against the column's type), then those
    -- objects' catalog rows whole (so that a column PostgreSQL adds is
    -- compared too) but for their own oids, node trees without their
    -- token positions (which move with the length of each copy's schema
    -- name), and what they name in the relation's own schema by its name
    -- there (elsewhere, by oid). Equal keys, equal rows once the schema's
    -- name is the placeholder. An oid of the shard's own in a node tree (a
    -- CHECK calling the shard's function) makes the key differ: that
    -- relation is described; one of a schema described, in the
    -- template's, keeps that table out (pinned). (Locations: ' :location N' in a node tree's
    -- text.) Each catalog is read in one pass, grouped by relation (a
    -- subquery per relation and kind cost 0.1 ms a relation).
    -- The columns' part: number, name,
    -- NOT NULL, identity, generated, the planner's settings (statistics
    -- target, options, storage, compression), the default as printed, the
    -- collation and the type: a built-in one (below FirstNormalObjectId)
    -- by oid, any other as printed, with the placeholder (an array's own
    -- name depends on the order its schema's types were made in; a
    -- shard's column of the template's collation prints its name, where
    -- the template's prints the placeholder: by oid they were keyed
    -- alike), and the type's collation.
    -- (The type looked up for those columns only: a join probed pg_type
    -- for every column.)
    columns_key AS MATERIALIZED (
        SELECT c.attrelid, string_agg(ROW(c.attnum, c.attname, c.atttypmod,
                                          CASE WHEN c.attcollation < 16384 THEN c.attcollation::text
                                               ELSE insta_id._with_placeholder(c.attcollation::regcollation::text, c.relnamespace) END,
                                          CASE WHEN y.printed IS NULL THEN c.atttypid::text
                                               ELSE insta_id._with_placeholder(y.printed, c.relnamespace) END,
                                          y.typcollation, c.attnotnull, c.attidentity, c.attgenerated,
                                          c.statistics, c.options, c.attstorage, c.attcompression,
                                          -- (the default with the placeholder, as the end of
                                          -- this statement writes every row: a default of the
                                          -- schema's own enum is the template's)
                                          insta_id._with_placeholder(c.expr, c.relnamespace))::text,
                                      ' ' ORDER BY c.attnum) AS key
        FROM cols c
        LEFT JOIN LATERAL (SELECT y.typcollation, format_type(c.atttypid, c.atttypmod) AS printed FROM pg_type y
                           WHERE y.oid = c.atttypid AND c.atttypid >= 16384 OFFSET 0) y ON true
        GROUP BY c.attrelid),
    -- A view's query: its tree without positions and relations, then the
    -- relations it reads, in order, by name in its own schema, quoted
    -- (elsewhere, by oid). Every other object the tree names, it names by
    -- oid.
    view_trees AS MATERIALIZED (
        SELECT r.oid, r.relnamespace, insta_id._without_relids(w.tree) AS tree, insta_id._tree_relids(w.tree) AS relids
        FROM rel r
        CROSS JOIN LATERAL (SELECT w.ev_action::text AS tree FROM pg_rewrite w
                            WHERE w.ev_class = r.oid AND w.rulename = '_RETURN' OFFSET 0) w    -- (read once)
        WHERE r.relkind IN ('v', 'm')),
    -- (the key's parts side by side, each '' where there is none: a row
    -- of them all as text quoted each part again, a tenth of a call)
    keyed AS MATERIALIZED (
        SELECT r.oid, r.relnamespace, r.relname, r.relkind,
               ROW(r.relkind, r.relpersistence, r.relrowsecurity, r.relforcerowsecurity, r.relreplident, r.reloptions,
                   r.relowner, r.relacl)::text AS own,
               coalesce(c.key, '') AS columns, coalesce(i.key, '') AS indexes, coalesce(k.key, '') AS constraints,
               coalesce(t.key, '') AS triggers, coalesce(p.key, '') AS policies,
               CASE WHEN w.oid IS NULL THEN ''
                    ELSE ROW(w.tree, ARRAY(SELECT CASE WHEN x.relnamespace = r.relnamespace THEN quote_ident(x.relname) ELSE u.relid::text END
                                           FROM unnest(w.relids) WITH ORDINALITY u(relid, n)
                                           LEFT JOIN pg_class x ON x.oid = u.relid ORDER BY u.n))::text END AS query
        FROM rel r
        LEFT JOIN view_trees w ON w.oid = r.oid
        LEFT JOIN columns_key c ON c.attrelid = r.oid
        -- (a catalog row whole but for some columns: jsonb_populate_record
        -- sets those, whatever the version's other columns)
        LEFT JOIN (SELECT x.indrelid, string_agg(ROW(i.relname, i.relkind, i.relam, i.reloptions,
                                                     jsonb_populate_record(x, '{"indexrelid": 0, "indrelid": 0, "indexprs": null, "indpred": null}'),
                                                     insta_id._without_locations(x.indexprs::text),
                                                     insta_id._without_locations(x.indpred::text),
                                                     ARRAY(SELECT ia.attoptions::text FROM pg_attribute ia
                                                           WHERE ia.attrelid = i.oid AND ia.attoptions IS NOT NULL ORDER BY ia.attnum))::text,
                                                 ' ' ORDER BY i.relname) AS key
                   FROM rel r JOIN pg_index x ON x.indrelid = r.oid JOIN classes i ON i.oid = x.indexrelid
                   GROUP BY x.indrelid) i ON i.indrelid = r.oid
        LEFT JOIN (SELECT k.conrelid, string_agg(ROW(jsonb_populate_record(k, '{"oid": 0, "conrelid": 0, "connamespace": 0, "conindid": 0,
                                                                                "confrelid": 0, "conparentid": 0, "conbin": null}'),
                                                     insta_id._without_locations(k.conbin::text), ci.relname,
                                                     -- (a foreign key's target in the schema: its name, and the
                                                     -- names of the columns it references, which it prints)
                                                     CASE WHEN f.relnamespace = r.relnamespace THEN ROW(f.relname, fa.names)
                                                          ELSE ROW(k.confrelid) END)::text, ' ' ORDER BY k.conname, k.contype) AS key
                   FROM rel r JOIN pg_constraint k ON k.conrelid = r.oid AND k.contype <> 'n'
                   LEFT JOIN pg_class ci ON ci.oid = k.conindid LEFT JOIN pg_class f ON f.oid = k.confrelid
                   LEFT JOIN LATERAL (SELECT array_agg(a.attname ORDER BY u.n) AS names
                                      FROM unnest(k.confkey) WITH ORDINALITY u(attnum, n)
                                      JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.attnum
                                      WHERE k.contype = 'f') fa ON true
                   GROUP BY k.conrelid) k ON k.conrelid = r.oid
        LEFT JOIN (SELECT t.tgrelid, string_agg(ROW(jsonb_populate_record(t, '{"oid": 0, "tgrelid": 0, "tgparentid": 0, "tgfoid": 0,
                                                                               "tgconstrrelid": 0, "tgconstrindid": 0, "tgconstraint": 0, "tgqual": null}'),
                                                    insta_id._without_locations(t.tgqual::text),
                                                    CASE WHEN p.pronamespace = r.relnamespace THEN ROW(p.proname) ELSE ROW(t.tgfoid) END,
                                                    CASE WHEN cr.relnamespace = r.relnamespace THEN ROW(cr.relname) ELSE ROW(t.tgconstrrelid) END)::text,
                                                ' ' ORDER BY t.tgname) AS key
                   FROM rel r JOIN pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
                   JOIN pg_proc p ON p.oid = t.tgfoid
                   -- (looked up: most triggers have none, and a join read all of pg_class)
                   LEFT JOIN LATERAL (SELECT cr.relnamespace, cr.relname FROM pg_class cr
                                      WHERE cr.oid = t.tgconstrrelid AND t.tgconstrrelid <> 0 OFFSET 0) cr ON true
                   GROUP BY t.tgrelid) t ON t.tgrelid = r.oid
        LEFT JOIN (SELECT p.polrelid, string_agg(ROW(p.polname, p.polcmd, p.polpermissive, p.polroles,
                                                     insta_id._without_locations(p.polqual::text),
                                                     insta_id._without_locations(p.polwithcheck::text))::text,
                                                 ' ' ORDER BY p.polname) AS key
                   FROM rel r JOIN pg_policy p ON p.polrelid = r.oid
                   GROUP BY p.polrelid) p ON p.polrelid = r.oid),
    -- The template's tables whose indexes, constraints, triggers or
    -- policies use, by oid in a node tree, an object of a schema described
    -- (the template's, or a shard's): a shard's table with the same key
    -- uses that same object, printed as <schema>.x in one of the two and
    -- by its schema's name in the other. (A trigger's own function is
    -- keyed by its name in the schema; a foreign key's target, by its
    -- name there.) A few rows: the template's tables only. (A view's
    -- tree is checked for any oid a user's object can have instead:
    -- PostgreSQL records no dependency for some, an empty ARRAY[] of a
    -- type or a regclass[] constant.) What those trees may name with no
    -- dependency recorded (_names_unrecorded) pins the table too.
    pinned AS MATERIALIZED (
        SELECT r.oid FROM rel r
        CROSS JOIN LATERAL (
            SELECT 'pg_constraint'::regclass::oid, k.oid, 0::oid FROM pg_constraint k WHERE k.conrelid = r.oid AND k.contype NOT IN ('f', 'n')
            UNION ALL
            SELECT 'pg_class'::regclass::oid, x.indexrelid, 0::oid FROM pg_index x WHERE x.indrelid = r.oid
            UNION ALL
            SELECT 'pg_trigger'::regclass::oid, t.oid, t.tgfoid FROM pg_trigger t WHERE t.tgrelid = r.oid AND NOT t.tgisinternal
            UNION ALL
            SELECT 'pg_policy'::regclass::oid, p.oid, 0::oid FROM pg_policy p WHERE p.polrelid = r.oid) part(classid, objid, by_name)
        -- (looked up: a join, planned with the catalogs never analyzed,
        -- read all of pg_depend)
        CROSS JOIN LATERAL (SELECT d.refclassid, d.refobjid FROM pg_depend d
                            WHERE d.classid = part.classid AND d.objid = part.objid AND d.deptype = 'n'
                              AND d.refobjid <> r.oid AND d.refobjid <> part.by_name OFFSET 0) d
        -- (pg_identify_object quotes the schema's name as a name is written)
        JOIN s ON quote_ident(s.nspname) = (pg_identify_object(d.refclassid, d.refobjid, 0)).schema
        WHERE r.relnamespace = template
        UNION
        SELECT r.oid FROM rel r
        CROSS JOIN LATERAL (
            SELECT k.conbin FROM pg_constraint k WHERE k.conrelid = r.oid AND k.contype NOT IN ('f', 'n')
            UNION ALL
            SELECT e.tree FROM pg_index x CROSS JOIN LATERAL (VALUES (x.indexprs), (x.indpred)) e(tree) WHERE x.indrelid = r.oid
            UNION ALL
            SELECT t.tgqual FROM pg_trigger t WHERE t.tgrelid = r.oid AND NOT t.tgisinternal
            UNION ALL
            SELECT e.tree FROM pg_policy p CROSS JOIN LATERAL (VALUES (p.polqual), (p.polwithcheck)) e(tree) WHERE p.polrelid = r.oid) part(tree)
        WHERE r.relnamespace = template
          AND (insta_id._names_unrecorded(part.tree, nsps)
               -- (its own table, by a regclass constant: a shard's naming
               -- the template's has the same oid, and no dependency is recorded)
               OR r.oid = ANY (insta_id._tree_regclasses(part.tree::text)))),
    -- The template's views whose trees name no user's object by oid, each
    -- tree read once (a join's filter read one a pair of views, when the
    -- plan was a nested loop: 9.6 s of a call over 1000 shards).
    plain_template_views AS MATERIALIZED (
        SELECT w.oid FROM (SELECT w.oid, w.tree FROM view_trees w WHERE w.relnamespace = template OFFSET 0) w
        WHERE NOT insta_id._names_objects(w.tree)),
    -- The template's relations a shard's may stand for (not pinned; a
    -- view, only if its tree names no user's object by oid), apart, and
    -- each shard's relation probing them, whatever the estimates: keyed
    -- holds every shard's (past work_mem, in a temporary file), and its
    -- join with itself, planned once the catalogs had been analyzed, read
    -- that file once per shard's view: 119 s of a call over 8192 shards
    -- on PostgreSQL 15, 6 s now.
    template_keyed AS MATERIALIZED (
        SELECT t.* FROM keyed t
        WHERE t.relnamespace = template AND NOT EXISTS (SELECT FROM pinned p WHERE p.oid = t.oid)
          AND (t.relkind NOT IN ('v', 'm') OR t.oid IN (SELECT w.oid FROM plain_template_views w))),
    -- The shards' relations whose rows are their template namesake's.
    matched AS MATERIALIZED (
        SELECT k.oid, k.relnamespace, k.relkind, t.oid AS template_rel
        FROM keyed k CROSS JOIN LATERAL (SELECT t.oid FROM template_keyed t WHERE t.relname = k.relname
             AND (t.own, t.columns, t.indexes, t.constraints, t.triggers, t.policies, t.query)
               = (k.own, k.columns, k.indexes, k.constraints, k.triggers, k.policies, k.query) OFFSET 0) t
        WHERE k.relnamespace <> template),
    -- The views that read a relation of their own schema that is not
    -- such a table (a view prints the names of the columns it reads as
    -- they are now).
    -- (each relation a view reads grouped with the tables matched, the
    -- views kept of each group that has no table: one aggregate, whatever
    -- the estimates. NOT IN's hashed subplan is planned only while the
    -- estimate of matched fits in work_mem: with the catalogs never
    -- analyzed, matched probed once a relation, 85 s over 8192 shards.
    -- Each relation looked up: a join read all of pg_class.)
    views_apart AS MATERIALIZED (
        SELECT DISTINCT v.oid
        FROM (SELECT g.relid, array_agg(g.view) AS views
              FROM (SELECT x.oid AS relid, w.oid AS view
                    FROM view_trees w CROSS JOIN LATERAL unnest(w.relids) u(relid)
                    CROSS JOIN LATERAL (SELECT x.oid FROM pg_class x
                                        WHERE x.oid = u.relid AND x.relnamespace = w.relnamespace AND x.oid <> w.oid OFFSET 0) x
                    UNION ALL
                    SELECT y.oid, NULL FROM matched y WHERE y.relkind IN ('r', 'p', 'f')) g
              GROUP BY g.relid
              HAVING bool_and(g.view IS NOT NULL)) a
        CROSS JOIN LATERAL unnest(a.views) v(oid)),
    -- Those tables, and the views matched that read none apart.
    reuse AS MATERIALIZED (
        SELECT m.oid, m.relnamespace, m.template_rel FROM matched m
        WHERE m.relkind IN ('r', 'p', 'f')
           OR NOT EXISTS (SELECT FROM views_apart a WHERE a.oid = m.oid)),
    -- Every other relation (few, found first), described.
    deparsed_rel AS MATERIALIZED (SELECT r.* FROM rel r WHERE NOT EXISTS (SELECT FROM reuse u WHERE u.oid = r.oid)),
    views AS MATERIALIZED (
        SELECT * FROM insta_id._view_definitions(ARRAY(SELECT r.oid FROM deparsed_rel r WHERE r.relkind IN ('v', 'm')))),
    -- Each relation's grants, written once per distinct ACL and owner (a
    -- shard's tables have their template's: thousands alike).
    rel_grants AS (SELECT x.acl, x.relowner,
                          (SELECT string_agg(format('%s %s', coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type), ', ' ORDER BY coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type)
                           FROM aclexplode(x.relacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                           WHERE a.grantee <> x.relowner) AS grants
                   FROM (SELECT DISTINCT ON (coalesce(r.relacl::text, ''), r.relowner) coalesce(r.relacl::text, '') AS acl,
                                r.relowner, r.relacl
                         FROM deparsed_rel r) x),
    parts (rel, nsp, object, detail) AS (
        SELECT r.oid, r.relnamespace, format('index %I', i.relname), pg_get_indexdef(x.indexrelid)
        FROM deparsed_rel r JOIN pg_index x ON x.indrelid = r.oid JOIN classes i ON i.oid = x.indexrelid
        UNION ALL
        SELECT r.oid, r.relnamespace, format('constraint %I on %I', k.conname, r.relname), pg_get_constraintdef(k.oid)
        FROM deparsed_rel r JOIN pg_constraint k ON k.conrelid = r.oid
        WHERE k.contype <> 'n'
        UNION ALL
        -- (and whether it fires, which ALTER TABLE ... TRIGGER sets and
        -- pg_get_triggerdef does not print)
        SELECT r.oid, r.relnamespace, format('trigger %I on %I', t.tgname, r.relname),
               concat_ws('; ', pg_get_triggerdef(t.oid),
                         CASE t.tgenabled WHEN 'D' THEN 'DISABLE' WHEN 'R' THEN 'ENABLE REPLICA' WHEN 'A' THEN 'ENABLE ALWAYS' END)
        FROM deparsed_rel r JOIN pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
        UNION ALL
        SELECT r.oid, r.relnamespace, format('policy %I on %I', p.polname, r.relname),
               concat_ws(' ', CASE WHEN p.polpermissive THEN 'permissive' ELSE 'restrictive' END, p.polcmd::text,
                         (SELECT string_agg(CASE WHEN o = 0 THEN 'PUBLIC' ELSE o::regrole::text END, ',' ORDER BY CASE WHEN o = 0 THEN 'PUBLIC' ELSE o::regrole::text END) FROM unnest(p.polroles) o),
                         'USING ' || pg_get_expr(p.polqual, p.polrelid), 'CHECK ' || pg_get_expr(p.polwithcheck, p.polrelid))
        FROM deparsed_rel r JOIN pg_policy p ON p.polrelid = r.oid),
    raw (nsp, rel, object, detail) AS (
        SELECT s.oid, 0::oid, 'schema', coalesce((SELECT string_agg(format('%s %s', coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type), ', ' ORDER BY coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type)
                                       FROM pg_namespace n, aclexplode(n.nspacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                                       WHERE n.oid = s.oid AND a.grantee <> n.nspowner), 'no grants')
        FROM s
        UNION ALL
        SELECT r.relnamespace, r.oid, format('%s %I', CASE r.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table'
                   WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' ELSE 'foreign table' END, r.relname),
               concat_ws('; ', 'owner ' || r.relowner::regrole::text, CASE r.relpersistence WHEN 'u' THEN 'unlogged' END,
                         CASE WHEN r.relrowsecurity THEN 'row level security' END,
                         CASE WHEN r.relforcerowsecurity THEN 'forced' END,
                         'replica identity ' || r.relreplident::text,
                         'options ' || array_to_string(r.reloptions, ','),
                         'grants ' || rg.grants,
                         CASE WHEN r.relkind IN ('v', 'm') THEN 'definition ' || v.definition END)
        FROM deparsed_rel r JOIN rel_grants rg ON rg.acl = coalesce(r.relacl::text, '') AND rg.relowner = r.relowner
        LEFT JOIN views v ON v.view = r.oid
        UNION ALL
        SELECT r.relnamespace, r.oid, format('column %I.%I', r.relname, a.attname),
               concat_ws(' ', format_type(a.atttypid, a.atttypmod),
                         CASE WHEN a.attnotnull THEN 'NOT NULL' END,
                         CASE WHEN a.attidentity <> '' THEN 'identity ' || a.attidentity::text END,
                         CASE WHEN a.attgenerated <> '' THEN 'generated' END,
                         'DEFAULT ' || CASE WHEN a.expr = 'insta_id.next_id(<shard>, <its sequence>)' THEN a.expr
                                            ELSE (SELECT pg_get_expr(d.adbin, CASE WHEN a.attgenerated <> '' THEN d.adrelid ELSE 0 END)
                                                  FROM pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum) END,
                         -- (a column of a type without collation has none: no lookup)
                         'COLLATE ' || CASE WHEN a.attcollation <> 0
                                            THEN nullif(a.attcollation, (SELECT typcollation FROM pg_type WHERE oid = a.atttypid))::regcollation::text END,
                         'STATISTICS ' || a.statistics, 'OPTIONS ' || a.options,
                         'STORAGE ' || CASE WHEN a.attstorage <> (SELECT typstorage FROM pg_type WHERE oid = a.atttypid)
                                            THEN CASE a.attstorage WHEN 'p' THEN 'plain' WHEN 'e' THEN 'external'
                                                                   WHEN 'm' THEN 'main' ELSE 'extended' END END,
                         'COMPRESSION ' || CASE a.attcompression WHEN 'p' THEN 'pglz' WHEN 'l' THEN 'lz4' END)
        FROM deparsed_rel r JOIN cols a ON a.attrelid = r.oid
        UNION ALL
        SELECT r.relnamespace, 0::oid, format('statistics %I on %I', x.stxname, r.relname),
               -- (without its name, which PostgreSQL prints qualified)
               'CREATE STATISTICS ' || substr(pg_get_statisticsobjdef(x.oid),
                                              length(format('CREATE STATISTICS %s.%I ', x.stxnamespace::regnamespace, x.stxname)) + 1)
        FROM rel r JOIN pg_statistic_ext x ON x.stxrelid = r.oid
        UNION ALL
        SELECT y.typnamespace, 0::oid, format('type %I', y.typname),
               concat_ws('; ', 'owner ' || y.typowner::regrole::text, CASE y.typtype
                   WHEN 'e' THEN 'enum (' || (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
                                              FROM pg_enum e WHERE e.enumtypid = y.oid) || ')'
                   WHEN 'd' THEN concat_ws(' ', 'domain over ' || format_type(y.typbasetype, y.typtypmod),
                                           'COLLATE ' || y.typcollation::regcollation::text, CASE WHEN y.typnotnull THEN 'NOT NULL' END,
                                           'DEFAULT ' || pg_get_expr(y.typdefaultbin, 0),
                                           (SELECT string_agg(pg_get_constraintdef(k.oid), ' ' ORDER BY k.conname)
                                            FROM pg_constraint k WHERE k.contypid = y.oid AND k.contype = 'c'))
                   ELSE 'composite (' || (SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
                                          FROM pg_attribute a WHERE a.attrelid = y.typrelid AND a.attnum > 0 AND NOT a.attisdropped) || ')' END,
                   'grants ' || (SELECT string_agg(format('%s %s', coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type), ', ' ORDER BY coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type)
                                 FROM aclexplode(y.typacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee WHERE a.grantee <> y.typowner))
        -- (a schema's types by their dependency on it, which every type
        -- but a table's row type and an array type records: pg_type has no
        -- index on typnamespace alone, and PostgreSQL 15 probed
        -- pg_type_typname_nsp_index by its second column, reading the
        -- whole index for each schema: 18.8 s of 27.5 at 8192 shards)
        FROM s JOIN pg_depend d ON d.refclassid = 'pg_namespace'::regclass AND d.refobjid = s.oid AND d.refobjsubid = 0
                               AND d.classid = 'pg_type'::regclass AND d.deptype = 'n'
        JOIN pg_type y ON y.oid = d.objid
        WHERE y.typtype IN ('e', 'd') OR (y.typtype = 'c' AND (SELECT c.relkind FROM pg_class c WHERE c.oid = y.typrelid) = 'c')
        UNION ALL
        -- (the schema in its search_path setting, wherever in the list and
        -- however spelt, as the placeholder too: _search_path_lines)
        SELECT p.pronamespace, 0::oid, format('%s %I(%s)', CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END,
                   p.proname, pg_get_function_identity_arguments(p.oid)),
               concat_ws('; ', 'owner ' || p.proowner::regrole::text,
                         'grants ' || (SELECT string_agg(format('%s %s', coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type), ', ' ORDER BY coalesce(quote_ident(g.rolname), 'PUBLIC'), a.privilege_type)
                                       FROM aclexplode(p.proacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                                       WHERE a.grantee <> p.proowner),
                         CASE WHEN sp.printed IS NULL THEN pg_get_functiondef(p.oid)
                              ELSE replace(pg_get_functiondef(p.oid), sp.printed, sp.placeheld) END)
        FROM s JOIN pg_proc p ON p.pronamespace = s.oid
        LEFT JOIN LATERAL (SELECT l[1] AS printed, l[2] AS placeheld
                           FROM unnest(p.proconfig) c, insta_id._search_path_lines(substr(c, 13), s.nspname) l
                           WHERE c LIKE 'search_path=%') sp ON true
        WHERE p.prokind <> 'a'
        UNION ALL
        SELECT p.nsp, p.rel, p.object, p.detail FROM parts p
        UNION ALL
        -- (a relation as its template namesake: one row)
        SELECT u.relnamespace, u.template_rel, NULL, NULL FROM reuse u)
    -- (each row's schema looked up by _with_placeholder: a join of the
    -- rows with s, estimated at 10 schemas, was a nested loop, 90 s over
    -- 8192 shards)
    SELECT r.nsp, r.rel, insta_id._with_placeholder(r.object, r.nsp), insta_id._with_placeholder(r.detail, r.nsp)
    FROM raw r
$$;
REVOKE ALL ON FUNCTION insta_id._describe_schemas(oid[], oid) FROM PUBLIC;

-- Which registered shards differ from a template, and how: one row per
-- difference (missing, extra, or the shard's detail beside the template's).
-- Empty right after create_shards and after a change applied to the template
-- and every shard alike. All the template's shards at once by default, or
-- those numbered first_shard to last_shard. Tables, columns, indexes,
-- views' query trees and the rest are read from the catalogs without
-- locks; the views that are not their template namesake's are deparsed a
-- schema at a time, each schema's locks released before the next
-- (_view_definitions), so one call covers every shard on a server with
-- default settings (0.10.0 needed a lock per view and relation it read,
-- all held to the end: thousands of shards with views took 54000 and
-- ranges). Under concurrent DDL: views deparsed are read each schema at
-- its turn, the rest as the call's snapshot has it. PARALLEL UNSAFE:
-- _describe_schemas is.
CREATE OR REPLACE FUNCTION insta_id.shard_drift(template_schema text, first_shard int DEFAULT 0, last_shard int DEFAULT 8191)
RETURNS TABLE (shard_id int, schema_name name, object text, difference text)
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tmpl oid;
BEGIN
    PERFORM insta_id._check_shard_range_bounds(first_shard, last_shard);
    tmpl := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = template_schema);
    IF tmpl IS NULL THEN
        RAISE EXCEPTION 'template schema % does not exist', quote_ident(template_schema)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    RETURN QUERY
    -- The template's shards (and those of no recorded template), as migrate reaches them.
    WITH shards AS (SELECT r.shard_id, r.schema_name, n.oid FROM insta_id_admin.shard_registry r
                    LEFT JOIN pg_namespace n ON n.nspname = r.schema_name
                    WHERE (r.template_schema IS NULL OR r.template_schema = shard_drift.template_schema)
                      AND r.shard_id BETWEEN first_shard AND last_shard),
    d AS MATERIALIZED (SELECT * FROM insta_id._describe_schemas(array_append(ARRAY(SELECT oid FROM shards WHERE oid IS NOT NULL), tmpl), tmpl)),
    -- The template's rows, picked out once: with the registry's
    -- statistics from before the last thousands of shards, the planner
    -- otherwise filtered all of d once per shard (66 s at 8192).
    template_rows AS MATERIALIZED (SELECT d.rel, d.object, d.detail FROM d WHERE d.nsp = tmpl),
    -- Each shard's part of the template, a relation (or 0, the rest) at a
    -- time, but for its tables described as the template's (a row with
    -- no object): the same rows on both sides, nothing to compare.
    -- (a set operation: the estimates of d, a function's, made an
    -- anti-join a nested loop, 100 s at 8192 shards)
    described AS MATERIALIZED (SELECT s.shard_id, s.schema_name, d.rel, d.object, d.detail FROM shards s JOIN d ON d.nsp = s.oid),
    compared AS (SELECT s.shard_id, s.schema_name, r.rel FROM shards s, (SELECT DISTINCT t.rel FROM template_rows t) r
                 WHERE s.oid IS NOT NULL
                 EXCEPT ALL
                 SELECT x.shard_id, x.schema_name, x.rel FROM described x WHERE x.object IS NULL),
    expected AS (SELECT c.shard_id, c.schema_name, t.object, t.detail FROM compared c JOIN template_rows t ON t.rel = c.rel),
    actual AS (SELECT x.shard_id, x.schema_name, x.object, x.detail FROM described x WHERE x.object IS NOT NULL)
    SELECT coalesce(e.shard_id, a.shard_id), coalesce(e.schema_name, a.schema_name), coalesce(e.object, a.object),
           CASE WHEN a.object IS NULL THEN 'missing: ' || e.detail
                WHEN e.object IS NULL THEN 'extra: ' || a.detail
                ELSE format('%s, template: %s', a.detail, e.detail) END
    FROM expected e FULL JOIN actual a ON a.shard_id = e.shard_id AND a.object = e.object
    WHERE a.detail IS DISTINCT FROM e.detail
    UNION ALL
    SELECT s.shard_id, s.schema_name, 'schema', 'missing: the schema does not exist' FROM shards s WHERE s.oid IS NULL
    ORDER BY 1, 3;
END
$$;

-- Delegated shard administrators (grant_shard_admin): the DML they held on
-- insta_id's tables taken back, and the new list given (the helpers whose
-- arguments changed were dropped with their grants).
DO $$
DECLARE
    admin pg_catalog.regrole;
BEGIN
    FOR admin IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole
        FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
        WHERE p.oid = 'insta_id.create_shard(int, text)'::pg_catalog.regprocedure
          AND a.grantee OPERATOR(pg_catalog.<>) p.proowner AND a.grantee OPERATOR(pg_catalog.<>) 0
    LOOP
        EXECUTE pg_catalog.format('REVOKE INSERT, UPDATE, DELETE ON insta_id_admin.shard_registry, insta_id_admin.migrations, insta_id_admin.applied_migrations FROM %s', admin);
        -- (a move's lock is a superuser's now)
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION insta_id.lock_shard_for_move(int), insta_id._shard_schema(int) FROM %s', admin);
        PERFORM insta_id.grant_shard_admin(admin);
    END LOOP;
END
$$;

-- Where a move brought each shard from (src/sql/registry.sql, moves.sql):
-- a re-run of a move tells one that finished from one whose servers are
-- swapped (issue 56).
ALTER TABLE insta_id_admin.shard_registry
    ADD COLUMN moved_from       text,
    ADD COLUMN moved_from_label text,
    ADD COLUMN moved_at         timestamptz;

-- Whether a schema is some shard's template, asked at each shard made
-- (src/sql/registry.sql).
CREATE INDEX shard_registry_template_schema_idx ON insta_id_admin.shard_registry (template_schema);

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
REVOKE ALL ON FUNCTION insta_id.move_arrived(int, text, text) FROM PUBLIC;

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
REVOKE ALL ON FUNCTION insta_id.move_return(int) FROM PUBLIC;

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

-- (0.10.0's recorded no timeline)
-- Records that this server's side of a shard's move reached a step (the
-- first step makes the row; _move_steps lists each side's), with when and
-- the timeline the server was on: a later timeline at a re-run says the
-- server failed over since (a promoted standby), which the mover reads
-- (a logical slot made before may be gone, rows a subscription applied
-- may be missing: issue 57). 55006 when the
-- row is another move's (the other side, or another schema). At the
-- adoption's step, opens the fence of the shard's sequences (move_open:
-- 42704 if the shard is not registered here).
CREATE OR REPLACE FUNCTION insta_id.move_step(shard_id int, side text, step text, schema_name name, peer text)
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
