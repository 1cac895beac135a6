-- Running a shard's statements safely, and reading catalog text
-- (src/ddl.rs, src/sql_text.rs). _run_in_schema is the one place where a
-- template's or shard's schema comes first on search_path: it runs the
-- given statements with search_path = <schema>, pg_catalog, pg_temp in a
-- security-restricted operation, as the role given (the schema's owner
-- where the owner's code could run), and restores both afterwards.
-- Privileges: internal, not PUBLIC's (privileges.sql).

-- The compiled half of the helpers (src/ddl.rs): statements (or a query
-- whose value is returned) run in a schema as a given role in a
-- security-restricted operation; a stored list
-- setting read as PostgreSQL reads it; whether a body names a schema.
CREATE FUNCTION insta_id._run_in_schema(nsp name, run_as regrole, statements text[])
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_run_in_schema';
CREATE FUNCTION insta_id._query_in_schema(nsp name, run_as regrole, query text)
RETURNS text
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_query_in_schema';
CREATE FUNCTION insta_id._identifier_list(list text)
RETURNS text[]
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_identifier_list';
CREATE FUNCTION insta_id._names_schema(body text, schema name)
RETURNS boolean
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_names_schema';
CREATE FUNCTION insta_id._in_transaction_block()
RETURNS boolean
LANGUAGE c VOLATILE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_in_transaction_block';
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
