-- Time ranges as ID ranges: the IDs made in a tstzrange, as the bounds a
-- btree index (or a range partition) on the ID uses. An ID made in
-- millisecond m (since the epoch) lies in [m << 23, (m + 1) << 23), so a
-- range of milliseconds is a range of IDs, as long as the IDs are positive:
-- from 2^40 ms after the epoch (2046-06-27 with Instagram's) they are
-- negative bigints and sort before every earlier one, so a range reaching
-- past that is refused rather than answered wrongly.
-- search_path: id_range sets pg_catalog, pg_temp; made_during sets none,
-- which would keep PostgreSQL from inlining it, and qualifies every name
-- and operator instead.
-- Privileges: PUBLIC's, like the decoders (privileges.sql).

-- The IDs whose created_at lies in during, as a range of IDs:
-- insta_id.created_at(id) <@ during exactly when id <@ id_range(during)
-- (tests/pg_regress/sql/22_time.sql checks it on every kind of bound).
-- Unbounded and infinite ends are open; times before the epoch hold no
-- IDs. IMMUTABLE like min_id, and for the same reason: the epoch is fixed
-- per database before its first ID.
CREATE FUNCTION insta_id.id_range(during tstzrange)
RETURNS int8range
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    epoch_ms numeric := extract(epoch FROM insta_id.epoch()) * 1000;
    -- The first millisecond whose IDs are negative bigints.
    sign_ms constant bigint := 1099511627776;
    x numeric;
    lo numeric := 0;  -- the first millisecond (since the epoch) whose IDs are in
    hi numeric;       -- the first one past them; NULL: no end
BEGIN
    IF isempty(during) THEN
        RETURN 'empty';
    END IF;
    -- created_at is a whole millisecond: the first one at or after (or
    -- after) the lower bound, the first one after (or at or after) the upper.
    IF NOT lower_inf(during) AND lower(during) <> '-infinity' THEN
        IF lower(during) = 'infinity' THEN
            RETURN 'empty';
        END IF;
        x := extract(epoch FROM lower(during)) * 1000 - epoch_ms;
        lo := greatest(CASE WHEN lower_inc(during) THEN ceil(x) ELSE floor(x) + 1 END, 0);
    END IF;
    IF NOT upper_inf(during) AND upper(during) <> 'infinity' THEN
        IF upper(during) = '-infinity' THEN
            RETURN 'empty';
        END IF;
        x := extract(epoch FROM upper(during)) * 1000 - epoch_ms;
        hi := CASE WHEN upper_inc(during) THEN floor(x) + 1 ELSE ceil(x) END;
    END IF;
    IF hi <= lo THEN
        RETURN 'empty';
    END IF;
    IF lo >= sign_ms OR hi > sign_ms THEN
        RAISE EXCEPTION 'time range % reaches past the last time of positive IDs', during
            USING ERRCODE = 'datetime_field_overflow',
                  DETAIL = format('IDs made from %s on (2^40 ms after the epoch) are negative bigints and sort before the earlier ones.',
                                  insta_id.epoch() + sign_ms * interval '1 millisecond'),
                  HINT = 'Split the range there, or bound it before that time.';
    END IF;
    RETURN int8range(lo::bigint << 23, CASE WHEN hi < sign_ms THEN hi::bigint << 23 END);
END
$$;
COMMENT ON FUNCTION insta_id.id_range(tstzrange) IS
'The IDs made in a time range, as a range of IDs: created_at(id) <@ during exactly when id <@ id_range(during)';

-- WHERE insta_id.made_during(id, during): whether an ID was made in a time
-- range, written so that the planner sees id >= <first ID> AND id <= <last
-- ID>: an index range scan on the key, and partition pruning on it, where
-- insta_id.created_at(id) <@ during would read every row. For that,
-- PostgreSQL inlines it: LANGUAGE sql, one expression, no SET clause, not
-- STRICT (COALESCE is not); it then folds id_range of a constant range
-- into constants, or computes it once per scan for a parameter. With no
-- end, the last positive ID is the bound; an empty range makes the bounds
-- cross (false, as created_at(id) <@ 'empty' is, never NULL).
CREATE FUNCTION insta_id.made_during(id bigint, during tstzrange)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT id OPERATOR(pg_catalog.>=) COALESCE(pg_catalog.lower(insta_id.id_range(during)),
                                               CASE WHEN pg_catalog.isempty(insta_id.id_range(during)) THEN 9223372036854775807 END)
       AND id OPERATOR(pg_catalog.<=) COALESCE(pg_catalog.upper(insta_id.id_range(during)) OPERATOR(pg_catalog.-) 1,
                                               CASE WHEN pg_catalog.isempty(insta_id.id_range(during)) THEN -9223372036854775808
                                                    ELSE 9223372036854775807 END)
$$;
COMMENT ON FUNCTION insta_id.made_during(bigint, tstzrange) IS
'Whether an ID was made in a time range (created_at(id) <@ during), as ID bounds an index on the key and partition pruning use';
