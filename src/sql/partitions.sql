-- Range partitions of a table on its ID, by the time inside it: each
-- partition holds the IDs made in one period, FROM (min_id(start)) TO
-- (min_id(end)) (id_range's bounds), so that a time-range query on the key
-- (made_during) prunes to the partitions of that time. create_partitions
-- makes them ahead of time; drop_partitions lists, detaches or drops those
-- older than a retention. Both are idempotent (a partition with the bounds
-- of a period is that period's, whatever its name), check everything
-- before changing anything, and run their statements through the gate
-- (gate.sql), as the one owner of the table and its code, so they are safe
-- to run from cron or pg_cron.
-- Periods are in UTC: a whole number of months from January 2000, or a
-- fixed length (hours, days, weeks) from 2000-01-03 00:00 UTC (a Monday).
-- search_path and privileges: as registry.sql says; not PUBLIC's.

-- The partitioned table's key, checked: range on one bigint column.
-- Returns its schema, name, owner and key column.
CREATE FUNCTION insta_id._time_partitioned(parent regclass, OUT nsp name, OUT relname name, OUT owner regrole, OUT col name)
RETURNS record
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    strategy "char";
    columns int;
    key_type regtype;
BEGIN
    SELECT n.nspname, c.relname, c.relowner::regrole, p.partstrat, p.partnatts, a.attname, a.atttypid::regtype
    INTO nsp, relname, owner, strategy, columns, col, key_type
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_partitioned_table p ON p.partrelid = c.oid
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = p.partattrs[0]
    WHERE c.oid = parent AND c.relkind = 'p';
    IF NOT FOUND THEN
        RAISE EXCEPTION '% is not a partitioned table', parent
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Create it with PARTITION BY RANGE (id).';
    ELSIF strategy <> 'r' OR columns <> 1 OR key_type IS DISTINCT FROM 'bigint'::regtype THEN
        RAISE EXCEPTION '% is not partitioned by range on one bigint column', parent
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = format('Its partition key is %s.', pg_get_partkeydef(parent)),
                  HINT = 'Partitions by the time inside an ID need PARTITION BY RANGE (id).';
    END IF;
END
$$;

-- The parent's partitions with FROM (a) TO (b) bounds of positive IDs:
-- their bounds and the times they hold (created_at of the bounds).
CREATE FUNCTION insta_id._time_partitions(parent regclass)
RETURNS TABLE (part regclass, low bigint, high bigint, made_from timestamptz, made_before timestamptz)
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT b.part, b.low, b.high, insta_id.created_at(b.low), insta_id.created_at(b.high)
    FROM (SELECT h.inhrelid::regclass AS part, m[1]::bigint AS low, m[2]::bigint AS high
          FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid,
               regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \(''?(\d+)''?\) TO \(''?(\d+)''?\)$') m
          WHERE h.inhparent = parent) b
    ORDER BY b.low
$$;

-- Longer than a screen: every refusal before the first CREATE.
CREATE FUNCTION insta_id.create_partitions(parent regclass, period interval DEFAULT '1 month',
                                           ahead interval DEFAULT '3 months', start timestamptz DEFAULT now(),
                                           lock_timeout text DEFAULT '2s')
RETURNS TABLE (part regclass, made_from timestamptz, made_before timestamptz, created boolean)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    months int;
    fixed interval;
    first timestamptz;
    periods jsonb := '[]';
    p jsonb;
    t0 timestamptz;
    t1 timestamptz;
    bounds int8range;
    part_name text;
    existing record;
    clash text;
    stmts text[] := '{}';
    made bigint[] := '{}';  -- the lower bounds of the partitions made here
    def regclass;
BEGIN
    IF parent IS NULL OR period IS NULL OR ahead IS NULL OR start IS NULL OR lock_timeout IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    t := insta_id._time_partitioned(parent);
    -- A period: whole months, or a fixed length of at least an hour.
    months := extract(year FROM period)::int * 12 + extract(month FROM period)::int;
    IF months > 0 AND period = months * interval '1 month' THEN
        first := (make_timestamp(2000, 1, 1, 0, 0, 0)
                  + (floor(((extract(year FROM start AT TIME ZONE 'UTC')::int - 2000) * 12
                            + extract(month FROM start AT TIME ZONE 'UTC')::int - 1) / months::numeric) * months) * interval '1 month')
                 AT TIME ZONE 'UTC';
    ELSIF months = 0 AND period >= interval '1 hour'
          AND extract(epoch FROM period) = floor(extract(epoch FROM period) / 60) * 60 THEN
        fixed := period;
        first := date_bin(fixed, start, make_timestamptz(2000, 1, 3, 0, 0, 0, 'UTC'));
    ELSE
        RAISE EXCEPTION 'a partition''s period must be whole months, or whole minutes of at least an hour: not %', period
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF ahead < interval '0' THEN
        RAISE EXCEPTION 'ahead must not be negative: %', ahead USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- (before the read of the default partition too: every wait bounded)
    PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)

    -- The periods from the one holding start to the one holding start + ahead.
    t0 := first;
    LOOP
        -- (calendar arithmetic in UTC: on a timestamptz it would follow the session's time zone)
        t1 := ((t0 AT TIME ZONE 'UTC') + coalesce(fixed, months * interval '1 month')) AT TIME ZONE 'UTC';
        IF jsonb_array_length(periods) >= 1000 THEN
            RAISE EXCEPTION 'more than 1000 partitions at once (period %, ahead %)', period, ahead
                USING ERRCODE = 'program_limit_exceeded',
                      HINT = 'Make them in several calls (start), or with a longer period.';
        END IF;
        bounds := insta_id.id_range(tstzrange(t0, t1));
        part_name := t.relname || '_p' || to_char(t0 AT TIME ZONE 'UTC',
                    CASE WHEN fixed IS NULL OR (fixed >= interval '1 day' AND t0 = date_trunc('day', t0, 'UTC')) THEN 'YYYYMMDD'
                         ELSE 'YYYYMMDD"_"HH24MI' END);
        IF octet_length(part_name) > 63 THEN
            RAISE EXCEPTION 'partition name % is longer than 63 bytes', quote_ident(part_name)
                USING ERRCODE = 'name_too_long', HINT = 'Give the table a shorter name.';
        END IF;
        periods := periods || jsonb_build_object('from', to_char(t0 AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'),
                                                 'before', to_char(t1 AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'), 'low', lower(bounds), 'high', upper(bounds), 'name', part_name);
        EXIT WHEN t1 > ((start AT TIME ZONE 'UTC') + ahead) AT TIME ZONE 'UTC';
        t0 := t1;
    END LOOP;

    -- Each period: made already (same bounds, any name), free, or refused
    -- before anything is made: another partition overlapping it, its name
    -- taken, rows of it in the default partition.
    def := (SELECT h.inhrelid::regclass FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
            WHERE h.inhparent = parent AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT');
    FOR p IN SELECT jsonb_array_elements(periods) LOOP
        SELECT * INTO existing FROM insta_id._time_partitions(parent) x
        WHERE x.low = (p->>'low')::bigint AND x.high = (p->>'high')::bigint;
        CONTINUE WHEN FOUND;
        SELECT string_agg(format('%s (%s)', c.oid::regclass, pg_get_expr(c.relpartbound, c.oid)), ', ') INTO clash
        FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
        WHERE h.inhparent = parent AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
          AND (NOT EXISTS (SELECT FROM insta_id._time_partitions(parent) x WHERE x.part = c.oid)
               OR EXISTS (SELECT FROM insta_id._time_partitions(parent) x WHERE x.part = c.oid
                          AND x.low < (p->>'high')::bigint AND x.high > (p->>'low')::bigint));
        IF clash IS NOT NULL THEN
            RAISE EXCEPTION 'the partition of % for % to % would overlap %', parent, p->>'from', p->>'before', clash
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'create_partitions makes partitions of whole periods; detach or drop the other, or keep the period it was made with.';
        END IF;
        IF to_regclass(format('%I.%I', t.nsp, p->>'name')) IS NOT NULL THEN
            RAISE EXCEPTION 'relation %.% already exists', quote_ident(t.nsp), quote_ident(p->>'name')
                USING ERRCODE = 'duplicate_table',
                      HINT = 'It is not the partition of that period: rename it.';
        END IF;
        -- (read through the gate: planning the query folds its indexes' expressions)
        IF def IS NOT NULL AND insta_id._gate_query(t.nsp, ARRAY[def],
               format('SELECT 1 FROM %s WHERE %I OPERATOR(pg_catalog.>=) %s AND %I OPERATOR(pg_catalog.<) %s LIMIT 1',
                      def, t.col, p->>'low', t.col, p->>'high')) IS NOT NULL THEN
            RAISE EXCEPTION 'the default partition % holds rows of % to %', def, p->>'from', p->>'before'
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Move them out of it first: PostgreSQL refuses a partition whose rows the default partition holds.';
        END IF;
        made := made || (p->>'low')::bigint;
        stmts := stmts || format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%s) TO (%s)',
                                 t.nsp, p->>'name', parent, p->>'low', p->>'high');
    END LOOP;

    IF cardinality(stmts) > 0 THEN
        PERFORM insta_id._gate(t.nsp, ARRAY[parent], stmts);
    END IF;
    RETURN QUERY
    SELECT x.part, x.made_from, x.made_before, x.low = ANY (made)
    FROM insta_id._time_partitions(parent) x
    WHERE EXISTS (SELECT FROM jsonb_array_elements(periods) e
                  WHERE (e->>'low')::bigint = x.low AND (e->>'high')::bigint = x.high)
    ORDER BY x.low;
END
$$;
COMMENT ON FUNCTION insta_id.create_partitions(regclass, interval, interval, timestamptz, text) IS
'Makes range partitions of a table on its ID, one per period (UTC months, or a fixed length), up to start + ahead; idempotent';

CREATE FUNCTION insta_id.drop_partitions(parent regclass, older_than interval, action text DEFAULT 'list',
                                         lock_timeout text DEFAULT '2s')
RETURNS TABLE (part text, made_from timestamptz, made_before timestamptz, done text)
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
    old record;
BEGIN
    IF parent IS NULL OR older_than IS NULL OR action IS NULL OR lock_timeout IS NULL THEN
        RAISE EXCEPTION 'arguments must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    ELSIF action NOT IN ('list', 'detach', 'drop') THEN
        RAISE EXCEPTION 'action must be list, detach or drop: not %', quote_literal(action)
            USING ERRCODE = 'invalid_parameter_value';
    ELSIF older_than < interval '0' THEN
        RAISE EXCEPTION 'older_than must not be negative: %', older_than USING ERRCODE = 'invalid_parameter_value';
    END IF;
    t := insta_id._time_partitioned(parent);
    PERFORM set_config('lock_timeout', lock_timeout, true);  -- a bad value fails here (22023)
    -- (a partition's name and bounds read before it is detached or dropped)
    FOR old IN SELECT x.* FROM insta_id._time_partitions(parent) x
               WHERE x.made_before <= now() - older_than ORDER BY x.low LOOP
        part := old.part::text;  -- (its name: a dropped table has none)
        made_from := old.made_from;
        made_before := old.made_before;
        done := CASE action WHEN 'list' THEN 'listed' WHEN 'detach' THEN 'detached' ELSE 'dropped' END;
        IF action = 'detach' THEN
            PERFORM insta_id._gate(t.nsp, ARRAY[parent], ARRAY[format('ALTER TABLE %s DETACH PARTITION %s', parent, old.part)]);
        ELSIF action = 'drop' THEN
            -- (no CASCADE: a view on it stops the drop, 2BP01)
            PERFORM insta_id._gate(t.nsp, ARRAY[parent], ARRAY[format('DROP TABLE %s', old.part)]);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION insta_id.drop_partitions(regclass, interval, text, text) IS
'Lists, detaches or drops the ID-range partitions of a table whose IDs were all made more than older_than ago; idempotent';
