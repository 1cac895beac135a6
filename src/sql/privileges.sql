-- Who may use what, in one place, loaded last. Default deny: every function
-- and procedure of schema insta_id is first taken from PUBLIC, then only
-- the ID functions and what the guard's views read are given back. A new
-- function is therefore nobody's but the superuser's until listed here.
-- Application roles need no grants of their own: an id DEFAULT works for any
-- role that may INSERT into the table and use its sequence. Administrators
-- of shards are superusers or roles granted EXECUTE on the helpers
-- (README, "Who may do what").

GRANT USAGE ON SCHEMA insta_id TO PUBLIC;
-- Schema insta_id_mark (the high-water mark's sequence): no grants at all.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA insta_id FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA insta_id FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    insta_id.next_id(int, regclass),
    insta_id.id_parts(bigint), insta_id.id_parts(bigint, timestamptz),
    insta_id.created_at(bigint), insta_id.shard_id(bigint), insta_id.seq_id(bigint),
    insta_id.min_id(timestamptz), insta_id.max_id(timestamptz),
    insta_id.min_id(timestamptz, int), insta_id.max_id(timestamptz, int),
    insta_id.min_id(timestamptz, timestamptz), insta_id.max_id(timestamptz, timestamptz),
    insta_id.min_id(timestamptz, int, timestamptz), insta_id.max_id(timestamptz, int, timestamptz),
    insta_id.epoch(), insta_id.guard_mode(), insta_id.high_water_mark(),
    -- read by the views guard_stats and guard_stats_total as their caller
    insta_id._guard_stats(), insta_id._guard_stats_total()
TO PUBLIC;
-- Not PUBLIC's, like pg_stat_reset(): insta_id.guard_stats_reset(), and
-- insta_id.raise_high_water_mark(timestamptz), which moves every sequence's
-- IDs ahead of the clock.

GRANT SELECT ON insta_id.guard_stats, insta_id.guard_stats_total TO PUBLIC;
GRANT SELECT ON insta_id.shard_registry, insta_id.shards TO PUBLIC;
-- A migration's statements only to those who may run migrations (granted
-- EXECUTE on insta_id.migrate; superusers).
GRANT SELECT (name, template_schema, created_at) ON insta_id.migrations TO PUBLIC;
GRANT SELECT ON insta_id.applied_migrations, insta_id.pending_migrations TO PUBLIC;
-- Which shards have a move recorded here, and on which side: what
-- insta_id.migrate checks (as its caller) to skip them. No more of a move
-- than pg_publication and pg_subscription show anyone already.
GRANT SELECT (shard_id, side) ON insta_id.moves TO PUBLIC;
