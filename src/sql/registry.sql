-- The shard registry: which schema is which logical shard, and the helpers
-- for one shard's life (create_shard, drop_shard, adopt_shard).
-- Rules for every shard helper (registry.sql, id_columns.sql,
-- template_plan.sql, template_copy.sql, migrations.sql, drift.sql,
-- moves.sql): PL/pgSQL or SQL with
-- SET search_path = pg_catalog, pg_temp and every other name qualified;
-- identifiers quoted with format %I / %L or requoted after parsing, never
-- pasted; SECURITY INVOKER, in the caller's transaction (all or nothing).
-- A statement that must see a shard's or template's objects first goes to
-- insta_id._run_in_schema (ddl.sql). Not PUBLIC's: superusers, and roles
-- granted EXECUTE (README, "Who may do what"; privileges.sql).

-- insta_id's tables (the shard map, migrations, moves) live in a schema of
-- their own. PUBLIC has no USAGE on it, so no role without a grant can name
-- them, and so none can queue a lock on them (see insta_id.shards()).
-- Shard administrators get USAGE with their grants (privileges.sql).
CREATE SCHEMA insta_id_admin;
COMMENT ON SCHEMA insta_id_admin IS
'insta_id''s tables: the shard map, migrations and moves. PUBLIC reads them through insta_id.shards(), insta_id.shard_schema(int) and the migration functions';

CREATE TABLE insta_id_admin.shard_registry (
    shard_id    int  PRIMARY KEY CHECK (shard_id BETWEEN 0 AND 8191),
    schema_name name NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- The template the shard was copied from (create_shards): its migrations
    -- reach the shard. NULL for a shard made otherwise (create_shard,
    -- adopt_shard, before 0.9.0): every template's migrations reach it.
    template_schema name,
    -- Where a move brought the shard from (insta-id move; a rollback's
    -- return too): the old server as its system identifier and database
    -- OID, which a re-run of the move compares, and as the mover named it
    -- (host:port/database); when. NULL for a shard made or adopted here
    -- otherwise, or moved before 0.11.0.
    moved_from       text,
    moved_from_label text,
    moved_at         timestamptz
);
COMMENT ON TABLE insta_id_admin.shard_registry IS
'Logical shards of this database: shard id, schema and template. Dumped by pg_dump with the database.';
-- Registry rows are user data: pg_dump dumps them, pg_restore restores them.
SELECT pg_catalog.pg_extension_config_dump('insta_id_admin.shard_registry', '');
-- Whether a schema is some shard's template, asked at each shard made: a
-- scan of the registry at each made a shard's cost grow with the shards.
CREATE INDEX shard_registry_template_schema_idx ON insta_id_admin.shard_registry (template_schema);

-- The shard map as PUBLIC reads it: functions, not relations. A role that
-- can name a relation can queue a lock on it before its privileges are
-- checked (CREATE RULE asks for AccessExclusiveLock, CREATE TRIGGER for
-- ShareRowExclusiveLock), and every later reader waits behind that request;
-- nobody can name a function's tables without USAGE on insta_id_admin.
-- SECURITY DEFINER to read them; STABLE, so one statement sees one map.
-- tables: one pass over pg_class for all shards (pg_class has no index on
-- the schema alone, so a count per shard would scan it once per shard).
CREATE FUNCTION insta_id.shards(
    OUT shard_id int, OUT schema_name name, OUT created_at timestamptz,
    OUT tables int, OUT template_schema name)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER ROWS 1000
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.shard_id, r.schema_name, r.created_at, coalesce(t.tables, 0)::int, r.template_schema
    FROM insta_id_admin.shard_registry r
    LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = r.schema_name
    LEFT JOIN (SELECT c.relnamespace, count(*) AS tables FROM pg_catalog.pg_class c
               WHERE c.relkind IN ('r', 'p') GROUP BY c.relnamespace) t ON t.relnamespace = n.oid
    ORDER BY r.shard_id
$$;
COMMENT ON FUNCTION insta_id.shards() IS 'Logical shards of this database, with how many tables each has';

-- The schema of a shard registered here: 22003 out of range, 42704 when
-- none is (what every step of a move on the old server starts with).
CREATE FUNCTION insta_id._shard_schema(shard_id int)
RETURNS name
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
BEGIN
    PERFORM insta_id._check_shard_id(_shard_schema.shard_id);
    SELECT r.schema_name INTO nsp FROM insta_id_admin.shard_registry r WHERE r.shard_id = _shard_schema.shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard % does not exist', _shard_schema.shard_id USING ERRCODE = 'undefined_object';
    END IF;
    RETURN nsp;
END
$$;

-- Per-request routing (README): the schema of a shard of this database,
-- NULL when the shard is not here (22003 out of range). One index probe,
-- unlike insta_id.shards(). PUBLIC's, SECURITY DEFINER for the same reason.
CREATE FUNCTION insta_id.shard_schema(shard_id int)
RETURNS name
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM insta_id._check_shard_id(shard_schema.shard_id);
    RETURN (SELECT r.schema_name FROM insta_id_admin.shard_registry r WHERE r.shard_id = shard_schema.shard_id);
END
$$;
COMMENT ON FUNCTION insta_id.shard_schema(int) IS
'The schema of a logical shard of this database, for routing a request; NULL when the shard is not here';

CREATE FUNCTION insta_id._check_shard_id(shard_id int)
RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF shard_id NOT BETWEEN 0 AND 8191 THEN
        RAISE EXCEPTION 'shard id % is out of range', shard_id
            USING ERRCODE = 'numeric_value_out_of_range',
                  DETAIL = 'A shard id must be between 0 and 8191.';
    END IF;
END
$$;

-- A range of shard numbers: both given, both in 0..8191, in order.
CREATE FUNCTION insta_id._check_shard_range_bounds(first_shard int, last_shard int)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF first_shard IS NULL OR last_shard IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_id(first_shard);
    PERFORM insta_id._check_shard_id(last_shard);
    IF last_shard < first_shard THEN
        RAISE EXCEPTION 'last_shard % is below first_shard %', last_shard, first_shard
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- A schema name given as text: refused rather than cut to a name PostgreSQL
-- would keep (63 bytes), which could be another schema, or empty.
CREATE FUNCTION insta_id._check_name(schema_name text)
RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF schema_name = '' THEN
        RAISE EXCEPTION 'a schema name must not be empty' USING ERRCODE = 'invalid_name';
    END IF;
    IF octet_length(schema_name) > current_setting('max_identifier_length')::int THEN
        RAISE EXCEPTION 'schema name % is longer than % bytes', quote_literal(schema_name), current_setting('max_identifier_length')
            USING ERRCODE = 'name_too_long',
                  DETAIL = 'PostgreSQL would cut it to the first ones, which may name another schema.';
    END IF;
END
$$;

CREATE FUNCTION insta_id.create_shard(shard_id int, schema_name text DEFAULT NULL)
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

CREATE FUNCTION insta_id.adopt_shard(schema_name text, shard_id int)
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
