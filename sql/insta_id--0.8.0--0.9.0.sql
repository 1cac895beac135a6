-- insta_id 0.8.0 -> 0.9.0: safe in a DBA's hands (issues 23 and 40: code runs
-- with its owner's rights wherever PostgreSQL evaluates it). Every function
-- below is the one in src/shards.sql; tests/upgrade.sh checks that an
-- updated database matches a fresh 0.9.0 install.
\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.9.0'" to load this file. \quit

-- insta_id's tables move to a schema PUBLIC has no USAGE on, and what
-- PUBLIC read of them and of the guard's statistics becomes functions
-- (src/sql/registry.sql, insta_id.shards()): a role that can name a relation
-- can queue a lock on it before its privileges are checked, and every reader
-- of the shard map would wait behind it.
CREATE SCHEMA insta_id_admin;
COMMENT ON SCHEMA insta_id_admin IS
'insta_id''s tables: the shard map, migrations and moves. PUBLIC reads them through insta_id.shards(), insta_id.shard_schema(int) and the migration functions';
DROP VIEW insta_id.shards, insta_id.pending_migrations, insta_id.guard_stats, insta_id.guard_stats_total;
DROP FUNCTION insta_id._guard_stats_total();
REVOKE ALL ON insta_id.shard_registry, insta_id.migrations, insta_id.applied_migrations FROM PUBLIC;
ALTER TABLE insta_id.shard_registry SET SCHEMA insta_id_admin;
ALTER TABLE insta_id.migrations SET SCHEMA insta_id_admin;
ALTER TABLE insta_id.applied_migrations SET SCHEMA insta_id_admin;

-- Each shard's template. Shards that have migrations of exactly one template
-- were made from it; the others keep NULL: every template's migrations
-- reach them, as before 0.9.0 (set it: UPDATE insta_id_admin.shard_registry).
ALTER TABLE insta_id_admin.shard_registry ADD COLUMN template_schema name;
COMMENT ON TABLE insta_id_admin.shard_registry IS
'Logical shards of this database: shard id, schema and template. Dumped by pg_dump with the database.';
UPDATE insta_id_admin.shard_registry r SET template_schema = t.template_schema
FROM (SELECT a.schema_name, min(m.template_schema) AS template_schema
      FROM insta_id_admin.applied_migrations a JOIN insta_id_admin.migrations m ON m.name = a.migration
      GROUP BY a.schema_name HAVING count(DISTINCT m.template_schema) = 1) t
WHERE t.schema_name = r.schema_name;

-- Their bodies name the tables in their new schema.
CREATE OR REPLACE FUNCTION insta_id._migrations_of(nsp name)
RETURNS jsonb
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(a.migration ORDER BY a.migration), '[]')
    FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp
$$;

CREATE OR REPLACE FUNCTION insta_id._create_shard_batch(lo int, hi int, plan jsonb)
RETURNS int
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    made int := 0;
BEGIN
    FOR shard IN lo..hi LOOP
        CONTINUE WHEN EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.shard_id = shard);
        PERFORM insta_id._copy_planned(plan, insta_id.create_shard(shard), shard);
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

COMMENT ON FUNCTION insta_id._guard_stats() IS 'The rows of insta_id.guard_stats()';
COMMENT ON FUNCTION insta_id.guard_stats_reset() IS
'Zeroes the counts of insta_id.guard_stats() and guard_stats_total() (not what the guard remembers against duplicates); superuser unless granted';

-- No caller since 0.6.0.
DROP FUNCTION insta_id._copy_template(name, name, int);

-- A schema name given as text: refused rather than cut to a name PostgreSQL
-- would keep (63 bytes), which could be another schema, or empty.
CREATE OR REPLACE FUNCTION insta_id._check_name(schema_name text)
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

-- The compiled half of the helpers (src/ddl.rs): statements run in a
-- schema as a given role in a security-restricted operation; a stored list
-- setting read as PostgreSQL reads it; whether a body names a schema.
CREATE OR REPLACE FUNCTION insta_id._run_in_schema(nsp name, run_as regrole, statements text[])
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_run_in_schema';

CREATE OR REPLACE FUNCTION insta_id._identifier_list(list text)
RETURNS text[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_identifier_list';

CREATE OR REPLACE FUNCTION insta_id._names_schema(body text, schema name)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_names_schema';

-- Who runs a schema's statements (docs/shards.md, "Privileges"): the one
-- role that owns the objects in it, so that the code those statements reach
-- (triggers, CHECKs, defaults, index expressions, functions called by views)
-- runs with its owner's rights and no one else's. A statement written
-- against a whole schema (a migration) cannot be split by owner, so a schema
-- whose objects have several owners is refused, naming them: one owner's
-- code would otherwise run with another's rights. So is code elsewhere that
-- the schema's objects and their parts (triggers, constraints, defaults,
-- indexes, policies, rules) use, when a role other than that one and not a
-- superuser owns it: a trigger function attached by a role with TRIGGER on a
-- table, a CHECK calling another role's function, a column of its domain.
-- (Calls inside function bodies are text, not dependencies: not seen.) The
-- schema's own owner does not count (a schema holds no code); an empty
-- schema is run by it. Objects are found through their dependency on the
-- schema (indexed), their owners in their own catalogs.
CREATE FUNCTION insta_id._object_owner(classid oid, objid oid)
RETURNS oid
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE classid
        WHEN 'pg_class'::regclass THEN (SELECT c.relowner FROM pg_class c WHERE c.oid = objid)
        WHEN 'pg_proc'::regclass THEN (SELECT p.proowner FROM pg_proc p WHERE p.oid = objid)
        WHEN 'pg_type'::regclass THEN (SELECT y.typowner FROM pg_type y WHERE y.oid = objid)
        WHEN 'pg_collation'::regclass THEN (SELECT c.collowner FROM pg_collation c WHERE c.oid = objid)
        WHEN 'pg_conversion'::regclass THEN (SELECT c.conowner FROM pg_conversion c WHERE c.oid = objid)
        WHEN 'pg_operator'::regclass THEN (SELECT o.oprowner FROM pg_operator o WHERE o.oid = objid)
        WHEN 'pg_opclass'::regclass THEN (SELECT o.opcowner FROM pg_opclass o WHERE o.oid = objid)
        WHEN 'pg_opfamily'::regclass THEN (SELECT o.opfowner FROM pg_opfamily o WHERE o.oid = objid)
        WHEN 'pg_ts_config'::regclass THEN (SELECT c.cfgowner FROM pg_ts_config c WHERE c.oid = objid)
        WHEN 'pg_ts_dict'::regclass THEN (SELECT d.dictowner FROM pg_ts_dict d WHERE d.oid = objid)
        WHEN 'pg_statistic_ext'::regclass THEN (SELECT s.stxowner FROM pg_statistic_ext s WHERE s.oid = objid)
        -- (text search parsers and templates have no owner: a superuser's C code)
        END
$$;

CREATE FUNCTION insta_id._code_owner(nsp name)
RETURNS regrole
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp_oid oid;
    schema_owner regrole;
    owners regrole[];
    listing text;
BEGIN
    SELECT n.oid, n.nspowner::regrole INTO nsp_oid, schema_owner FROM pg_namespace n WHERE n.nspname = nsp;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schema % does not exist', quote_ident(nsp) USING ERRCODE = 'invalid_schema_name';
    END IF;
    WITH inside AS (
        SELECT d.classid, d.objid FROM pg_depend d
        WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = nsp_oid AND d.refobjsubid = 0 AND d.deptype = 'n'),
    parts AS (
        SELECT i.classid, i.objid FROM inside i
        UNION
        SELECT d.classid, d.objid FROM inside i
        JOIN pg_depend d ON d.refclassid = i.classid AND d.refobjid = i.objid AND d.deptype IN ('a', 'i')
        WHERE d.classid IN ('pg_trigger'::regclass, 'pg_constraint'::regclass, 'pg_attrdef'::regclass, 'pg_policy'::regclass,
                            'pg_rewrite'::regclass, 'pg_class'::regclass, 'pg_statistic_ext'::regclass)),
    used AS (
        SELECT DISTINCT d.refclassid AS classid, d.refobjid AS objid FROM parts p
        JOIN pg_depend d ON d.classid = p.classid AND d.objid = p.objid
        WHERE d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass, 'pg_opclass'::regclass, 'pg_type'::regclass)
          AND (d.refclassid <> 'pg_type'::regclass OR (SELECT y.typtype FROM pg_type y WHERE y.oid = d.refobjid) = 'd')
          AND NOT EXISTS (SELECT FROM inside i WHERE i.classid = d.refclassid AND i.objid = d.refobjid)),
    o AS (
        SELECT i.classid, i.objid, insta_id._object_owner(i.classid, i.objid)::regrole AS owner,
               pg_describe_object(i.classid, i.objid, 0) AS what
        FROM inside i
        UNION ALL
        SELECT u.classid, u.objid, insta_id._object_owner(u.classid, u.objid)::regrole,
               pg_describe_object(u.classid, u.objid, 0) || ' (used by its objects)'
        FROM used u
        WHERE NOT coalesce((SELECT r.rolsuper FROM pg_roles r WHERE r.oid = insta_id._object_owner(u.classid, u.objid)), true))
    SELECT array_agg(DISTINCT o.owner ORDER BY o.owner) FILTER (WHERE o.owner IS NOT NULL),
           -- (the first five of each owner's, in name order, and how many more)
           (SELECT string_agg(format('%s: %s%s', w.owner, array_to_string(w.objects[1:5], ', '),
                                     CASE WHEN cardinality(w.objects) > 5 THEN format(' and %s more', cardinality(w.objects) - 5) END),
                              '; ' ORDER BY w.owner::text)
            FROM (SELECT o2.owner, array_agg(o2.what ORDER BY o2.what) AS objects
                  FROM o o2 WHERE o2.owner IS NOT NULL GROUP BY o2.owner) w)
    INTO owners, listing FROM o;
    IF coalesce(cardinality(owners), 0) = 0 THEN
        RETURN schema_owner;
    ELSIF cardinality(owners) = 1 THEN
        RETURN owners[1];
    END IF;
    RAISE EXCEPTION 'the objects of schema % have % owners', quote_ident(nsp), cardinality(owners)
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = format('Owned by %s.', listing),
              HINT = format('insta_id runs a schema''s statements as the one role that owns its objects, so that no owner''s code runs with another''s rights. Give them to one role (ALTER ... OWNER TO, or REASSIGN OWNED BY ... TO ...); schema %s itself may stay another role''s.', quote_ident(nsp));
END
$$;
REVOKE ALL ON FUNCTION insta_id._object_owner(oid, oid), insta_id._code_owner(name) FROM PUBLIC;

-- A definition as PostgreSQL's deparsers write it with schema nsp first on
-- search_path, so that nsp's own objects come out unqualified (run in a
-- copy, they name the copy's). Only pg_catalog's deparsers run while nsp is
-- on the path, called by qualified name with exact argument types. A view
-- is deparsed with pg_catalog first instead: pg_get_viewdef runs a query of
-- its own on pg_rewrite with unqualified = operators, and with nsp first an
-- operator of nsp's owner would run as the caller (tests/pg_regress
-- 13_hostile found it). kind: function, identity (arguments), view, index,
-- constraint, trigger, statistics, expr (node of relation obj), type (obj
-- with typmod n), collation.
CREATE OR REPLACE FUNCTION insta_id._deparse(nsp name, kind text, obj oid, node pg_node_tree DEFAULT NULL, n int DEFAULT -1)
RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    path text := format(CASE kind WHEN 'view' THEN 'pg_catalog, %I, pg_temp' ELSE '%I, pg_catalog, pg_temp' END, nsp);
    result text;
