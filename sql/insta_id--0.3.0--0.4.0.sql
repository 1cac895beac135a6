\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.4.0'" to load this file. \quit
-- 0.4.0: the duplicate guard survives restarts. Before any ID of a
-- millisecond leaves next_id, a mark at or past it is on disk
-- ($PGDATA/insta_id.mark); after a restart IDs continue above it, so a clock
-- that is behind cannot repeat IDs. high_water_mark() shows the mark.
CREATE FUNCTION insta_id.high_water_mark()
RETURNS timestamptz
LANGUAGE c VOLATILE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_high_water_mark';
COMMENT ON FUNCTION insta_id.high_water_mark() IS
'The durable high-water mark: no ID of this server is later; after a restart IDs continue above it until the clock passes it (NULL before the first ID)';
GRANT EXECUTE ON FUNCTION insta_id.high_water_mark() TO PUBLIC;

-- adopt_shard refuses a schema the caller does not own (42501): registering
-- it would let drop_shard drop another role's schema.
CREATE OR REPLACE FUNCTION insta_id.adopt_shard(schema_name text, shard_id int)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
BEGIN
    PERFORM insta_id._check_shard_id(adopt_shard.shard_id);
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = adopt_shard.schema_name) THEN
        RAISE EXCEPTION 'schema % does not exist', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    -- Registering a schema lets drop_shard drop it: only its owner may.
    IF NOT EXISTS (SELECT FROM pg_namespace n WHERE n.nspname = adopt_shard.schema_name
                   AND pg_has_role(current_user, n.nspowner, 'USAGE')) THEN
        RAISE EXCEPTION 'must be owner of schema % to adopt it as a shard', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.shard_id = adopt_shard.shard_id) THEN
        RAISE EXCEPTION 'shard % already exists', adopt_shard.shard_id USING ERRCODE = 'unique_violation';
    END IF;
    IF EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.schema_name = adopt_shard.schema_name) THEN
        RAISE EXCEPTION 'schema % is already a shard', quote_ident(adopt_shard.schema_name)
            USING ERRCODE = 'unique_violation';
    END IF;
    -- Every next_id column of the schema must mint this shard's IDs.
    SELECT c.oid::regclass AS tbl, a.attname, insta_id._next_id_default_shard(c.oid, a.attname) AS shard INTO bad
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE n.nspname = adopt_shard.schema_name AND c.relkind IN ('r', 'p')
      AND insta_id._next_id_default_shard(c.oid, a.attname) <> adopt_shard.shard_id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'column "%" of % mints IDs for shard %, not %', bad.attname, bad.tbl, bad.shard, adopt_shard.shard_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO insta_id.shard_registry (shard_id, schema_name) VALUES (adopt_shard.shard_id, adopt_shard.schema_name);
END
$$;
