-- insta_id's advisory locks, the one place their keys are written. They use
-- PostgreSQL's two-key form (pg_locks: classid, objid, objsubid = 2), which
-- never meets an application's one-key (bigint) locks; the first key says
-- whose lock it is:
--   _schema_lock_key(), 1768515633 ('iid1'), object 1: the migration
--     runner, in each of its transactions. Object 2: a template, exclusive
--     while a migration changes it, shared while shards are copied from it,
--     so a copy never mixes a template's tables before a migration with its
--     history after it.
--   _move_lock_key(), 1768515634 ('iid2'), object: a shard number. Held for
--     a session by lock_shard_for_move and by a move's finishers on the new
--     server (insta-id move); migrate tries it shared and skips the
--     shard when it cannot have it.
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

-- The process, other than this one, holding insta_id's lock (key, object):
-- the DETAIL of a refusal. Restricted: a parallel worker's pg_backend_pid()
-- is not the session's.
CREATE FUNCTION insta_id._lock_holder(key int, object int)
RETURNS int
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT l.pid FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
      AND l.classid = key::oid AND l.objid = object::oid AND l.objsubid = 2 AND l.granted AND l.pid <> pg_backend_pid()
    ORDER BY l.pid LIMIT 1
$$;

-- Taken by every copy from a template (see _schema_lock_key).
CREATE FUNCTION insta_id._lock_template_shared()
RETURNS void
LANGUAGE sql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_advisory_xact_lock_shared(insta_id._schema_lock_key(), 2) $$;