BEGIN
    IF obj IS NULL OR (kind = 'expr' AND node IS NULL) THEN
        RETURN NULL;
    END IF;
    -- (each kind is compared before the path changes: = is an operator too)
    IF kind = 'function' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_functiondef(obj);
    ELSIF kind = 'identity' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_function_identity_arguments(obj);
    ELSIF kind = 'view' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_viewdef(obj);
    ELSIF kind = 'index' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_indexdef(obj, 0, true);
    ELSIF kind = 'constraint' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_constraintdef(obj, true);
    ELSIF kind = 'trigger' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_triggerdef(obj, true);
    ELSIF kind = 'statistics' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_statisticsobjdef(obj);
    ELSIF kind = 'expr' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.pg_get_expr(node, obj, true);
    ELSIF kind = 'type' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := pg_catalog.format_type(obj, n);
    ELSIF kind = 'collation' THEN
        PERFORM pg_catalog.set_config('search_path', path, true);
        result := obj::pg_catalog.regcollation::pg_catalog.text;
    ELSE
        RAISE EXCEPTION 'unknown kind %', kind USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    RETURN result;
END
$$;

-- Storage parameters as written in WITH (...) / SET (...), each name and
-- value requoted (never the catalog's text pasted).
CREATE OR REPLACE FUNCTION insta_id._options(options text[])
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT string_agg(format('%s = %L', (SELECT string_agg(quote_ident(p), '.') FROM unnest(string_to_array(split_part(o, '=', 1), '.')) p),
                             substr(o, strpos(o, '=') + 1)), ', ')
    FROM unnest(options) o
$$;

-- A deparsed CREATE statement whose object name the deparser always
-- qualifies (CREATE OR REPLACE FUNCTION s.f(...), CREATE STATISTICS s.x ...)
-- as CREATE <kind> <name> ... without the schema. The head is compared with
-- what it must be, never assumed.
CREATE OR REPLACE FUNCTION insta_id._unqualified_create(ddl text, head text, nsp name, object name)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    qualified text := format('%s %I.%I', head, nsp, object);
BEGIN
    IF left(ddl, length(qualified)) <> qualified THEN
        RAISE EXCEPTION 'unexpected definition of %: %', qualified, left(ddl, 200) USING ERRCODE = 'internal_error';
    END IF;
    RETURN format('%s %I', regexp_replace(head, '^CREATE OR REPLACE ', 'CREATE '), object) || substr(ddl, length(qualified) + 1);
END
$$;

-- A new sequence for column col of table nsp.tblname, named like serial's
-- (<table>_<col>_seq, made unique if taken), with the given CACHE: 32 with
-- the shared guard, so each session takes 32 values at a time instead of
-- touching the sequence's page (and WAL) per ID; the guard keeps IDs unique
-- whatever order the values come in. With the per-session guard a session
-- holding old cached values could repeat another session's ID, so 1 there
-- (docs/shards.md).
CREATE OR REPLACE FUNCTION insta_id._sequence_name(nsp name, tblname name, col name)
RETURNS name
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    base text := tblname || '_' || col;
    seq_name text;
BEGIN
    -- Cut by bytes, whole characters, under the 63 bytes of a name: cut by
    -- characters, a multibyte name kept its full length, PostgreSQL cut the
    -- suffix off, and the loop below never ended.
    WHILE octet_length(base) > 59 LOOP
        base := left(base, -1);
    END LOOP;
    seq_name := base || '_seq';
    -- to_regclass looks the name up in its schema; a join on pg_class by name
    -- alone would walk every shard's relation of that name.
    WHILE to_regclass(format('%I.%I', nsp, seq_name)) IS NOT NULL LOOP
        WHILE octet_length(base) > 52 LOOP
            base := left(base, -1);
        END LOOP;
        seq_name := base || '_' || substr(md5(random()::text), 1, 6) || '_seq';
    END LOOP;
    RETURN seq_name;
END
$$;

CREATE OR REPLACE FUNCTION insta_id.create_shard(shard_id int, schema_name text DEFAULT NULL)
RETURNS name
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    taken name;
BEGIN
    IF create_shard.shard_id IS NULL THEN
        RAISE EXCEPTION 'shard id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM insta_id._check_shard_id(create_shard.shard_id);
    PERFORM insta_id._check_name(create_shard.schema_name);
    nsp := coalesce(create_shard.schema_name, 'insta' || create_shard.shard_id);
    SELECT r.schema_name INTO taken FROM insta_id_admin.shard_registry r WHERE r.shard_id = create_shard.shard_id;
    IF FOUND THEN
        RAISE EXCEPTION 'shard % already exists', create_shard.shard_id
            USING ERRCODE = 'unique_violation', DETAIL = format('Its schema is %I.', taken);
    END IF;
    IF EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.schema_name = nsp)
       OR EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = nsp) THEN
        RAISE EXCEPTION 'schema % already exists', quote_ident(nsp)
            USING ERRCODE = 'duplicate_schema',
                  HINT = 'To register a schema restored from another server, use insta_id.adopt_shard.';
    END IF;
    EXECUTE format('CREATE SCHEMA %I', nsp);
    INSERT INTO insta_id_admin.shard_registry (shard_id, schema_name) VALUES (create_shard.shard_id, nsp);
    RETURN nsp;
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

-- Checks the arguments of create_shards and create_shards_in_batches, and
-- the template, before any shard is made.
CREATE OR REPLACE FUNCTION insta_id._check_shard_range(first_shard int, last_shard int, template_schema text)
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

-- shard_drift takes a range of shards (0.9.0): a new signature.
DROP FUNCTION insta_id.shard_drift(text);
-- Which registered shards differ from a template, and how: one row per
-- difference (missing, extra, or the shard's detail beside the template's).
-- Empty right after create_shards and after a change applied to the template
-- and every shard alike. All the template's shards at once by default, or
-- those numbered first_shard to last_shard. Tables, columns, indexes and
-- the rest are read from the catalogs without locks; a view is deparsed
-- under a lock on it and on what it reads, held to the end of the
-- transaction, so thousands of shards with views may need more locks than
-- the server's lock table holds: then 54000, and a hint giving ranges that
-- fit. PARALLEL UNSAFE: it catches that error (a subtransaction).
CREATE FUNCTION insta_id.shard_drift(template_schema text, first_shard int DEFAULT 0, last_shard int DEFAULT 8191)
RETURNS TABLE (shard_id int, schema_name name, object text, difference text)
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tmpl oid;
    locks_per_shard bigint;
    fit bigint;
