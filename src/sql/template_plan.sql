-- Reading a template: which objects it holds (_check_template refuses what
-- a copy cannot carry), how each is deparsed (_deparse, the only place the
-- catalog's deparsers run), its grants, and the plan a copy follows
-- (_template_plan: the template's catalog read once per create_shards).
-- search_path and privileges: as registry.sql says. _deparse puts the
-- template first only around one qualified deparser call with exact
-- argument types (pg_get_viewdef, which runs SQL, gets pg_catalog first).

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
CREATE FUNCTION insta_id._deparse(nsp name, kind text, obj oid, node pg_node_tree DEFAULT NULL, n int DEFAULT -1)
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
CREATE FUNCTION insta_id._options(options text[])
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
CREATE FUNCTION insta_id._unqualified_create(ddl text, head text, nsp name, object name)
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

-- Longer than a screen: one refusal per kind of object a copy cannot carry,
-- each a short query naming the objects, so the DBA sees all of them at once.
-- Checks once, before any shard is made, that template can be copied.
CREATE FUNCTION insta_id._check_template(template name)
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

-- An ACL as a list of grants ({"privilege", "grantee" (quoted, or PUBLIC),
-- "grantable"}), the owner's own left out (a copy's owner has them).
CREATE FUNCTION insta_id._grants(acl aclitem[], owner oid)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('privilege', a.privilege_type,
                                  'grantee', CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(g.rolname) END,
                                  'grantable', a.is_grantable)
                              ORDER BY a.grantee, a.privilege_type), '[]')
    FROM aclexplode(acl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
    WHERE a.grantee <> owner
$$;

-- GRANT statements giving what _grants listed on an object ("TABLE
-- insta7.users", "FUNCTION f(integer)", ...), to columns when given
-- ("(name)"); first a REVOKE from PUBLIC when revoke_public (an ACL other
-- than the default one, which may have taken PUBLIC's rights away).
-- (PL/pgSQL, whose plan the session keeps: a copy calls it for each of its
-- tables, columns and sequences, and before PostgreSQL 18 a SQL function
-- with a SET clause was planned again at each call)
CREATE FUNCTION insta_id._grant_statements(grants jsonb, object text, columns text DEFAULT '',
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

-- Grants what _grants listed (see _grant_statements).
CREATE FUNCTION insta_id._grant(grants jsonb, object text, columns text DEFAULT '')
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    stmt text;
BEGIN
    FOR stmt IN SELECT jsonb_array_elements_text(insta_id._grant_statements(grants, object, columns)) LOOP
        EXECUTE stmt;
    END LOOP;
END
$$;

-- The types of a node tree's constants and of its empty ARRAY[]s
-- (src/sql_text.rs).
CREATE FUNCTION insta_id._tree_const_types(tree text)
RETURNS oid[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_tree_const_types';

-- The OIDs of a node tree's regclass constants (src/sql_text.rs): a
-- CHECK's or a generated column's naming its own table is recorded as no
-- dependency.
CREATE FUNCTION insta_id._tree_regclasses(tree text)
RETURNS oid[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_tree_regclasses';

-- Text with names qualified with schema from_nsp qualified with to_nsp
-- instead, where shard_drift's placeholder would be (src/placeholder.rs:
-- names and reg* constants, never strings or quoted names): a view's names
-- the template qualifies (pg_catalog's hide them), a foreign key's table.
CREATE FUNCTION insta_id._requalified(text text, from_nsp name, to_nsp name)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_requalified';

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

-- Whether LIKE would leave a copy of table tbl tied to the table's schema:
-- a column of one of the schema's types (or an array of one), or a default
-- or CHECK naming any of its objects (a type, a function, an operator, a
-- relation by a regclass constant, tbl itself too, ...), recorded as a
-- dependency or not (_names_unrecorded; a CHECK's regclass constant
-- naming tbl: PostgreSQL records its columns only). LIKE copies their
-- node trees, OIDs and all. Such a table's copy is made without its
-- defaults and CHECKs, deparsed instead: so is one whose CHECK is NOT
-- VALID, which LIKE would copy validated.
CREATE FUNCTION insta_id._tied_to_schema(tbl oid)
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
-- copy's schema). A view is deparsed with pg_catalog first (_deparse) and
-- made so ("view": true): its names the template qualifies, those
-- pg_catalog's hide, are moved to the copy's schema then.
CREATE FUNCTION insta_id._template_objects(template name)
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

-- What copying template takes, read from the catalogs once however many
-- shards are made from it (finding a schema's tables scans all of pg_class,
-- which grows with every shard): its tables in name order, each with its
-- next_id columns ("ready": bigint NOT NULL, so a copy needs only a sequence
-- and a default of its own) and the grants on their sequences, its grants,
-- column grants and replica identity; the schema's grants, the foreign keys,
-- and the CACHE for sequences.
-- The template was checked by _check_template.
CREATE FUNCTION insta_id._template_plan(template name)
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
