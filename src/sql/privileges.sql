-- Who may use what, in one place, loaded last. Default deny: every function
-- and procedure of schema insta_id is first taken from PUBLIC, then only
-- the ID functions and what the guard's views read are given back. A new
-- function is therefore nobody's but the superuser's until listed here.
-- Application roles need no grants of their own: an id DEFAULT works for any
-- role that may INSERT into the table and use its sequence. Administrators
-- of shards are superusers or roles given insta_id.grant_shard_admin
-- (below; README, "Who may do what").

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
CREATE FUNCTION insta_id.shard_admin_privileges()
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

GRANT USAGE ON SCHEMA insta_id TO PUBLIC;
-- Schemas insta_id_mark (the high-water mark's sequence) and insta_id_admin
-- (insta_id's tables): nothing for PUBLIC. What PUBLIC can name it can
-- lock, before any privilege check (insta_id.shards(), registry.sql).
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA insta_id FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA insta_id FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    insta_id.next_id(int, regclass),
    insta_id.id_parts(bigint), insta_id.id_parts(bigint, timestamptz),
    insta_id.created_at(bigint), insta_id.shard_id(bigint), insta_id.seq_id(bigint),
    insta_id.shortcode(bigint), insta_id.from_shortcode(text),
    insta_id.id_range(tstzrange), insta_id.made_during(bigint, tstzrange),
    insta_id.min_id(timestamptz), insta_id.max_id(timestamptz),
    insta_id.min_id(timestamptz, int), insta_id.max_id(timestamptz, int),
    insta_id.min_id(timestamptz, timestamptz), insta_id.max_id(timestamptz, timestamptz),
    insta_id.min_id(timestamptz, int, timestamptz), insta_id.max_id(timestamptz, int, timestamptz),
    insta_id.epoch(), insta_id.guard_mode(), insta_id.high_water_mark(),
    insta_id.guard_stats(), insta_id.guard_stats_total(),
    insta_id._guard_stats(),
    -- the shard map and the migration history (SECURITY DEFINER readers)
    insta_id.shards(), insta_id.shard_schema(int),
    insta_id.migrations(), insta_id.applied_migrations(), insta_id.pending_migrations()
TO PUBLIC;
-- Not PUBLIC's, like pg_stat_reset(): insta_id.guard_stats_reset(), and
-- insta_id.raise_high_water_mark(timestamptz, interval), which moves every sequence's
-- IDs ahead of the clock.