BEGIN
    PERFORM insta_id._check_shard_range_bounds(first_shard, last_shard);
    tmpl := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = template_schema);
    IF tmpl IS NULL THEN
        RAISE EXCEPTION 'template schema % does not exist', quote_ident(template_schema)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    BEGIN
        RETURN QUERY
        -- The template's shards (and those of no recorded template), as migrate reaches them.
        WITH shards AS (SELECT r.shard_id, r.schema_name, n.oid FROM insta_id_admin.shard_registry r
                        LEFT JOIN pg_namespace n ON n.nspname = r.schema_name
                        WHERE (r.template_schema IS NULL OR r.template_schema = shard_drift.template_schema)
                          AND r.shard_id BETWEEN first_shard AND last_shard),
        d AS (SELECT * FROM insta_id._describe_schemas(array_append(ARRAY(SELECT oid FROM shards WHERE oid IS NOT NULL), tmpl))),
        -- The template's rows, picked out once: with the registry's
        -- statistics from before the last thousands of shards, the planner
        -- otherwise filtered all of d once per shard (66 s at 8192).
        template_rows AS MATERIALIZED (SELECT d.object, d.detail FROM d WHERE d.nsp = tmpl),
        expected AS (SELECT s.shard_id, s.schema_name, t.object, t.detail FROM shards s, template_rows t
                     WHERE s.oid IS NOT NULL),
        actual AS (SELECT s.shard_id, s.schema_name, d.object, d.detail FROM shards s JOIN d ON d.nsp = s.oid)
        SELECT coalesce(e.shard_id, a.shard_id), coalesce(e.schema_name, a.schema_name), coalesce(e.object, a.object),
               CASE WHEN a.object IS NULL THEN 'missing: ' || e.detail
                    WHEN e.object IS NULL THEN 'extra: ' || a.detail
                    ELSE format('%s, template: %s', a.detail, e.detail) END
        FROM expected e FULL JOIN actual a ON a.shard_id = e.shard_id AND a.object = e.object
        WHERE a.detail IS DISTINCT FROM e.detail
        UNION ALL
        SELECT s.shard_id, s.schema_name, 'schema', 'missing: the schema does not exist' FROM shards s WHERE s.oid IS NULL
        ORDER BY 1, 3;
    EXCEPTION WHEN out_of_memory THEN
        -- What a shard's views lock: each view and each relation of the
        -- template one reads.
        SELECT count(DISTINCT x.rel) INTO locks_per_shard
        FROM (SELECT c.oid AS rel FROM pg_class c WHERE c.relnamespace = tmpl AND c.relkind IN ('v', 'm')
              UNION ALL
              SELECT d.refobjid FROM pg_class c
              JOIN pg_rewrite w ON w.ev_class = c.oid
              JOIN pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = w.oid
                              AND d.refclassid = 'pg_catalog.pg_class'::regclass
              JOIN pg_class t ON t.oid = d.refobjid AND t.relnamespace = tmpl
              WHERE c.relnamespace = tmpl AND c.relkind IN ('v', 'm')) x;
        fit := greatest(insta_id._lock_table_capacity() / 2 / greatest(locks_per_shard, 1), 1);
        RAISE EXCEPTION 'comparing shards % to % with template % needs more locks than the server''s lock table holds',
                        first_shard, last_shard, quote_ident(template_schema)
            USING ERRCODE = 'program_limit_exceeded',
                  DETAIL = format('Each shard''s views are deparsed under a lock on them and on what they read (%s locks a shard), held until the transaction ends; the lock table holds about %s.',
                                  locks_per_shard, insta_id._lock_table_capacity()),
                  HINT = format('Compare ranges of about %s shards, each in its own transaction: SELECT * FROM insta_id.shard_drift(%L, %s, %s); and so on.',
                                fit, template_schema, first_shard, least(first_shard + fit - 1, last_shard));
    END;
END
$$;
COMMENT ON FUNCTION insta_id.shard_drift(text, int, int) IS
'Which registered shards (all, or first_shard to last_shard) differ from the template schema, and how (one row per difference)';

