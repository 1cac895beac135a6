-- Functions of every data server of the fleet (scripts/demo/fleet.sh). The router
-- calls them through PL/Proxy; a call for a shard this server does not hold
-- fails loudly instead of writing to the wrong place.
CREATE FUNCTION shard_schema(shard int) RETURNS name
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE nsp name;
BEGIN
  nsp := insta_id.shard_schema(shard);
  IF nsp IS NULL THEN
    RAISE EXCEPTION 'logical shard % is not on this server', shard USING ERRCODE = 'undefined_object';
  END IF;
  RETURN nsp;
END $$;

CREATE FUNCTION insert_user(shard int, name text) RETURNS bigint
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE new_id bigint;
BEGIN
  EXECUTE format('INSERT INTO %I.users (name) VALUES ($1) RETURNING id', public.shard_schema(shard))
    INTO new_id USING name;
  RETURN new_id;
END $$;

-- Where a user lives follows from its ID alone.
CREATE FUNCTION get_user(id bigint) RETURNS text
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE result text;
BEGIN
  EXECUTE format('SELECT name FROM %I.users WHERE id = $1', public.shard_schema(insta_id.shard_id(id)))
    INTO result USING id;
  RETURN result;
END $$;

-- Load for the concurrent-writer test: `rows` users into one random shard of this server.
CREATE FUNCTION write_random(rows int) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE nsp name;
BEGIN
  SELECT schema_name INTO nsp FROM insta_id.shards() ORDER BY random() LIMIT 1;
  EXECUTE format('INSERT INTO %I.users (name) SELECT ''load'' FROM generate_series(1, $1)', nsp) USING rows;
END $$;

-- Every user of every shard on this server: (shard the table belongs to, id, written_at).
CREATE FUNCTION all_users() RETURNS TABLE (shard int, id bigint, written_at timestamptz)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT shard_id, schema_name FROM insta_id.shards() ORDER BY shard_id LOOP
    RETURN QUERY EXECUTE format('SELECT %s, id, written_at FROM %I.users', r.shard_id, r.schema_name);
  END LOOP;
END $$;
