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

-- The gate's lock on relations, in the order given (src/locks.rs,
-- src/sql/gate.sql).
CREATE FUNCTION insta_id._lock_relations(rels oid[])
RETURNS void
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_lock_relations';

-- The advisory locks this session holds, one text a lock and mode
-- (src/locks.rs): what the gate's _session_state reads, without pg_locks'
-- text for every lock of the server. Restricted: a parallel worker's are
-- not the session's.
CREATE FUNCTION insta_id._advisory_holds()
RETURNS text[]
LANGUAGE c VOLATILE PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'insta_id_advisory_holds';

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
CREATE FUNCTION insta_id._lock_template_shared()
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT insta_id._lock(insta_id._schema_lock_key(), 2, shared => true, session => false, wait => true) $$;