-- What schemas hold, as (object, detail) pairs comparable across shards: the
-- schema's own name, and next_id's shard number and sequence in a default,
-- written as placeholders. Tables, views, their columns (type, NOT NULL,
-- identity, generated, default, collation), indexes, constraints, triggers,
-- policies and row-level security, replica identity, storage options,
-- statistics objects, functions and procedures, enum, domain and composite
-- types, owners, and grants on the schema, its tables, functions and
-- types. For many schemas at once: one pass over each catalog (pg_class has
-- no index on the schema alone).
-- Longer than a screen: one SQL statement, a UNION ALL branch per kind of
-- object, so each catalog is read once for all schemas; the branches are
-- independent and each is short.
-- PARALLEL RESTRICTED: pg_get_viewdef is. It is also the one deparser here
-- that locks (the view and the relations it reads, until the transaction
-- ends): see shard_drift.
CREATE OR REPLACE FUNCTION insta_id._describe_schemas(nsps oid[])
RETURNS TABLE (nsp oid, object text, detail text)
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    -- The schema's name, as a pattern matching it only where a name starts
    -- (schema t must not turn events_rest.at into events_res<schema>.at).
    WITH s AS (SELECT n.oid, '(^|[^[:alnum:]_$"])' || regexp_replace(quote_ident(n.nspname) || '.', '([^[:alnum:]_])', '\\\1', 'g') AS prefix
               FROM pg_namespace n WHERE n.oid = ANY (nsps)),
    rel AS (SELECT c.oid, c.relnamespace, c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relowner,
                   c.relforcerowsecurity, c.relreplident, c.relacl, c.reloptions, s.prefix
            FROM pg_class c JOIN s ON s.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')),
    raw (nsp, prefix, object, detail) AS (
        SELECT s.oid, s.prefix, 'schema', coalesce((SELECT string_agg(format('%s %s', coalesce(g.rolname, 'PUBLIC'), a.privilege_type), ', ' ORDER BY 1)
                                       FROM pg_namespace n, aclexplode(n.nspacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                                       WHERE n.oid = s.oid AND a.grantee <> n.nspowner), 'no grants')
        FROM s
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('%s %I', CASE r.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table'
                   WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' ELSE 'foreign table' END, r.relname),
               concat_ws('; ', 'owner ' || r.relowner::regrole::text, CASE r.relpersistence WHEN 'u' THEN 'unlogged' END,
                         CASE WHEN r.relrowsecurity THEN 'row level security' END,
                         CASE WHEN r.relforcerowsecurity THEN 'forced' END,
                         'replica identity ' || r.relreplident::text,
                         'options ' || array_to_string(r.reloptions, ','),
                         'grants ' || (SELECT string_agg(format('%s %s', coalesce(g.rolname, 'PUBLIC'), a.privilege_type), ', ' ORDER BY 1)
                                       FROM aclexplode(r.relacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                                       WHERE a.grantee <> (SELECT relowner FROM pg_class WHERE oid = r.oid)),
                         CASE WHEN r.relkind IN ('v', 'm') THEN 'definition ' || pg_get_viewdef(r.oid) END)
        FROM rel r
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('column %I.%I', r.relname, a.attname),
               concat_ws(' ', format_type(a.atttypid, a.atttypmod),
                         CASE WHEN a.attnotnull THEN 'NOT NULL' END,
                         CASE WHEN a.attidentity <> '' THEN 'identity ' || a.attidentity::text END,
                         CASE WHEN a.attgenerated <> '' THEN 'generated' END,
                         'DEFAULT ' || regexp_replace(pg_get_expr(d.adbin, d.adrelid),
                                        '^insta_id\.next_id\(\d+, ''[^'']*''::regclass\)$', 'insta_id.next_id(<shard>, <its sequence>)'),
                         'COLLATE ' || nullif(a.attcollation, (SELECT typcollation FROM pg_type WHERE oid = a.atttypid))::regcollation::text)
        FROM rel r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('index %I', i.relname), pg_get_indexdef(x.indexrelid)
        FROM rel r JOIN pg_index x ON x.indrelid = r.oid JOIN pg_class i ON i.oid = x.indexrelid
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('constraint %I on %I', k.conname, r.relname), pg_get_constraintdef(k.oid)
        FROM rel r JOIN pg_constraint k ON k.conrelid = r.oid
        WHERE k.contype <> 'n'
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('trigger %I on %I', t.tgname, r.relname), pg_get_triggerdef(t.oid)
        FROM rel r JOIN pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('statistics %I on %I', x.stxname, r.relname),
               regexp_replace(pg_get_statisticsobjdef(x.oid), '^CREATE STATISTICS \S+ ', 'CREATE STATISTICS ')
        FROM rel r JOIN pg_statistic_ext x ON x.stxrelid = r.oid
        UNION ALL
        SELECT y.typnamespace, s.prefix, format('type %I', y.typname),
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
                   'grants ' || (SELECT string_agg(format('%s %s', coalesce(g.rolname, 'PUBLIC'), a.privilege_type), ', ' ORDER BY 1)
                                 FROM aclexplode(y.typacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee WHERE a.grantee <> y.typowner))
        FROM s JOIN pg_type y ON y.typnamespace = s.oid
        WHERE y.typtype IN ('e', 'd') OR (y.typtype = 'c' AND (SELECT c.relkind FROM pg_class c WHERE c.oid = y.typrelid) = 'c')
        UNION ALL
        -- (its search_path setting, if it names the schema, as the placeholder too)
        SELECT p.pronamespace, s.prefix, format('%s %I(%s)', CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END,
                   p.proname, pg_get_function_identity_arguments(p.oid)),
               concat_ws('; ', 'owner ' || p.proowner::regrole::text,
                         'grants ' || (SELECT string_agg(format('%s %s', coalesce(g.rolname, 'PUBLIC'), a.privilege_type), ', ' ORDER BY 1)
                                       FROM aclexplode(p.proacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                                       WHERE a.grantee <> p.proowner),
                         replace(pg_get_functiondef(p.oid), 'search_path TO ' || quote_literal(quote_ident(n.nspname)),
                                 'search_path TO ''<schema>'''))
        FROM s JOIN pg_proc p ON p.pronamespace = s.oid JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE p.prokind <> 'a'
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('policy %I on %I', p.polname, r.relname),
               concat_ws(' ', CASE WHEN p.polpermissive THEN 'permissive' ELSE 'restrictive' END, p.polcmd::text,
                         (SELECT string_agg(CASE WHEN o = 0 THEN 'PUBLIC' ELSE o::regrole::text END, ',' ORDER BY 1) FROM unnest(p.polroles) o),
                         'USING ' || pg_get_expr(p.polqual, p.polrelid), 'CHECK ' || pg_get_expr(p.polwithcheck, p.polrelid))
        FROM rel r JOIN pg_policy p ON p.polrelid = r.oid)
    SELECT nsp, regexp_replace(object, prefix, '\1<schema>.', 'g'), regexp_replace(detail, prefix, '\1<schema>.', 'g') FROM raw
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
        PERFORM insta_id._copy_planned(plan, insta_id.create_shard(first_shard), first_shard);
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

-- A copy's sequences are made by their owner (_copy_planned): no longer a function.
DROP FUNCTION insta_id._new_sequence(name, name, name, int);

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

-- Checks once, before any shard is made, that template can be copied.
CREATE OR REPLACE FUNCTION insta_id._check_template(template name)
RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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
    SELECT c.relname INTO bad
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attrdef d ON d.adrelid = c.oid
    JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE n.oid = tmpl AND c.relkind IN ('r', 'p')
      AND EXISTS (SELECT FROM pg_depend dep JOIN pg_class s ON s.oid = dep.refobjid AND s.relkind = 'S'
                  WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                    AND dep.refclassid = 'pg_class'::regclass AND dep.deptype = 'n')
      AND insta_id._next_id_default_shard(c.oid, a.attname) IS NULL
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
              -- a sequence not made for a column (next_id's, identity's)
              OR (c.relkind = 'S' AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                      AND d.objid = c.oid AND d.refobjsubid > 0 AND d.deptype IN ('a', 'i'))))
        UNION ALL
        -- A partition and its partitioned table are copied together.
        SELECT format('partition %s of %s (one of them outside the template)', h.inhrelid::regclass, h.inhparent::regclass)
        FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid JOIN pg_class p ON p.oid = h.inhparent
        JOIN pg_namespace n ON n.oid = tmpl
        WHERE c.relkind IN ('r', 'p', 'f') AND (c.relnamespace = n.oid) <> (p.relnamespace = n.oid)
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
        SELECT DISTINCT format('generated column %I.%I.%I (uses %s)', template, c.relname, a.attname,
                   CASE d.refclassid WHEN 'pg_proc'::regclass THEN format('function %s', d.refobjid::regprocedure)
                        ELSE format('type %s', d.refobjid::regtype) END)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attgenerated <> ''
        JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
        JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
        WHERE n.oid = tmpl AND c.relkind IN ('r', 'p')
          AND ((d.refclassid = 'pg_proc'::regclass AND d.refobjid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = n.oid))
            OR (d.refclassid = 'pg_type'::regclass AND d.refobjid IN (SELECT y.oid FROM pg_type y WHERE y.typnamespace = n.oid)))
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

-- What a copy of template holds besides its tables: its functions and
-- procedures, views and materialized views (each created after what it
-- uses), their indexes, grants and comments; then triggers, row-level
-- security and policies on its tables and views; then ownership as in the
-- template (tables, all of these; the schema's as "schema_owner"). As statements with every name
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
AS $$
DECLARE
    tmpl oid := (SELECT n.oid FROM pg_namespace n WHERE n.nspname = template);
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
               -- which PostgreSQL's REFRESH does as its owner, after the copy)
               jsonb_build_array(format('CREATE %s %I%s AS %s%s', CASE c.relkind WHEN 'v' THEN 'VIEW' ELSE 'MATERIALIZED VIEW' END,
                   c.relname, ' WITH (' || insta_id._options(c.reloptions) || ')', rtrim(insta_id._deparse(template, 'view', c.oid), ';'),
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
        FROM pg_class c WHERE c.relnamespace = tmpl AND c.relkind IN ('v', 'm'))
    SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object('key', o.key, 'sort', o.sort,
               'uses', to_jsonb(ARRAY(SELECT u FROM unnest(o.uses) u WHERE u IN (SELECT key FROM obj) AND u <> o.key)),
               'sql', o.ddl
                      || insta_id._grant_statements(insta_id._grants(o.acl, o.owner),
                             CASE WHEN o.kind LIKE '%VIEW' THEN 'TABLE' ELSE o.kind END || ' ' || o.sig, '', o.acl IS NOT NULL)
                      || CASE WHEN o.comment IS NULL THEN '[]'::jsonb
                              ELSE jsonb_build_array(format('COMMENT ON %s %s IS %L', o.kind, o.sig, o.comment)) END,
               'path', CASE WHEN o.path @> '[null]' THEN jsonb_build_object('function', o.kind || ' ' || o.sig, 'search_path', o.path) END)))
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
            WHERE c.relnamespace = tmpl AND NOT t.tgisinternal AND t.tgparentid = 0
            UNION ALL
            SELECT 2, c.relname, t.tgname, format('ALTER TABLE %I %s TRIGGER %I', c.relname,
                       CASE t.tgenabled WHEN 'D' THEN 'DISABLE' WHEN 'R' THEN 'ENABLE REPLICA' ELSE 'ENABLE ALWAYS' END, t.tgname)
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            WHERE c.relnamespace = tmpl AND NOT t.tgisinternal AND t.tgenabled <> 'O'
            UNION ALL
            SELECT 3, c.relname, t.tgname, format('COMMENT ON TRIGGER %I ON %I IS %L', t.tgname, c.relname, d.description)
            FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
            JOIN pg_description d ON d.objoid = t.oid AND d.classoid = 'pg_trigger'::regclass
            WHERE c.relnamespace = tmpl
            UNION ALL
            SELECT 4, c.relname, '', format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', c.relname)
            FROM pg_class c WHERE c.relnamespace = tmpl AND c.relrowsecurity
            UNION ALL
            SELECT 4, c.relname, '', format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', c.relname)
            FROM pg_class c WHERE c.relnamespace = tmpl AND c.relforcerowsecurity
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
            FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = tmpl) s), '[]'),
        -- Enum, composite and domain types, in creation order, with their
        -- constraints, grants and comments.
        'types', coalesce((
            SELECT jsonb_agg(stmt ORDER BY o, ord) FROM (
                SELECT y.oid AS o, 1 AS ord, CASE y.typtype
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
                                   ' DEFAULT ' || insta_id._deparse(template, 'expr', 0, y.typdefaultbin),
                                   CASE WHEN y.typnotnull THEN ' NOT NULL' ELSE '' END) END AS stmt
                FROM pg_type y LEFT JOIN pg_type b ON b.oid = y.typbasetype
                WHERE y.typnamespace = tmpl AND (y.typtype IN ('e', 'd')
                      OR (y.typtype = 'c' AND (SELECT c.relkind FROM pg_class c WHERE c.oid = y.typrelid) = 'c'))
                UNION ALL
                SELECT y.oid, 2, format('ALTER DOMAIN %I ADD CONSTRAINT %I %s', y.typname, k.conname, insta_id._deparse(template, 'constraint', k.oid))
                FROM pg_type y JOIN pg_constraint k ON k.contypid = y.oid AND k.contype = 'c'
                WHERE y.typnamespace = tmpl AND y.typtype = 'd'
                UNION ALL
                SELECT y.oid, 3, g
                FROM pg_type y, jsonb_array_elements_text(insta_id._grant_statements(insta_id._grants(y.typacl, y.typowner),
                         CASE y.typtype WHEN 'd' THEN 'DOMAIN ' ELSE 'TYPE ' END || quote_ident(y.typname), '', true)) g
                WHERE y.typnamespace = tmpl AND y.typtype IN ('e', 'd', 'c') AND y.typacl IS NOT NULL
                UNION ALL
                SELECT y.oid, 4, format('COMMENT ON %s %I IS %L', CASE y.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, y.typname, d.description)
                FROM pg_type y JOIN pg_description d ON d.objoid = y.oid AND d.classoid = 'pg_type'::regclass
                WHERE y.typnamespace = tmpl AND y.typtype IN ('e', 'd', 'c')) s), '[]'),
        -- Materialized views the copy fills (REFRESH) once it is complete.
        'populated', coalesce((SELECT jsonb_agg(c.relname ORDER BY c.oid) FROM pg_class c
                               WHERE c.relnamespace = tmpl AND c.relkind = 'm' AND c.relispopulated), '[]'),
        -- Tables LIKE would leave tied to the template: a column of one of its
        -- types, a default or CHECK using one of its types or functions.
        -- Their copies are made without defaults and CHECKs, the columns
        -- given the copy's types ('retype'), and once the copy's functions
        -- exist, the defaults and CHECKs deparsed ('late').
        'deparsed_tables', coalesce((SELECT jsonb_agg(c.relname ORDER BY c.relname) FROM pg_class c
                                     WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p') AND insta_id._tied_to_schema(c.oid)), '[]'),
        'retype', coalesce((
            SELECT jsonb_object_agg(relname, stmts) FROM (
            SELECT c.relname, jsonb_agg(format('ALTER TABLE %I ALTER COLUMN %I TYPE %s%s USING NULL', c.relname, a.attname,
                                    insta_id._deparse(template, 'type', a.atttypid, NULL, a.atttypmod),
                                    ' COLLATE ' || insta_id._deparse(template, 'collation', nullif(a.attcollation, y.typcollation))) ORDER BY a.attnum) AS stmts
            FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            JOIN pg_type y ON y.oid = a.atttypid LEFT JOIN pg_type e ON e.oid = y.typelem AND y.typcategory = 'A'
            -- (a partition's follow its parent's)
            WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND tmpl IN (y.typnamespace, e.typnamespace)
            GROUP BY c.relname) r), '{}'),
        'late', coalesce((
            SELECT jsonb_agg(stmt ORDER BY rel, ord, name) FROM (
                SELECT c.relname AS rel, 1 AS ord, a.attname AS name,
                       format('ALTER TABLE %I ALTER COLUMN %I SET DEFAULT %s', c.relname, a.attname, insta_id._deparse(template, 'expr', d.adrelid, d.adbin)) AS stmt
                FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
                JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND insta_id._tied_to_schema(c.oid)
                  AND insta_id._next_id_default_shard(c.oid, a.attname) IS NULL
                UNION ALL
                SELECT c.relname, 2, k.conname, format('ALTER TABLE %I ADD CONSTRAINT %I %s', c.relname, k.conname, insta_id._deparse(template, 'constraint', k.oid))
                FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'c' AND k.conislocal
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p') AND (insta_id._tied_to_schema(c.oid) OR c.relispartition)
                UNION ALL
                -- Storage parameters (fillfactor, autovacuum_*), which LIKE leaves out.
                SELECT c.relname, 4, '', format('ALTER TABLE %I SET (%s)', c.relname, insta_id._options(c.reloptions))
                FROM pg_class c WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p') AND c.reloptions IS NOT NULL
                UNION ALL
                -- A partition is made without LIKE: its own comments.
                SELECT c.relname, 3, '', format('COMMENT ON TABLE %I IS %L', c.relname, d.description)
                FROM pg_class c JOIN pg_description d ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
                WHERE c.relnamespace = tmpl AND c.relispartition
                UNION ALL
                SELECT c.relname, 3, k.conname, format('COMMENT ON CONSTRAINT %I ON %I IS %L', k.conname, c.relname, d.description)
                FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'c'
                JOIN pg_description d ON d.objoid = k.oid AND d.classoid = 'pg_constraint'::regclass
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p') AND (insta_id._tied_to_schema(c.oid) OR c.relispartition)
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
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p')
                  AND NOT EXISTS (SELECT FROM pg_inherits h WHERE h.inhrelid = x.indexrelid)
                UNION ALL
                SELECT c.relname, 2, d.objoid, format('COMMENT ON INDEX %I IS %L', i.relname, d.description)
                FROM pg_class c JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid
                JOIN pg_description d ON d.objoid = i.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p')
                UNION ALL
                SELECT c.relname, 2, d.objoid, format('COMMENT ON CONSTRAINT %I ON %I IS %L', k.conname, c.relname, d.description)
                FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype IN ('p', 'u', 'x')
                JOIN pg_description d ON d.objoid = k.oid AND d.classoid = 'pg_constraint'::regclass
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p') AND k.conparentid = 0
                UNION ALL
                SELECT c.relname, 3, x.indexrelid, format('ALTER TABLE %I CLUSTER ON %I', c.relname, i.relname)
                FROM pg_class c JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid
                WHERE c.relnamespace = tmpl AND c.relkind = 'r' AND x.indisclustered
                UNION ALL
                -- CREATE STATISTICS <its schema>.name ON ... as CREATE STATISTICS name ON ...
                SELECT c.relname, 4, x.oid, insta_id._unqualified_create(insta_id._deparse(template, 'statistics', x.oid),
                           'CREATE STATISTICS', n.nspname, x.stxname)
                FROM pg_class c JOIN pg_statistic_ext x ON x.stxrelid = c.oid JOIN pg_namespace n ON n.oid = x.stxnamespace
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p')
                UNION ALL
                SELECT c.relname, 5, x.oid, format('COMMENT ON STATISTICS %I IS %L', x.stxname, d.description)
                FROM pg_class c JOIN pg_statistic_ext x ON x.stxrelid = c.oid
                JOIN pg_description d ON d.objoid = x.oid AND d.classoid = 'pg_statistic_ext'::regclass
                WHERE c.relnamespace = tmpl AND c.relkind IN ('r', 'p')) s), '[]'),
        'schema_comment', obj_description(tmpl, 'pg_namespace'),
        'schema_owner', (SELECT n.nspowner::regrole::text FROM pg_namespace n
                         WHERE n.oid = tmpl AND n.nspowner <> current_user::regrole),
        -- Who makes every object of a copy (refused here, 42501, when the
        -- template's objects have several owners).
        'code_owner', insta_id._code_owner(template)::text);
END
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
LANGUAGE sql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Partitioned tables before their partitions (which inherit the columns,
    -- defaults, next_id's included, and get the parent's indexes).
    WITH t AS (SELECT c.oid, c.relname, c.relacl, c.relowner, c.relreplident, c.relispartition, c.relpersistence,
                      CASE WHEN c.relispartition THEN (SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
                                                       WHERE h.inhrelid = c.oid) END AS parent,
                      CASE WHEN c.relispartition THEN pg_get_expr(c.relpartbound, c.oid) END AS bound,
                      CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END AS partition_by,
                      (SELECT count(*) FROM pg_partition_ancestors(c.oid)) AS depth
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = template AND c.relkind IN ('r', 'p'))
    SELECT jsonb_build_object(
        'template', template,
        'cache', CASE insta_id.guard_mode() WHEN 'shared' THEN 32 ELSE 1 END,
        'tables', coalesce((
            SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object('rel', t.relname,
                   'partition_of', t.parent, 'bound', t.bound, 'partition_by', t.partition_by,
                   'unlogged', CASE WHEN t.relpersistence = 'u' THEN true END,
                   'id_columns', coalesce((
                       SELECT jsonb_agg(jsonb_build_object('col', a.attname,
                                  'ready', a.atttypid = 'bigint'::regtype AND a.attnotnull,
                                  'sequence_grants', insta_id._grants(s.relacl, s.relowner)) ORDER BY a.attnum)
                       FROM pg_attribute a
                       LEFT JOIN pg_class s ON s.oid = pg_get_serial_sequence(format('%I.%I', template, t.relname), a.attname)::regclass
                       WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped AND NOT t.relispartition
                         AND insta_id._next_id_default_shard(t.oid, a.attname) IS NOT NULL), '[]'),
                   'grants', insta_id._grants(t.relacl, t.relowner),
                   'column_grants', coalesce((SELECT jsonb_agg(jsonb_build_object('col', a.attname, 'grants',
                                                  insta_id._grants(a.attacl, t.relowner)) ORDER BY a.attnum)
                                              FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attacl IS NOT NULL), '[]'),
                   'replica_identity', CASE t.relreplident WHEN 'f' THEN 'FULL' WHEN 'n' THEN 'NOTHING'
                                       WHEN 'i' THEN (SELECT format('USING INDEX %I', i.relname) FROM pg_index x
                                                      JOIN pg_class i ON i.oid = x.indexrelid
                                                      WHERE x.indrelid = t.oid AND x.indisreplident) END))
                   ORDER BY t.depth, t.relname)
            FROM t), '[]'),
        'schema_grants', (SELECT insta_id._grants(n.nspacl, n.nspowner) FROM pg_namespace n WHERE n.nspname = template),
        'migrations', insta_id._migrations_of(template),
        'extra', insta_id._template_objects(template),
        'foreign_keys', coalesce((
            SELECT jsonb_agg(jsonb_build_object('rel', t.relname, 'name', k.conname, 'def', pg_get_constraintdef(k.oid))
                   ORDER BY t.relname, k.conname)
            FROM pg_constraint k JOIN t ON t.oid = k.conrelid WHERE k.contype = 'f' AND k.conparentid = 0), '[]'))
