-- Drift: shard_drift compares every shard of a template with the template,
-- object by object (_describe_schemas).
-- search_path and privileges: as registry.sql says.

-- The definitions of the views and materialized views of schemas nsps.
-- pg_get_viewdef locks the view and every relation it reads until the end
-- of the transaction: here each schema's are deparsed in a subtransaction
-- rolled back at once, which releases its locks (the variables keep what
-- was read), so that one call holds one schema's locks at a time, whatever
-- the number of schemas: shard_drift over 8192 shards with views, in one
-- call, on a stock server. A schema whose views cannot be read within
-- lock_timeout (a tenant's lock on them), or whose tables went meanwhile
-- (a drop_shard beside the call), is reported, not left out: each of its
-- views' definition reads "not read (why)". PARALLEL UNSAFE:
-- subtransactions.
CREATE FUNCTION insta_id._view_definitions(nsps oid[])
RETURNS TABLE (view oid, definition text)
LANGUAGE plpgsql STABLE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '5s'
AS $$
DECLARE
    views oid[];
    defs text[];
BEGIN
    -- Each schema's views, from one pass over pg_class (it has no index on
    -- the schema alone: a pass a schema took minutes at 8192).
    FOR views IN SELECT array_agg(c.oid ORDER BY c.oid) FROM pg_class c
                 WHERE c.relnamespace = ANY (_view_definitions.nsps) AND c.relkind IN ('v', 'm')
                 GROUP BY c.relnamespace LOOP
        BEGIN
            defs := ARRAY(SELECT pg_get_viewdef(v.oid) FROM unnest(views) WITH ORDINALITY v(oid, i) ORDER BY v.i);
            RAISE EXCEPTION 'read' USING ERRCODE = 'raise_exception';
        EXCEPTION
            WHEN raise_exception THEN
                NULL;    -- (the locks released; defs kept)
            WHEN lock_not_available OR undefined_table OR internal_error THEN
                defs := array_fill(format('not read (%s)', SQLERRM), ARRAY[cardinality(views)]);
        END;
        RETURN QUERY SELECT * FROM unnest(views, defs);
    END LOOP;
END
$$;

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
-- Views are deparsed by _view_definitions, the one deparser that locks (a
-- schema at a time); the others read the catalogs without locks. PARALLEL
-- UNSAFE: _view_definitions is.
CREATE FUNCTION insta_id._describe_schemas(nsps oid[])
RETURNS TABLE (nsp oid, object text, detail text)
LANGUAGE sql STABLE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
    -- The schema's name: as written in a qualified name, and as a pattern
    -- matching it only where a name starts (schema t must not turn
    -- events_rest.at into events_res<schema>.at).
    WITH s AS (SELECT n.oid, ARRAY[quote_ident(n.nspname) || '.',
                                   '(^|[^[:alnum:]_$"])' || regexp_replace(quote_ident(n.nspname) || '.', '([^[:alnum:]_])', '\\\1', 'g')] AS prefix
               FROM pg_namespace n WHERE n.oid = ANY (nsps)),
    views AS MATERIALIZED (SELECT * FROM insta_id._view_definitions(nsps)),
    rel AS (SELECT c.oid, c.relnamespace, c.relname, c.relkind, c.relpersistence, c.relrowsecurity, c.relowner,
                   c.relforcerowsecurity, c.relreplident, c.relacl, c.reloptions, s.prefix, v.definition
            FROM pg_class c JOIN s ON s.oid = c.relnamespace LEFT JOIN views v ON v.view = c.oid
            WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')),
    -- Each relation's grants, written once per distinct ACL and owner (a
    -- shard's tables have their template's: thousands alike).
    rel_grants AS (SELECT x.acl, x.relowner,
                          (SELECT string_agg(format('%s %s', coalesce(g.rolname, 'PUBLIC'), a.privilege_type), ', ' ORDER BY 1)
                           FROM aclexplode(x.relacl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                           WHERE a.grantee <> x.relowner) AS grants
                   FROM (SELECT DISTINCT ON (coalesce(r.relacl::text, ''), r.relowner) coalesce(r.relacl::text, '') AS acl,
                                r.relowner, r.relacl
                         FROM rel r) x),
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
                         'grants ' || rg.grants,
                         CASE WHEN r.relkind IN ('v', 'm') THEN 'definition ' || r.definition END)
        FROM rel r JOIN rel_grants rg ON rg.acl = coalesce(r.relacl::text, '') AND rg.relowner = r.relowner
        UNION ALL
        SELECT r.relnamespace, r.prefix, format('column %I.%I', r.relname, a.attname),
               concat_ws(' ', format_type(a.atttypid, a.atttypmod),
                         CASE WHEN a.attnotnull THEN 'NOT NULL' END,
                         CASE WHEN a.attidentity <> '' THEN 'identity ' || a.attidentity::text END,
                         CASE WHEN a.attgenerated <> '' THEN 'generated' END,
                         'DEFAULT ' || regexp_replace(pg_get_expr(d.adbin, d.adrelid),
                                        '^insta_id\.next_id\(\d+, ''[^'']*''::regclass\)$', 'insta_id.next_id(<shard>, <its sequence>)'),
                         -- (a column of a type without collation has none: no lookup)
                         'COLLATE ' || CASE WHEN a.attcollation <> 0
                                            THEN nullif(a.attcollation, (SELECT typcollation FROM pg_type WHERE oid = a.atttypid))::regcollation::text END)
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
    -- (a schema's rows together: PostgreSQL keeps the last 32 patterns
    -- compiled, and each schema has its own; the pattern tried only on
    -- text that holds the name, which most does not)
    SELECT nsp, CASE WHEN strpos(object, prefix[1]) > 0 THEN regexp_replace(object, prefix[2], '\1<schema>.', 'g') ELSE object END,
           CASE WHEN strpos(detail, prefix[1]) > 0 THEN regexp_replace(detail, prefix[2], '\1<schema>.', 'g') ELSE detail END
    FROM (SELECT * FROM raw ORDER BY nsp) r
$$;

-- Which registered shards differ from a template, and how: one row per
-- difference (missing, extra, or the shard's detail beside the template's).
-- Empty right after create_shards and after a change applied to the template
-- and every shard alike. All the template's shards at once by default, or
-- those numbered first_shard to last_shard. Tables, columns, indexes and
-- the rest are read from the catalogs without locks; views are deparsed a
-- schema at a time, each schema's locks released before the next
-- (_view_definitions), so one call covers every shard on a server with
-- default settings (0.10.0 needed a lock per view and relation it read,
-- all held to the end: thousands of shards with views took 54000 and
-- ranges). Under concurrent DDL: views are read each schema at its turn,
-- the rest as the call's snapshot has it. PARALLEL UNSAFE:
-- _describe_schemas is.
CREATE FUNCTION insta_id.shard_drift(template_schema text, first_shard int DEFAULT 0, last_shard int DEFAULT 8191)
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
END
$$;
COMMENT ON FUNCTION insta_id.shard_drift(text, int, int) IS
'Which registered shards (all, or first_shard to last_shard) differ from the template schema, and how (one row per difference)';
