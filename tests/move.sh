#!/usr/bin/env bash
# Moving a logical shard online (scripts/move_shard.sh), from PostgreSQL 15
# to 18 (the zero-downtime upgrade path), while a writer keeps inserting into
# it: like a client behind a router, it writes to the old server and, when
# that fails, to the new one, and counts its failures.
# - refusals before anything is made: an unregistered shard, a table without
#   a key or replica identity, the schema already on the new server;
# - every committed row is on the new server, no ID repeats, the shard and
#   its migration history are registered there and gone from the old one,
#   the new sequences continue past the old ones, no slot, publication or
#   subscription is left; the longest gap between two committed writes is
#   printed (and bounded generously: this is not a timing test).
source "$(dirname "$0")/../scripts/harness.sh"
work=$(mktemp -d); trap 'touch "$work/stop"; wait; rm -rf "$work"' EXIT
[ "$(id -u)" = 0 ] && chmod 777 "$work"

use_pg 15 "$(pg_binaries_config 15)"   # (Debian's 15.20 marks every column with an option no other build knows: docs/upgrading.md)
start_cluster move-old --preload --conf 'wal_level = logical' >/dev/null
old="host=$(cluster_dir move-old) port=$(cluster_port move-old) user=postgres dbname=app"
use_pg 18
start_cluster move-new --conf 'wal_level = logical' >/dev/null
new="host=$(cluster_dir move-new) port=$(cluster_port move-new) user=postgres dbname=app"
for c in "$old" "$new"; do
  psql -X -q "${c/dbname=app/dbname=postgres}" -c "CREATE DATABASE app"
  psql -X -q "$c" -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id"
done
psql -X -q -v ON_ERROR_STOP=1 "$old" -f "$repo/tests/fixtures/shard_template.sql" \
  -c "ALTER TABLE template.likes REPLICA IDENTITY USING INDEX likes_photo_id_user_id_key" \
  -c "SELECT insta_id.create_shards(1, 8, 'template')" \
  -c "CALL insta_id.migrate('0001_users_bio', 'template', 'ALTER TABLE users ADD COLUMN bio text')" \
  -c "INSERT INTO insta7.users (name) SELECT 'u' || g FROM generate_series(1, 20000) g" \
  -c "CREATE SCHEMA nokey" -c "CREATE TABLE nokey.t (v int)" -c "SELECT insta_id.adopt_shard('nokey', 9)" >/dev/null 2>&1
move() { MOVE_COPY_SECONDS=120 "$repo/scripts/move_shard.sh" "$@" 2>&1; }

check "refused: a shard not registered on the old server" "$(move 99 "$old" "$new" | tail -n1)" \
  "move_shard: shard 99 is not registered on the old server"
check "refused: a table without a key or replica identity" "$(move 9 "$old" "$new" | tail -n1)" \
  "move_shard: tables without a primary key or replica identity: nokey.t"
q "$new" -c "CREATE SCHEMA insta8"
check "refused: the schema already exists on the new server" "$(move 8 "$old" "$new" | tail -n1)" \
  "move_shard: schema insta8 exists on the new server"
check "refused moves made nothing: no publication, no slot" \
  "$(q "$old" -c "SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots)")" 0

# The writer: one INSERT per connection, to the old server, else the new one.
writer() {
  local ok=0 failed=0 i=0 until=$((SECONDS + 300))
  while [ ! -e "$work/stop" ] && [ -d "$work" ] && [ $SECONDS -lt $until ]; do
    i=$((i + 1))
    if q "$old" -c "INSERT INTO insta7.users (name) VALUES ('w$i') RETURNING id, clock_timestamp()" >>"$work/ids" 2>/dev/null \
       || q "$new" -c "INSERT INTO insta7.users (name) VALUES ('w$i') RETURNING id, clock_timestamp()" >>"$work/ids" 2>/dev/null; then
      ok=$((ok + 1))
    else
      failed=$((failed + 1))
    fi
  done
  echo "$ok $failed" >"$work/writer"
}
writer &
wpid=$!
sleep 1
rc=0; move 7 "$old" "$new" >"$work/move.log" || rc=$?
sleep 1; touch "$work/stop"; wait $wpid
sed 's/^/     /' "$work/move.log"
read -r ok failed <"$work/writer"
echo "     writer: $ok rows committed, $failed attempts failed on both servers"
check "the move succeeded" "$rc" 0
check "every committed row is on the new server, the 20,000 copied ones too" \
  "$(q "$new" -c "SELECT count(*) FILTER (WHERE name LIKE 'w%'), count(*) FILTER (WHERE name LIKE 'u%') FROM insta7.users")" "$ok|20000"
check "no ID repeats, old server's or new" \
  "$(q "$new" -c "SELECT count(*) - count(DISTINCT id) FROM insta7.users")|$(cut -d'|' -f1 "$work/ids" | sort | uniq -d | wc -l)" "0|0"
gap=$(q "$new" -c "SELECT extract(epoch FROM max(t - p)) FROM (SELECT t, lag(t) OVER (ORDER BY t) p
      FROM (SELECT split_part(l, '|', 2)::timestamptz t FROM unnest(string_to_array(pg_read_file('$work/ids'), E'\n')) l WHERE l <> '') x) y")
echo "     longest gap between two committed writes: $gap s"
check_true "the longest gap is under 30 s (a bound, not a measurement)" "SELECT $gap < 30" "$new"
check "the shard and its migration history are on the new server" \
  "$(q "$new" -c "SELECT (SELECT schema_name FROM insta_id.shards WHERE shard_id = 7), (SELECT string_agg(migration, ',') FROM insta_id.applied_migrations WHERE schema_name = 'insta7')")" "insta7|0001_users_bio"
check "and gone from the old server" \
  "$(q "$old" -c "SELECT count(*) FROM insta_id.shards WHERE shard_id = 7")|$(q "$old" -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'insta7'")" "0|0"
check "nothing of the move is left: publication, slot, subscription" \
  "$(q "$old" -c "SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots)")|$(q "$new" -c "SELECT count(*) FROM pg_subscription")" "0|0"
carried=$(sed -nE 's/.*sequence insta7.users_id_seq continues after ([0-9]+).*/\1/p' "$work/move.log")
check_true "the new server's sequence continues past the old one's ($carried)" \
  "SELECT last_value > ${carried:-NULL} FROM insta7.users_id_seq" "$new"
check "the shard takes writes on the new server, with its own shard number" \
  "$(q "$new" -c "INSERT INTO insta7.users (name) VALUES ('after') RETURNING insta_id.shard_id(id)")" 7
use_pg 15 "$(pg_binaries_config 15)"; stop_cluster move-old
use_pg 18; stop_cluster move-new
finish
