-- The router database of the fleet (scripts/demo/fleet.sh): the logical-to-
-- physical map and PL/Proxy routing. Applications call these functions on
-- the router; PL/Proxy runs each call on the server that holds the shard.

-- Logical shard -> physical server. Moving a shard = UPDATE its row and
-- bump_map_version() (PL/Proxy rereads the map when the version changes).
CREATE TABLE shard_map (
    shard_id int PRIMARY KEY CHECK (shard_id BETWEEN 0 AND 8191),
    server   int  NOT NULL,
    connstr  text NOT NULL
);
CREATE TABLE map_version (v int NOT NULL);
INSERT INTO map_version VALUES (1);
CREATE FUNCTION bump_map_version() RETURNS int LANGUAGE sql
AS $$ UPDATE public.map_version SET v = v + 1 RETURNING v $$;

-- PL/Proxy's configuration functions. PL/Proxy wants a power-of-two number of
-- partitions; RUN ON <shard id> picks partition (shard id & (n - 1)), so with
-- 8192 partitions partition N is logical shard N. Unmapped shards point at a
-- connection string that fails clearly.
CREATE SCHEMA plproxy;
CREATE FUNCTION plproxy.get_cluster_version(cluster_name text) RETURNS int
LANGUAGE sql STABLE AS $$ SELECT v FROM public.map_version $$;
CREATE FUNCTION plproxy.get_cluster_partitions(cluster_name text) RETURNS SETOF text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(m.connstr, 'host=/nonexistent dbname=unmapped_logical_shard_' || s)
    FROM generate_series(0, 8191) s LEFT JOIN public.shard_map m ON m.shard_id = s
    ORDER BY s
$$;
CREATE FUNCTION plproxy.get_cluster_config(IN cluster_name text, OUT key text, OUT val text)
RETURNS SETOF record LANGUAGE sql STABLE AS $$ SELECT 'connection_lifetime'::text, '600'::text $$;

-- The application's API, routed by shard id or by the ID itself.
CREATE FUNCTION insert_user(shard int, name text) RETURNS bigint
LANGUAGE plproxy AS $$ CLUSTER 'fleet'; RUN ON shard; $$;
CREATE FUNCTION get_user(id bigint) RETURNS text
LANGUAGE plproxy AS $$ CLUSTER 'fleet'; RUN ON insta_id.shard_id(id); $$;

-- Re-points one logical shard at another server and bumps the map's version
-- in one transaction (insta-id move --router, after the cutover);
-- returns the new version. A server new to the map gets the next number.
CREATE FUNCTION repoint_shard(shard int, new_connstr text) RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  UPDATE public.shard_map
  SET connstr = new_connstr,
      server = coalesce((SELECT max(m.server) FROM public.shard_map m WHERE m.connstr = new_connstr),
                        (SELECT max(m.server) + 1 FROM public.shard_map m))
  WHERE shard_id = shard;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'logical shard % is not in the map', shard USING ERRCODE = 'undefined_object';
  END IF;
  RETURN public.bump_map_version();
END $$;
