-- The one gate for tenants' code (issue 54). Every statement insta_id runs
-- on a shard's or template's relation goes through _gate (statements) or
-- _gate_query (one value read): nothing else in src/sql executes SQL on a
-- tenant's relation, and tests/census.py fails when something new does.
-- Before running anything the gate
--   1. locks every relation the statement may reach (below, "reach") in
--      ROW EXCLUSIVE mode, which writers share but CREATE TRIGGER, CREATE
--      INDEX and ALTER TABLE wait for: the code found in step 2 is the code
--      that runs. The reach is walked again after each round of locks until
--      the walk finds nothing unlocked (_gate_lock): what step 2 decides
--      from was read with all of it locked. Each wait is bounded by
--      lock_timeout; on timeout the error names the processes holding the
--      relation (_lock_holders);
--   2. decides, from the catalogs, who owns every piece of code PostgreSQL
--      may evaluate for a statement there, and every object of the schema
--      put first on search_path (_gate_owner): index expressions
--      and predicates, partition keys, statistics expressions, CHECKs,
--      domains' CHECKs, defaults and generated columns, triggers of every
--      kind, rules, policies, operators and operator classes, range types'
--      functions; for the relations themselves, their partitions and
--      parents, and for a statement that writes the tables their foreign
--      keys link in both directions (PostgreSQL re-validates a key,
--      cascades and checks rows through them), transitively. Each owner
--      is read once its object is held (held_owner, src/locks.rs: a function or an
--      operator locked ACCESS SHARE, which ALTER ... OWNER TO waits for;
--      a wait bounded and reported as the relations' are), so that code
--      does not change hands before it runs; a type's owner
--      is read, not held (ALTER TYPE ... OWNER TO takes no lock). One
--      owner: the statement runs as it. Several: refused (42501), naming
--      each owner's objects;
--   3. runs the statements as that owner in a security-restricted operation
--      with search_path = <schema>, pg_catalog, pg_temp (_run_in_schema,
--      src/ddl.rs), in a subtransaction (_gate_run), refusing what would
--      outlive them in the caller's session: temporary objects, advisory
--      locks taken or released, cursors, prepared statements.
-- Code owned by a superuser does not count (it is trusted, and runs as the
-- owner chosen, with that role's rights); the relations themselves do,
-- whoever owns them, so a superuser's table with an application role's
-- trigger is refused rather than run as either.
-- Privileges: internal, not PUBLIC's (privileges.sql); search_path as
-- registry.sql says.

-- The owner of an object whose code PostgreSQL may run: one row, or none
-- for a kind that has no owner (text search parsers and templates are a
-- superuser's C code; a trigger or constraint is its table's). A body of
-- SQL's own, every name bound when it is made (no search_path to set), so
-- that a caller's plan inlines it: one index probe an object, where a
-- call would cost tens of microseconds (thousands of objects in a schema).
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
CREATE FUNCTION insta_id._code_owner(nsp name)
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
