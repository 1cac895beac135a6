-- Moving a shard online (scripts/move_shard.sh): the mover's lock that
-- migrate respects. raise_high_water_mark, the other half, is in guard.sql.
-- search_path and privileges: as registry.sql says.

-- A shard being moved to another server (scripts/move_shard.sh): the mover
-- holds this lock, for its session, from its checks until the shard has left;
-- insta_id.migrate skips the shard meanwhile. Two movers of one shard, or a
-- mover and a migration running on it, exclude each other.
CREATE FUNCTION insta_id.lock_shard_for_move(shard_id int)
RETURNS name
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
    holder int;
BEGIN
    PERFORM insta_id._check_shard_id(lock_shard_for_move.shard_id);
    SELECT r.schema_name INTO nsp FROM insta_id.shard_registry r WHERE r.shard_id = lock_shard_for_move.shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'shard % does not exist', lock_shard_for_move.shard_id USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT pg_try_advisory_lock(insta_id._move_lock_key(), lock_shard_for_move.shard_id) THEN
        holder := insta_id._lock_holder(insta_id._move_lock_key(), lock_shard_for_move.shard_id);
        RAISE EXCEPTION 'shard % is being moved or migrated', lock_shard_for_move.shard_id
            USING ERRCODE = 'object_in_use', DETAIL = format('Process %s holds its lock.', holder);
    END IF;
    RETURN nsp;
END
$$;
COMMENT ON FUNCTION insta_id.lock_shard_for_move(int) IS
'Marks a shard as being moved for the rest of the session (insta_id.migrate skips it); returns its schema';
