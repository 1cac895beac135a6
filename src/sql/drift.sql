-- Drift: shard_drift compares every shard of a template with the template,
-- object by object (_describe_schemas).
-- search_path and privileges: as registry.sql says.

-- If a default's node tree, without positions, is a call of next_id (of
-- OID next_id) on an integer and a regclass constant: {shard, sequence's
-- OID} (src/sql_text.rs); else NULL.
CREATE FUNCTION insta_id._next_id_call(tree text, next_id oid)
RETURNS bigint[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_next_id_call';

-- A node tree's text without its tokens' positions (src/sql_text.rs):
-- ' :location N' removed, which moves with the length of the schema's
-- name a statement was written with.
CREATE FUNCTION insta_id._without_locations(tree text)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_without_locations';

-- A view's query tree (pg_rewrite.ev_action) without its tokens' positions
-- and without the OIDs of the relations it reads (src/sql_text.rs), and
-- those OIDs in order: what shard_drift compares of a view, its
-- relations by their names in the view's own schema.
CREATE FUNCTION insta_id._without_relids(tree text)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_without_relids';

CREATE FUNCTION insta_id._tree_relids(tree text)
RETURNS oid[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_tree_relids';

-- A row of _describe_schemas with <schema>. for the name of schema nsp,
-- where it qualifies a name: in names, in the literal of a constant of a
-- reg* or a user's type and in a function's body, never in a string or a
-- quoted name (src/placeholder.rs). The name looked up by oid, a cache hit
-- (STABLE: a schema can be renamed).
CREATE FUNCTION insta_id._with_placeholder(detail text, nsp oid)
RETURNS text
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_with_placeholder';

-- The line pg_get_functiondef prints for a stored search_path setting,
-- and the same with '<schema>' for each name that is schema
-- (src/placeholder.rs); NULL if malformed.
CREATE FUNCTION insta_id._search_path_lines(setting text, schema name)
RETURNS text[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_search_path_lines';

-- Whether such a tree may name a user's object by OID (src/sql_text.rs):
-- a template view whose tree does is never taken for a shard's.
CREATE FUNCTION insta_id._names_objects(tree text)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_names_objects';

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
COMMENT ON FUNCTION insta_id.shard_drift(text, int, int) IS
'Which registered shards (all, or first_shard to last_shard) differ from the template schema, and how (one row per difference)';