$$;

-- Copies every table of a template into schema target, from the template's
-- plan: LIKE ... INCLUDING ALL, then each next_id column gets a sequence of
-- its own and shard's number, then the foreign keys, pointed at the copies
-- when they point into the template.
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
    -- Every statement below that makes or changes an object of the copy
    -- runs as this role, in a security-restricted operation with the copy's
    -- schema first on search_path (deparsed statements name the copy's
    -- objects unqualified), never under this function's own path.
    owner regrole := (plan->'extra'->>'code_owner')::regrole;
BEGIN
    -- The schema first, as the template's: its grants and owner, before
    -- anything is made in it (the owner of its objects may need its CREATE).
    PERFORM insta_id._grant(plan->'schema_grants', format('SCHEMA %I', target));
    IF extra->>'schema_comment' IS NOT NULL THEN
        EXECUTE format('COMMENT ON SCHEMA %I IS %L', target, extra->>'schema_comment');
    END IF;
    IF extra->>'schema_owner' IS NOT NULL THEN
        EXECUTE format('ALTER SCHEMA %I OWNER TO %s', target, extra->>'schema_owner');
    END IF;
    PERFORM insta_id._run_in_schema(target, owner, ARRAY(SELECT jsonb_array_elements_text(extra->'types')));
    FOR src IN SELECT jsonb_array_elements(plan->'tables') LOOP
        tbl := format('%I.%I', target, src->>'rel');
        -- Indexes and statistics objects are made below under the template's
        -- names (LIKE would name them afresh: my_pk would become t_pkey).
        -- Columns of the template's types get the copy's (before any partition exists).
        PERFORM insta_id._run_in_schema(target, owner, ARRAY[
            CASE WHEN src ? 'partition_of'
                 THEN format('CREATE TABLE %s PARTITION OF %I.%I %s%s', tbl, target, src->>'partition_of',
                             src->>'bound', ' PARTITION BY ' || (src->>'partition_by'))
                 ELSE format('CREATE %sTABLE %s (LIKE %I.%I INCLUDING ALL EXCLUDING INDEXES EXCLUDING STATISTICS%s)%s',
                             CASE WHEN (src->>'unlogged')::boolean THEN 'UNLOGGED ' ELSE '' END, tbl, template, src->>'rel',
                             CASE WHEN extra->'deparsed_tables' ? (src->>'rel') THEN ' EXCLUDING DEFAULTS EXCLUDING CONSTRAINTS' ELSE '' END,
                             ' PARTITION BY ' || (src->>'partition_by')) END]
            || ARRAY(SELECT jsonb_array_elements_text(extra->'retype'->(src->>'rel'))));
        FOR col IN SELECT jsonb_array_elements(src->'id_columns') LOOP
            IF (col->>'ready')::boolean THEN
                -- What add_id_column would do to the copy (bigint NOT NULL,
                -- empty), in three statements instead of seven.
                seq := format('%I.%I', target, insta_id._sequence_name(target, src->>'rel', col->>'col'));
                PERFORM insta_id._run_in_schema(target, owner, ARRAY[
                    format('CREATE SEQUENCE %s CACHE %s', seq, (plan->>'cache')::int),
                    format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT insta_id.next_id(%s, %L::pg_catalog.regclass)', tbl, col->>'col', shard, seq),
                    format('ALTER SEQUENCE %s OWNED BY %s.%I', seq, tbl, col->>'col')]);
            ELSE
                PERFORM insta_id._run_in_schema(target, owner, ARRAY[format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', tbl, col->>'col')]);
                -- (which runs its statements as the table's owner, this one)
                seq := insta_id.add_id_column(tbl::regclass, col->>'col', shard)::text;
            END IF;
            -- Writers of the template's table may use its sequence: the same here.
            PERFORM insta_id._run_in_schema(target, owner, ARRAY(SELECT jsonb_array_elements_text(
                insta_id._grant_statements(col->'sequence_grants', format('SEQUENCE %s', seq)))));
        END LOOP;
        PERFORM insta_id._run_in_schema(target, owner, ARRAY(
            SELECT jsonb_array_elements_text(insta_id._grant_statements(src->'grants', format('TABLE %s', tbl)))
            UNION ALL
            SELECT jsonb_array_elements_text(insta_id._grant_statements(c->'grants', format('TABLE %s', tbl), format(' (%I)', c->>'col')))
            FROM jsonb_array_elements(src->'column_grants') c));
    END LOOP;
    -- Functions, procedures and views, each after what it uses (a
    -- function's search_path naming the template names the copy instead);
    -- then defaults and CHECKs of the tables made without them (they may use
    -- the functions); indexes, primary key, unique and exclusion
    -- constraints, statistics objects, their comments; replica identities;
    -- foreign keys; triggers, row-level security, policies.
    PERFORM insta_id._run_in_schema(target, owner, ARRAY(
        SELECT x.statement FROM (
            SELECT o.ord, s.ord AS sub, s.statement
            FROM jsonb_array_elements(extra->'objects') WITH ORDINALITY o(obj, ord),
            LATERAL (SELECT e.ord, e.statement FROM jsonb_array_elements_text(o.obj->'sql') WITH ORDINALITY e(statement, ord)
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
                                          replace(e.fk->>'def', 'REFERENCES ' || quote_ident(template) || '.',
                                                                'REFERENCES ' || quote_ident(target) || '.'))
            FROM jsonb_array_elements(plan->'foreign_keys') WITH ORDINALITY e(fk, ord)
            UNION ALL
            SELECT 4e9 + e.ord, 0, e.statement FROM jsonb_array_elements_text(extra->'after') WITH ORDINALITY e(statement, ord)
            UNION ALL
            -- Materialized views populated in the template are filled last
            -- (PostgreSQL's REFRESH runs their query as their owner too).
            SELECT 5e9 + e.ord, 0, format('REFRESH MATERIALIZED VIEW %I.%I', target, e.m)
            FROM jsonb_array_elements_text(extra->'populated') WITH ORDINALITY e(m, ord)) x
        ORDER BY x.ord, x.sub));
    UPDATE insta_id_admin.shard_registry r SET template_schema = template WHERE r.shard_id = shard;
    -- A copy of the template as it is now has every migration the template
    -- has. (Only then is INSERT on the history needed.)
    IF plan->'migrations' <> '[]' THEN
        INSERT INTO insta_id_admin.applied_migrations (schema_name, migration)
        SELECT target, m FROM jsonb_array_elements_text(plan->'migrations') m;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION insta_id._check_owners(plan jsonb)
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

CREATE OR REPLACE FUNCTION insta_id.drop_shard(shard_id int, force boolean DEFAULT false)
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
    has_rows boolean;
    outside text;
BEGIN
    -- The registry row, locked: a migration of this shard (which holds it
    -- FOR SHARE) finishes first, and none starts meanwhile.
    SELECT r.schema_name INTO nsp FROM insta_id_admin.shard_registry r WHERE r.shard_id = drop_shard.shard_id FOR UPDATE;
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
            PERFORM insta_id._lock_object(d.classid, d.objid) FROM pg_depend d
            WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = nsp_oid AND d.refobjsubid = 0
              AND d.classid IN ('pg_class'::regclass, 'pg_type'::regclass, 'pg_proc'::regclass)
            ORDER BY d.classid, d.objid;
        END IF;
    END IF;
    IF nsp_oid IS NOT NULL THEN
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
            WHERE d.refclassid = 'pg_namespace'::regclass AND d.refobjid = nsp_oid AND d.refobjsubid = 0
            UNION
            SELECT y.classid, y.objid, y.objsubid FROM doomed x, LATERAL (
                SELECT d.classid, d.objid, d.objsubid FROM pg_depend d
                WHERE d.refclassid = x.classid AND d.refobjid = x.objid AND (x.objsubid = 0 OR d.refobjsubid = x.objsubid)
                UNION ALL
                SELECT d.refclassid, d.refobjid, 0 FROM pg_depend d
                WHERE d.classid = x.classid AND d.objid = x.objid AND d.deptype IN ('i', 'e')) y)
        SELECT string_agg(DISTINCT pg_describe_object(x.classid, x.objid, x.objsubid), ', '
                          ORDER BY pg_describe_object(x.classid, x.objid, x.objsubid)) INTO outside
        FROM doomed x
        -- (a part listed with its whole: a row type, an array type, a TOAST table)
        WHERE NOT EXISTS (SELECT FROM pg_depend p WHERE p.classid = x.classid AND p.objid = x.objid AND p.deptype = 'i')
          AND coalesce(CASE x.classid
                  -- (a TOAST table and its index: their table's schema)
                  WHEN 'pg_class'::regclass THEN (SELECT CASE WHEN c.relnamespace = 'pg_toast'::regnamespace
                                                              THEN (SELECT t.relnamespace FROM pg_class t
                                                                    WHERE t.reltoastrelid = coalesce((SELECT i.indrelid FROM pg_index i
                                                                                                      WHERE i.indexrelid = c.oid), c.oid))
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
                  END, 0) <> nsp_oid;
        IF outside IS NOT NULL THEN
            RAISE EXCEPTION 'objects outside shard % depend on it', drop_shard.shard_id
                USING ERRCODE = 'dependent_objects_still_exist',
                      DETAIL = format('Dropping schema %I would also drop: %s.', nsp, outside),
                      HINT = 'Drop or change them first; drop_shard drops the shard''s own objects only, with force too.';
        END IF;
        IF NOT coalesce(force, false) THEN
            FOR rel IN SELECT c.oid FROM pg_class c WHERE c.relnamespace = nsp_oid AND c.relkind IN ('r', 'p') ORDER BY c.relname LOOP
                -- Locked first: no row arrives between the check and the drop.
                EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', rel);
                EXECUTE format('SELECT EXISTS (SELECT FROM %s)', rel) INTO has_rows;
                IF has_rows THEN
                    RAISE EXCEPTION 'shard % still has rows in %', drop_shard.shard_id, rel
                        USING ERRCODE = 'object_not_in_prerequisite_state',
                              HINT = 'Use insta_id.drop_shard(shard_id, force => true) to drop it with its data.';
                END IF;
            END LOOP;
        END IF;
        -- (by its name as it is now: the schema locked is the one dropped)
        EXECUTE format('DROP SCHEMA %I CASCADE', (SELECT n.nspname FROM pg_namespace n WHERE n.oid = nsp_oid));
    END IF;
    DELETE FROM insta_id_admin.shard_registry r WHERE r.shard_id = drop_shard.shard_id;
    IF EXISTS (SELECT FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp) THEN
        DELETE FROM insta_id_admin.applied_migrations a WHERE a.schema_name = nsp;
    END IF;
END
$$;

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
    INSERT INTO insta_id_admin.shard_registry (shard_id, schema_name) VALUES (adopt_shard.shard_id, adopt_shard.schema_name);
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
BEGIN
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    PERFORM insta_id._check_shard_range(first_shard, last_shard, template_schema);
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

-- insta_id's own locks, the one place their keys are written. They are
-- taken by insta_id._lock (src/locks.rs): advisory locks of a form no SQL
-- caller can name (pg_locks: locktype 'advisory', classid = key, objid =
-- object, objsubid = 3), so that no role, with or without grants, can hold
-- one to stall insta_id (pg_advisory_lock is PUBLIC's; its keys have forms
-- 1 and 2). The key says whose lock it is:
--   _schema_lock_key(), 1768515633 ('iid1'), object 1: the migration
--     runner, in each of its transactions. Object 2: a template, exclusive
--     while a migration changes it, shared while shards are copied from it,
--     so a copy never mixes a template's tables before a migration with its
--     history after it.
--   _move_lock_key(), 1768515634 ('iid2'), object: a shard number. Held for
--     a session by lock_shard_for_move and by a move's finishers on the new
--     server (insta-id move); migrate tries it shared and skips the
--     shard when it cannot have it.
-- And a schema's own lock (_lock_schema), which every CREATE in the schema
-- holds shared: drop_shard's, so nothing arrives in a shard it checks, and
-- migrate's, so nothing arrives between its check of the owners and its
-- statements; and a shard's objects' (_lock_object), as DROP takes them.
-- The keys are literals (no search_path to set: nothing is resolved) and
-- inlined into their callers. Not PUBLIC's (privileges.sql).

CREATE FUNCTION insta_id._schema_lock_key()
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1768515633 $$;

CREATE FUNCTION insta_id._move_lock_key()
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1768515634 $$;

-- Takes insta_id's lock (key, object), shared or exclusive, for the
-- transaction or the session; without wait, returns false when another
-- process holds it. A session's are released by pg_advisory_unlock_all(),
-- _unlock (exclusive ones) and its end.
CREATE FUNCTION insta_id._lock(key int, object int, shared boolean, session boolean, wait boolean)
RETURNS boolean
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_lock';
CREATE FUNCTION insta_id._unlock(key int, object int)
RETURNS boolean
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_unlock';
CREATE FUNCTION insta_id._lock_schema(nsp oid)
RETURNS boolean
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_lock_schema';
CREATE FUNCTION insta_id._lock_object(classid oid, objid oid)
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_lock_object';

-- The process, other than this one, holding insta_id's lock (key, object):
-- the DETAIL of a refusal. Restricted: a parallel worker's pg_backend_pid()
-- is not the session's. (objsubid 3: src/locks.rs, LOCK_FORM.)
CREATE FUNCTION insta_id._lock_holder(key int, object int)
RETURNS int
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.pid FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
      AND l.classid = key::oid AND l.objid = object::oid AND l.objsubid = 3 AND l.granted AND l.pid <> pg_backend_pid()
    ORDER BY l.pid LIMIT 1
$$;

-- Taken by every copy from a template (see _schema_lock_key).
CREATE OR REPLACE FUNCTION insta_id._lock_template_shared()
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT insta_id._lock(insta_id._schema_lock_key(), 2, shared => true, session => false, wait => true) $$;
REVOKE ALL ON FUNCTION insta_id._lock(int, int, boolean, boolean, boolean), insta_id._unlock(int, int),
    insta_id._lock_schema(oid), insta_id._lock_object(oid, oid) FROM PUBLIC;

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

-- Read as functions, not views: what PUBLIC can name, it can lock (see
-- insta_id.shards()). A sequence of another database shows its OID only:
-- its name is in that database's catalog (and the same OID here may name
-- another relation).
CREATE FUNCTION insta_id.guard_stats(
    OUT database name, OUT sequence regclass, OUT sequence_oid oid,
    OUT last_ms_at timestamptz, OUT issued bigint, OUT waits bigint,
    OUT wait_time double precision, OUT borrowed_ms bigint, OUT refused bigint)
RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL RESTRICTED ROWS 100
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT d.datname,
           CASE WHEN d.datname = pg_catalog.current_database() THEN s.sequence_oid::pg_catalog.regclass END,
           s.sequence_oid, s.last_ms_at, s.issued, s.waits, s.wait_time, s.borrowed_ms, s.refused
    FROM insta_id._guard_stats() s
    LEFT JOIN pg_catalog.pg_database d ON d.oid = s.database
$$;
COMMENT ON FUNCTION insta_id.guard_stats() IS
'Per sequence in the duplicate guard''s table (this database''s sequences, every database''s for members of pg_read_all_stats; this session only with the per-session guard): IDs issued, waits for the next millisecond (count, total ms), milliseconds borrowed after the clock stepped back, calls refused with 54000';

CREATE FUNCTION insta_id.guard_stats_total(
    OUT guard_mode text, OUT capacity bigint, OUT sequences bigint,
    OUT issued bigint, OUT waits bigint, OUT wait_time double precision,
    OUT borrowed_ms bigint, OUT refused bigint, OUT evictions bigint,
    OUT stats_reset timestamptz)
RETURNS record
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_guard_stats_total';
COMMENT ON FUNCTION insta_id.guard_stats_total() IS
'The duplicate guard as a whole: capacity and sequences in its table, the counts of guard_stats summed over every sequence since the last reset (evicted ones too), evictions';
REVOKE ALL ON FUNCTION insta_id.shards(), insta_id.shard_schema(int), insta_id.migrations(),
    insta_id.applied_migrations(), insta_id.pending_migrations(), insta_id.guard_stats(),
    insta_id.guard_stats_total() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION insta_id.shards(), insta_id.shard_schema(int), insta_id.migrations(),
    insta_id.applied_migrations(), insta_id.pending_migrations(), insta_id.guard_stats(),
    insta_id.guard_stats_total() TO PUBLIC;

-- lock_shard_for_move: the holder named through _lock_holder.
CREATE OR REPLACE FUNCTION insta_id.lock_shard_for_move(shard_id int)
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

-- Applies a migration to the template, then to every registered shard of
-- that template lacking it (and to shards of no recorded template), in shard
-- order: one transaction per schema, run as the schema's owner in a
-- security-restricted operation with search_path = <schema>, pg_catalog,
-- pg_temp (insta_id._run_in_schema), recorded in
-- insta_id_admin.applied_migrations in the same transaction. Re-running skips the
-- schemas that have it, so a failure or a cancel is resumed by calling it
-- again; it stops at the first failing schema, naming it. Each schema's
-- statements run under lock_timeout and are retried lock_retries times
-- (waiting longer each time) rather than queueing behind a long transaction
-- while that shard's writers queue behind them. One runner at a time: a
-- second one is refused. No SET clause: PostgreSQL forbids COMMIT in a
-- procedure that has one; search_path is fixed per transaction instead, by
-- the first statement after each COMMIT. Until then only qualified names
-- run: the declarations' types are pg_catalog's and have no initial values
-- (an expression there would run under the caller's search_path).
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
    moving pg_catalog.int4[];
    err_state pg_catalog.text;
    err_message pg_catalog.text;
    err_detail pg_catalog.text;
    err_hint pg_catalog.text;
BEGIN
    -- Inside a transaction block COMMIT is refused (2D000): find out before doing anything.
    COMMIT;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    last_shard := -1;
    shards_done := 0;
    started := clock_timestamp();
    reported := started;
    moving := '{}';
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
            RAISE EXCEPTION 'another insta_id.migrate is running'
                USING ERRCODE = 'object_in_use',
                      DETAIL = format('Process %s holds the migration runner''s lock.', holder),
                      HINT = 'Call insta_id.migrate again once it has finished: it skips the schemas that have the migration.';
        END IF;
        IF target IS NULL THEN
            -- First transaction: one name, one set of statements, one template.
            SELECT m.template_schema, m.statements INTO recorded_template, recorded_statements
            FROM insta_id_admin.migrations m WHERE m.name = migration;
            IF NOT FOUND THEN
                INSERT INTO insta_id_admin.migrations (name, template_schema, statements)
                VALUES (migration, migrate.template_schema, statements);
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
            -- The next shard without it; the registry is read again each time,
            -- so shards created meanwhile from the old template are not missed.
            SELECT r.shard_id, r.schema_name INTO target_shard, target FROM insta_id_admin.shard_registry r
            WHERE r.shard_id > last_shard
              AND (r.template_schema IS NULL OR r.template_schema = migrate.template_schema)
              AND NOT EXISTS (SELECT FROM insta_id_admin.applied_migrations a
                              WHERE a.schema_name = r.schema_name AND a.migration = migrate.migration)
            ORDER BY r.shard_id LIMIT 1;
            EXIT WHEN NOT FOUND;
            last_shard := target_shard;
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
            PERFORM FROM insta_id_admin.shard_registry r WHERE r.shard_id = target_shard FOR SHARE;
            CONTINUE WHEN NOT FOUND;  -- dropped meanwhile
        END IF;
        IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = target) THEN
            RAISE EXCEPTION 'migration % stopped: schema % of shard % does not exist', quote_literal(migration),
                            quote_ident(target), target_shard
                USING ERRCODE = 'invalid_schema_name',
                      DETAIL = 'The template and the shards before it have the migration.',
                      HINT = format('Restore the schema, or unregister the shard (insta_id.drop_shard(%s)); then call insta_id.migrate again.', target_shard);
        END IF;
        attempt := 0;
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
                PERFORM insta_id._run_in_schema(target, insta_id._code_owner(target), ARRAY[statements]);
                EXIT;
            EXCEPTION
                WHEN lock_not_available THEN
                    attempt := attempt + 1;
                    IF attempt > lock_retries THEN
                        RAISE EXCEPTION 'migration % could not lock what it changes in schema % within lock_timeout (%), % times',
                                        quote_literal(migration), quote_ident(target), lock_timeout, attempt
                            USING ERRCODE = 'lock_not_available',
                                  DETAIL = CASE WHEN target_shard IS NULL THEN 'The template is not migrated; nothing was changed.'
                                           ELSE 'The template and the shards done so far keep it; insta_id.pending_migrations() lists the others.' END,
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
                                           ELSE 'The template and the shards done so far keep it; insta_id.pending_migrations() lists the others.' END),
                              HINT = CASE WHEN err_state = '25001' THEN
                                         'A migration runs in a transaction per schema: statements that cannot (CREATE INDEX CONCURRENTLY, ...) are run shard by shard from outside first; the migration then holds their IF NOT EXISTS form (docs/shards.md, "Migrations").'
                                     WHEN err_hint <> '' THEN err_hint
                                     WHEN err_state = '42501' THEN
                                         'A migration runs as the one owner of the schema''s objects, in a security-restricted operation: it may do what that role may, and deferred triggers must fire within its statements (SET CONSTRAINTS ALL IMMEDIATE after the changes; docs/shards.md, "Privileges").'
                                     ELSE 'Once the cause is fixed, call insta_id.migrate again: it goes on from this schema.' END;
            END;
        END LOOP;
        INSERT INTO insta_id_admin.applied_migrations (schema_name, migration) VALUES (target, migration);
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
                  DETAIL = format('%s other shards were migrated; insta_id.pending_migrations() lists the skipped ones while they are here.', shards_done),
                  HINT = 'Call insta_id.migrate again once the moves are done (a kept old copy released: insta-id move --release), on the server that holds each shard: its migration history moves with it.';
    END IF;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    RAISE NOTICE 'insta_id: migration %: % shards migrated, % had it already', migration, shards_done,
        (SELECT count(*) FROM insta_id_admin.shard_registry r
         WHERE r.template_schema IS NULL OR r.template_schema = migrate.template_schema) - shards_done;
END
$$;

-- DDL helpers are for administrators: superusers, and roles granted EXECUTE
-- (README, "Who may do what": a delegated shard administrator is granted
-- EXECUTE on every function and procedure of schema insta_id). Nothing
-- internal is PUBLIC's.
REVOKE EXECUTE ON FUNCTION
    insta_id.create_shard(int, text), insta_id.add_id_column(regclass, name, int),
    insta_id.create_shards(int, int, text), insta_id.drop_shard(int, boolean),
    insta_id.adopt_shard(text, int), insta_id.lock_shard_for_move(int),
    insta_id.shard_drift(text, int, int), insta_id._lock_table_capacity(),
    insta_id._run_in_schema(name, regrole, text[]), insta_id._identifier_list(text),
    insta_id._names_schema(text, name), insta_id._deparse(name, text, oid, pg_node_tree, int),
    insta_id._options(text[]), insta_id._unqualified_create(text, text, name, name),
    insta_id._next_id_default_shard(regclass, name), insta_id._check_shard_id(int), insta_id._check_name(text),
    insta_id._sequence_name(name, name, name),
    insta_id._check_template(name), insta_id._grants(aclitem[], oid),
    insta_id._grant_statements(jsonb, text, text, boolean), insta_id._grant(jsonb, text, text),
    insta_id._tied_to_schema(oid), insta_id._template_objects(name),
    insta_id._migrations_of(name), insta_id._template_plan(name),
    insta_id._copy_planned(jsonb, name, int), insta_id._check_shard_range(int, int, text), insta_id._check_shard_range_bounds(int, int),
    insta_id._check_owners(jsonb), insta_id._check_lock_budget(jsonb, int, int, text),
    insta_id._lock_template_shared(), insta_id._create_shard_batch(int, int, jsonb),
    insta_id._describe_schemas(oid[]), insta_id._schema_lock_key(), insta_id._move_lock_key(),
    insta_id._lock_holder(int, int)
FROM PUBLIC;
REVOKE EXECUTE ON PROCEDURE insta_id.create_shards_in_batches(int, int, text, int),
    insta_id.migrate(text, text, text, text, int) FROM PUBLIC;

-- The high-water mark moves from the data directory's file (one per server,
-- left behind by a failover, a restore or pg_upgrade) into each database's
-- WAL (src/sql/guard.sql). The library carries the file's mark into the
-- sequence at its first next_id in this database.
-- In a schema of its own that only the extension's owner may use: a role
-- that could name the sequence could queue a lock on it (CREATE RULE asks
-- for one before checking privileges) behind which every writer would wait.
CREATE SCHEMA insta_id_mark;
COMMENT ON SCHEMA insta_id_mark IS
'insta_id''s high-water mark (the sequence high_water): the extension owner''s only';
CREATE SEQUENCE insta_id_mark.high_water AS bigint MINVALUE 0 START WITH 0 NO CYCLE;
COMMENT ON SEQUENCE insta_id_mark.high_water IS
'The durable high-water mark of this database in milliseconds since 1970, written by next_id before the IDs it covers are returned; read it with insta_id.high_water_mark()';
SELECT pg_catalog.pg_extension_config_dump('insta_id_mark.high_water', '');
COMMENT ON FUNCTION insta_id.high_water_mark() IS
'The durable high-water mark of this database (readable on a standby): no ID of it is later; after a restart, a failover, a restore or an upgrade IDs continue above it until the clock passes it (NULL before the first ID)';
COMMENT ON FUNCTION insta_id.raise_high_water_mark(timestamptz) IS
'Counts every millisecond up to at (at most an hour ahead of the clock) as used by every sequence of this database, durably (and of the server''s other databases until it restarts); returns the mark';

-- The state of shard moves (issue 25): as src/sql/moves.sql.
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
    -- Every step reached, in order: [{"step": ..., "at": ...}, ...].
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
-- first step makes the row; _move_steps lists each side's). 55006 when the
-- row is another move's (the other side, or another schema).
CREATE FUNCTION insta_id.move_step(shard_id int, side text, step text, schema_name name, peer text)
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
END
$$;
COMMENT ON FUNCTION insta_id.move_step(int, text, text, name, text) IS
'Records the step this server''s side of a shard''s move has reached (the mover calls it)';

-- The move of a shard is over on this server (finished or undone): forgets
-- its row, if it is that side's. Whether there was one.
CREATE FUNCTION insta_id.move_done(shard_id int, side text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF num_nulls(move_done.shard_id, move_done.side) > 0 THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    DELETE FROM insta_id_admin.moves m WHERE m.shard_id = move_done.shard_id AND m.side = move_done.side;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION insta_id.move_done(int, text) IS
'Forgets the record of one side of a shard''s move on this server, once nothing of it is left there';

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

-- Fences every table of a schema the mover has just created here (in the
-- same transaction as the schema): the trigger insta_id_move_fence on each.
-- Returns how many tables. 55000 when the shard or the schema is registered
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
    RETURN fenced;
END
$$;
COMMENT ON FUNCTION insta_id.move_fence(name, int) IS
'Fences a shard''s copy being moved to this server: clients'' writes refused (55006) until it is registered here';

CREATE FUNCTION insta_id._in_transaction_block()
RETURNS boolean
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_in_transaction_block';

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
        -- NULL until the copy's sequence issued a value (is_called).
        here_last := pg_sequence_last_value(target);
        SELECT q.seqincrement INTO increment FROM pg_sequence q WHERE q.seqrelid = target;
        -- Refused when the copy issued a value the old server's sequence
        -- would issue next (in the increment's direction).
        IF here_last IS NOT NULL AND sign(increment) * (here_last::numeric - seq.last_value
                                                       - CASE WHEN seq.is_called THEN increment ELSE 0 END) >= 0 THEN
            RAISE EXCEPTION 'sequence % of the copy is past the old server''s (% against %)', target, here_last, seq.last_value
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'It was used on this server during the move; carrying the old value could repeat its values.';
        END IF;
        PERFORM setval(target, seq.last_value, seq.is_called);
    END LOOP;
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

-- Drops the copy this server keeps for a move's rollback (move_reserve),
-- once its window has passed or the rollback is not wanted: its schema,
-- as drop_shard drops a shard's (under its locks, never another schema's
-- objects: 2BP01), its migration history and the move's record. The
-- mover drops the replication back into it first. Returns the schema.
-- 42704 when no copy of the shard is kept here; 55000 when the shard or
-- the schema is registered here (the copy is a shard again) or a
-- subscription still applies into it; 22004 for NULL.
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
    DELETE FROM insta_id_admin.moves m WHERE m.shard_id = move_release.shard_id AND m.side = 'leaving';
    RETURN recorded.schema_name;
END
$$;
COMMENT ON FUNCTION insta_id.move_release(int) IS
'Drops the copy of a shard this server kept for a move''s rollback, and the move''s record';

REVOKE ALL ON FUNCTION insta_id._move_steps(text), insta_id.move_step(int, text, text, name, text),
    insta_id.move_done(int, text), insta_id._move_fence(), insta_id.move_fence(name, int),
    insta_id._in_transaction_block(), insta_id._move_unlocked(name), insta_id._check_move_locked(int, name),
    insta_id.move_lock(int, int), insta_id._shard_schema(int),
    insta_id.move_state(int), insta_id.move_carry(int, jsonb), insta_id.move_reserve(int, interval),
    insta_id.move_release(int) FROM PUBLIC;

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
CREATE FUNCTION insta_id.shard_admin_privileges()
RETURNS TABLE (privilege text, object text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    VALUES
        ('EXECUTE', 'FUNCTION insta_id.create_shard(int, text)'),
        ('EXECUTE', 'FUNCTION insta_id.create_shards(int, int, text)'),
        ('EXECUTE', 'PROCEDURE insta_id.create_shards_in_batches(int, int, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.add_id_column(regclass, name, int)'),
        ('EXECUTE', 'FUNCTION insta_id.drop_shard(int, boolean)'),
        ('EXECUTE', 'FUNCTION insta_id.adopt_shard(text, int)'),
        ('EXECUTE', 'PROCEDURE insta_id.migrate(text, text, text, text, int)'),
        ('EXECUTE', 'FUNCTION insta_id.shard_drift(text, int, int)'),
        ('EXECUTE', 'FUNCTION insta_id.lock_shard_for_move(int)'),
        -- what they call
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
        ('EXECUTE', 'FUNCTION insta_id._run_in_schema(name, regrole, text[])'),
        ('EXECUTE', 'FUNCTION insta_id._schema_lock_key()'),
        ('EXECUTE', 'FUNCTION insta_id._sequence_name(name, name, name)'),
        ('EXECUTE', 'FUNCTION insta_id._shard_schema(int)'),
        ('EXECUTE', 'FUNCTION insta_id._template_objects(name)'),
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

-- Grants (or, with revoke, takes back) exactly shard_admin_privileges() to
-- a role. Only the extension's owner (a superuser) can: GRANT on another's
-- objects needs their grant option, which nobody is given.
CREATE FUNCTION insta_id.grant_shard_admin(admin regrole, revoke boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT * FROM insta_id.shard_admin_privileges() LOOP
        EXECUTE format(CASE WHEN revoke THEN 'REVOKE %s ON %s FROM %s' ELSE 'GRANT %s ON %s TO %s' END,
                       p.privilege, p.object, admin);
    END LOOP;
END
$$;
COMMENT ON FUNCTION insta_id.grant_shard_admin(regrole, boolean) IS
'Grants a role what a delegated shard administrator needs (insta_id.shard_admin_privileges()), or with revoke takes it back';
REVOKE ALL ON FUNCTION insta_id.shard_admin_privileges(), insta_id.grant_shard_admin(regrole, boolean) FROM PUBLIC;
