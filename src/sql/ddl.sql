-- Running a shard's statements safely, and reading catalog text
-- (src/ddl.rs, src/sql_text.rs). _run_in_schema is the one place where a
-- template's or shard's schema comes first on search_path: it runs the
-- given statements with search_path = <schema>, pg_catalog, pg_temp in a
-- security-restricted operation, as the role given, and restores both
-- afterwards. Who that role is, for a statement on a tenant's relation, is
-- decided by the gate (gate.sql), which is its only caller but for the
-- copy of a template (template_copy.sql, deciding once per template).
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
