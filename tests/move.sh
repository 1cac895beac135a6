#!/usr/bin/env bash
# Moving a logical shard online (scripts/move_shard.sh) from PostgreSQL 15 to
# 18 (the zero-downtime upgrade path), the new server's clock 2 s behind the
# old one's (libfaketime):
# - refusals before anything is made: an unregistered shard, a table without
#   a key or replica identity, an unlogged table, the schema already on the
#   new server, wal_level, a shard another session is moving;
# - insta_id.migrate skips a shard being moved and says so (55006);
# - a move while a writer keeps inserting (to the old server, else the new
#   one, like a client behind a router): every committed row on the new
#   server, no ID repeated, the new server's first IDs later than the old
#   one's last although its clock is behind, history and registry moved,
#   nothing of the replication left; the longest gap between two committed
#   writes is printed (and bounded generously: this is not a timing test);
# - until the cutover the new server's copy refuses clients' writes (55006);
# - a long reader makes the cutover's lock give up after MOVE_LOCK_TIMEOUT and
#   try again;
# - a move killed after each of its steps, then run again: the shard lives on
#   exactly one server after the kill, and the re-run finishes the move with
#   every row and nothing left behind (after the router's map switch:
#   tests/fleet.sh); two re-runs at once after the cutover both finish;
# - a shard whose owner filled it with decoys of every pg_catalog function
#   and operator (tests/fixtures/decoys.sql): none runs as the superuser
#   moving it;
# - 15 -> 16 not preloaded (the per-session guard), its clock 2 s behind: a
#   session opened there before the move mints IDs after the old server's.
source "$(dirname "$0")/../scripts/dev/harness.sh"
work=$(mktemp -d); trap 'touch "$work/stop" "$work/reader-stop" "$work/stop12" "$work/moved16"; wait; rm -rf "$work"' EXIT
[ "$(id -u)" = 0 ] && chmod 777 "$work"

use_pg 15 "$(pg_binaries_config 15)"   # (Debian's 15.20 marks every column with an option no other build knows: docs/upgrading.md)
start_cluster move-old --preload --conf 'wal_level = logical' >/dev/null
old="host=$(cluster_dir move-old) port=$(cluster_port move-old) user=postgres dbname=app"
use_pg 18
start_cluster move-new --faketime >/dev/null   # a subscriber needs no wal_level = logical
new="host=$(cluster_dir move-new) port=$(cluster_port move-new) user=postgres dbname=app"
for c in "$old" "$new"; do
  psql -X -q "${c/dbname=app/dbname=postgres}" -c "CREATE DATABASE app"
  psql -X -q "$c" -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id"
done
q "$old" -f "$repo/tests/fixtures/shard_template.sql" \
  -c "SELECT insta_id.create_shards(1, 8, 'template')" -c "SELECT insta_id.create_shards(11, 15, 'template')" \
  -c "CALL insta_id.migrate('0001_users_bio', 'template', 'ALTER TABLE users ADD COLUMN bio text')" \
  -c "INSERT INTO insta7.users (name) SELECT 'u' || g FROM generate_series(1, 20000) g" \
  -c "CREATE SCHEMA nokey" -c "CREATE TABLE nokey.t (v int)" -c "SELECT insta_id.adopt_shard('nokey', 9)" >/dev/null
for s in 1 2 3 4 5 6 13 14; do
  q "$old" -c "INSERT INTO insta$s.users (name) SELECT 'u' || g FROM generate_series(1, 100) g" \
    -c "INSERT INTO insta$s.photos (user_id) SELECT id FROM insta$s.users"
done
move() { MOVE_COPY_SECONDS=120 "$repo/scripts/move_shard.sh" "$@" 2>&1; }
rows_of() { q "$1" -c "SELECT (SELECT count(*) FROM insta$2.users) || '/' || (SELECT count(*) FROM insta$2.photos)"; }   # SERVER SHARD
nothing_left() { # publications, slots, subscriptions, write fences of a move, on both servers
  echo "$(q "$old" -c "SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots)")|$(q "$new" -c "SELECT (SELECT count(*) FROM pg_subscription) + (SELECT count(*) FROM pg_trigger WHERE tgname = 'insta_id_move_fence')")"
}

check "refused: a shard not registered on the old server (0099 is shard 99)" "$(move 0099 "$old" "$new" | tail -n1)" \
  "move_shard: shard 99 is not registered on the old server"
rc=0; out=$(move 7 "$old password=secret" "$new") || rc=$?
check "refused: a password in a connection string (it would be on psql's command line)" "$rc|$(echo "$out" | head -n1)" \
  "2|move_shard: a connection string holds a password: put it in ~/.pgpass (PGPASSFILE) or a service file instead (docs/shards.md, \"Moving a logical shard online\")"
rc=0; out=$(move 7 "$old" "postgresql://postgres:secret@localhost/app") || rc=$?
check "refused: a password in a URI" "$rc|$(echo "$out" | grep -c 'holds a password')" "2|1"
rc=0; out=$(move --router "$old" 7 "$old" "$new") || rc=$?
check "refused: --router without the application's connection string (--router-target)" "$rc|$(echo "$out" | head -n1)" \
  "2|move_shard: --router needs --router-target: the new server's connection string for the application, not this script's"
check "refused: a table without a key or replica identity" "$(move 9 "$old" "$new" | tail -n1)" \
  "move_shard: tables without a primary key or replica identity: nokey.t"
q "$old" -c "SELECT insta_id.drop_shard(9, force => true)" -c "SELECT insta_id.create_shards(10, 10, 'template')" \
  -c "CREATE UNLOGGED TABLE insta10.cache (k int PRIMARY KEY)" >/dev/null
check "refused: an unlogged table (a publication leaves it out: its rows would be lost)" "$(move 10 "$old" "$new" | tail -n1)" \
  "move_shard: unlogged tables or materialized views, which logical replication does not carry: insta10.cache"
# What an earlier move's cleanup would have dropped.
q "$old" -c "CREATE FUNCTION insta15.insta_id_move_fence() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'" >/dev/null
check "refused: the shard still has the fence of the move that brought it" "$(move 15 "$old" "$new" | tail -n1)" \
  "move_shard: insta15 still has the fence of the move that brought it here (insta_id_move_fence): run that move again to finish its cleanup"
q "$new" -c "CREATE SCHEMA insta8"
check "refused: the schema already exists on the new server" "$(move 8 "$old" "$new" | tail -n1)" \
  "move_shard: schema insta8 exists on the new server"
q "$new" -c "CREATE TABLE insta8.t (id bigint PRIMARY KEY)" -c "SELECT insta_id.adopt_shard('insta8', 8)" >/dev/null
check "refused: registered on both servers" "$(move 8 "$old" "$new" | tail -n1)" \
  "move_shard: shard 8 is registered on both servers: not a state this script leaves; compare them and drop one by hand"
q "$new" -c "SELECT insta_id.drop_shard(8, force => true)" \
  -c "CREATE SCHEMA s50" -c "CREATE TABLE s50.t (id bigint PRIMARY KEY)" -c "SELECT insta_id.adopt_shard('s50', 50)" >/dev/null
check "refused: wal_level is not logical on the old server" "$(move 50 "$new" "$old" | tail -n1)" \
  "move_shard: wal_level on the old server is not logical"

# Another session marks shard 5 as being moved (what the script's session does).
q "$old" -c "SELECT insta_id.lock_shard_for_move(5)" -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
holder=$!
until [ "$(q "$old" -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = insta_id._move_lock_key() AND objid = 5")" = 1 ]; do sleep 0.1; done
move 5 "$old" "$new" >"$work/locked.log" || true
check "refused: a shard another session is moving" "$(grep -c "ERROR:  shard 5 is being moved or migrated" "$work/locked.log")" 1
out=$(q "$old" -c "CALL insta_id.migrate('0002_users_bio_index', 'template', 'CREATE INDEX ON users (bio)')" 2>&1 || true)
check "migrate skips a shard being moved and fails naming it (55006)" \
  "$(echo "$out" | grep -c 'shard 5 (schema insta5) is being moved to another server, skipped')|$(echo "$out" | grep -o 'ERROR:  migration .* skipped shards being moved to another server: 5')" \
  "1|ERROR:  migration '0002_users_bio_index' skipped shards being moved to another server: 5"
check "every other shard has the migration" \
  "$(q "$old" -c "SELECT string_agg(schema_name, ',') FROM insta_id.pending_migrations WHERE migration = '0002_users_bio_index'")" "insta5"
q "$old" -c "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = insta_id._move_lock_key() AND objid = 5" >/dev/null
wait "$holder" 2>/dev/null || true
check "once the move is over, migrate finishes the skipped shard" \
  "$(q "$old" -c "SET client_min_messages = warning" -c "CALL insta_id.migrate('0002_users_bio_index', 'template', 'CREATE INDEX ON users (bio)')" \
       -c "SELECT count(*) FROM insta_id.pending_migrations")" 0
check "refused moves made nothing: no publication, slot or subscription" "$(nothing_left)" "0|0"

# The new server's clock 2 s behind the old one's, for the rest of the test.
clock_offset move-new -2
check_true "the new server's clock is behind the old one's" \
  "SELECT clock_timestamp() < '$(q "$old" -c "SELECT clock_timestamp()")'::timestamptz - interval '1 s'" "$new"
# The writer: one INSERT per connection, to the old server, else the new one.
writer() {
  local ok=0 failed=0 i=0 until=$((SECONDS + 300))
  while [ ! -e "$work/stop" ] && [ -d "$work" ] && [ $SECONDS -lt $until ]; do
    i=$((i + 1))
    if q "$old" -c "INSERT INTO insta7.users (name) VALUES ('w$i') RETURNING id, clock_timestamp(), 'old'" >>"$work/ids" 2>/dev/null \
       || q "$new" -c "INSERT INTO insta7.users (name) VALUES ('w$i') RETURNING id, clock_timestamp(), 'new'" >>"$work/ids" 2>/dev/null; then
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
read -r ok wfailed <"$work/writer"
echo "     writer: $ok rows committed, $wfailed attempts failed on both servers"
check "the move succeeded" "$rc" 0
check "the cutover said what it dropped on the old server" \
  "$(grep -o 'dropping schema insta7 on the old server: .*' "$work/move.log")" \
  "dropping schema insta7 on the old server: table likes, sequence likes_id_seq, table photos, sequence photos_id_seq, table users, sequence users_id_seq, 0 functions, 0 types (never another schema's objects: drop_shard refuses those)"
check "every committed row is on the new server, the 20,000 copied ones too" \
  "$(q "$new" -c "SELECT count(*) FILTER (WHERE name LIKE 'w%'), count(*) FILTER (WHERE name LIKE 'u%') FROM insta7.users")" "$ok|20000"
check "no ID repeats, old server's or new" \
  "$(q "$new" -c "SELECT count(*) - count(DISTINCT id) FROM insta7.users")|$(cut -d'|' -f1 "$work/ids" | sort | uniq -d | wc -l)" "0|0"
# Uniqueness with the new clock behind rests on this: the new server's IDs
# start after every millisecond the old one used (its high-water mark).
ids() { q "$new" -c "SELECT insta_id.created_at($1(split_part(l, '|', 1)::bigint)) FROM unnest(string_to_array(pg_read_file('$work/ids'), E'\n')) l
                      WHERE split_part(l, '|', 3) = '$2'"; }
check_true "the new server's first ID is later than the old server's last ($(ids max old) < $(ids min new))" \
  "SELECT '$(ids min new)'::timestamptz > '$(ids max old)'" "$new"
gap=$(q "$new" -c "SELECT extract(epoch FROM max(t - p)) FROM (SELECT t, lag(t) OVER (ORDER BY t) p
      FROM (SELECT split_part(l, '|', 2)::timestamptz + CASE split_part(l, '|', 3) WHEN 'new' THEN interval '2 s' ELSE interval '0' END t
            FROM unnest(string_to_array(pg_read_file('$work/ids'), E'\n')) l WHERE l <> '') x) y")
echo "     longest gap between two committed writes: $gap s"
check_true "the longest gap is under 30 s (a bound, not a measurement)" "SELECT $gap < 30" "$new"
check "the shard and its migration history are on the new server" \
  "$(q "$new" -c "SELECT (SELECT schema_name FROM insta_id.shards WHERE shard_id = 7), (SELECT string_agg(migration, ',' ORDER BY migration) FROM insta_id.applied_migrations WHERE schema_name = 'insta7')")" \
  "insta7|0001_users_bio,0002_users_bio_index"
check "and gone from the old server" \
  "$(q "$old" -c "SELECT count(*) FROM insta_id.shards WHERE shard_id = 7")|$(q "$old" -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'insta7'")" "0|0"
check "nothing of the move is left: publication, slot, subscription, fence" "$(nothing_left)" "0|0"
check "the shard takes writes on the new server, with its own shard number" \
  "$(q "$new" -c "INSERT INTO insta7.users (name) VALUES ('after') RETURNING insta_id.shard_id(id)")" 7

# A long reader on the shard: the cutover's lock gives up after
# MOVE_LOCK_TIMEOUT, lets the writers go on and tries again. The reader ends
# once the move has said so.
# Shard 11 also has a partitioned table: the fence is on the parent and on
# each partition.
q "$old" -c "INSERT INTO insta11.users (name) SELECT 'u' || g FROM generate_series(1, 10) g" \
  -c "CREATE TABLE insta11.events (id bigint, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)" \
  -c "CREATE TABLE insta11.events_2026 PARTITION OF insta11.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')" \
  -c "CREATE TABLE insta11.events_rest PARTITION OF insta11.events DEFAULT" \
  -c "INSERT INTO insta11.events SELECT g, date '2026-12-20' + g FROM generate_series(1, 30) g" >/dev/null
q "$old" -c "BEGIN" -c "SELECT count(*) FROM insta11.users" \
  -c "DO \$\$ BEGIN FOR i IN 1..1200 LOOP EXIT WHEN (pg_stat_file('$work/reader-stop', true)).modification IS NOT NULL;
                  PERFORM pg_sleep(0.1); END LOOP; END \$\$" -c "COMMIT" >/dev/null &
reader=$!
for i in $(seq 300); do
  [ "$(q "$old" -c "SELECT count(*) FROM pg_locks WHERE relation = 'insta11.users'::regclass AND mode = 'AccessShareLock' AND granted")" = 0 ] || break
  sleep 0.1
done
( for i in $(seq 1200); do grep -q 'attempt 1 of 5' "$work/reader.log" 2>/dev/null && break; sleep 0.1; done; touch "$work/reader-stop" ) &
rc=0; MOVE_LOCK_TIMEOUT=1s move 11 "$old" "$new" >"$work/reader.log" || rc=$?
wait $reader || true
grep 'attempt' "$work/reader.log" | sed 's/^/     /' || true
check "a long reader: the cutover's lock tried again after 1 s and the move finished (exit $rc)" \
  "$(grep -c 'WARNING:  the shard.s tables not locked within 1s, attempt 1 of 5: writers go on' "$work/reader.log")|$(q "$new" -c "SELECT count(*) FROM insta11.users")|$(nothing_left)" \
  "1|10|0|0"
check "its partitioned table came along, and takes writes on the new server" \
  "$(q "$new" -c "INSERT INTO insta11.events VALUES (31, '2027-02-01'), (32, '2026-06-01')" -c "SELECT count(*) FROM insta11.events_rest")|$(q "$new" -c "SELECT count(*) FROM insta11.events")" \
  "20|32"

# A hostile shard owner (issue 23): the application role owns shard 16 and
# fills it with a decoy of every pg_catalog function and operator it can
# shadow (tests/fixtures/decoys.sql), each logging who called it. The move,
# run by a superuser, calls none of them, on either server.
for c in "$old" "$new"; do
  q "$c" -c "CREATE ROLE app_owner" -c "GRANT CREATE ON DATABASE app TO app_owner" \
    -c "SET ROLE app_owner" -c "SET client_min_messages = warning" -f "$repo/tests/fixtures/decoys.sql" >/dev/null
done
planted=$(q "$old" -c "SELECT insta_id.create_shards(16, 16, 'template')" -c "ALTER SCHEMA insta16 OWNER TO app_owner" \
            -c "SET ROLE app_owner" -c "SET client_min_messages = warning" -c "SELECT hostile.plant('insta16')" | tail -n1)
rc=0; move 16 "$old" "$new" >"$work/hostile.log" || rc=$?
check "a shard with $planted decoys moved (exit $rc), its decoys along; none ran as a superuser, on either server" \
  "$rc|$(q "$new" -c "SELECT count(*) > 3000 FROM pg_proc WHERE pronamespace = 'insta16'::regnamespace")|$(
   q "$old" -c "SELECT count(*) FROM hostile.log WHERE superuser")|$(q "$new" -c "SELECT count(*) FROM hostile.log WHERE superuser")|$(
   q "$old" -c "SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'")" "0|t|0|0|f"

# Killed after each step, then run again.
n=0
for at in slot copy blocked sequences cutover adopted unsubscribed; do
  n=$((n + 1)); [ $n != 7 ] || n=13   # shard n (7 moved above)
  rows=$(rows_of "$old" $n)
  rc=0; MOVE_STOP_AFTER=$at move $n "$old" "$new" >"$work/kill.log" || rc=$?
  where=$(q "$old" -c "SELECT count(*) FROM insta_id.shards WHERE shard_id = $n")$(q "$new" -c "SELECT count(*) FROM insta_id.shards WHERE shard_id = $n")
  if [ "$at" = copy ]; then   # the copy on the new server, before the cutover
    refused=""
    for sql in "INSERT INTO insta$n.users (name) VALUES ('early')" "UPDATE insta$n.photos SET caption = 'early'" "TRUNCATE insta$n.likes"; do
      out=$(q "$new" -v VERBOSITY=verbose -c "$sql" 2>&1 || true)
      refused+=$(grep -o "ERROR:  55006: shard $n is being moved to this server" <<<"$out" | cut -c9-13 || true),
    done
    check "the copy on the new server refuses a client's INSERT, UPDATE, TRUNCATE until it is adopted" "$refused" "55006,55006,55006,"
  fi
  if [ "$at" = adopted ]; then   # adopted, the cleanup not run: the fence is there, open
    check "killed after the adoption, its fence still there, the new server takes writes" \
      "$(q "$new" -c "SELECT count(*) FROM pg_trigger WHERE tgname = 'insta_id_move_fence'")|$(q "$new" -c "INSERT INTO insta$n.users (name) VALUES ('after the adoption') RETURNING name")" \
      "3|after the adoption"
    rows=$(rows_of "$new" $n)
  fi
  if [ "$where" = 10 ]; then   # still the old server's: it takes writes there
    q "$old" -c "INSERT INTO insta$n.users (name) VALUES ('after the kill')" && rows=$(rows_of "$old" $n)
  fi
  move $n "$old" "$new" >"$work/rerun.log" || { cat "$work/kill.log" "$work/rerun.log"; }
  check "killed after '$at' (exit $rc), the shard on one server ($where: old new), a re-run finishes: $(grep -o '^== \(undo\|shard [0-9]* left\)' "$work/rerun.log" | head -n1 | cut -c4-)" \
    "$(rows_of "$new" $n)|$(q "$old" -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'insta$n'")|$(nothing_left)" \
    "$rows|0|0|0"
done
# Killed after the cutover, then two re-runs at once: they queue on the new
# server, the second finds the move finished.
rows=$(rows_of "$old" 14)
MOVE_STOP_AFTER=cutover move 14 "$old" "$new" >"$work/kill.log" || true
move 14 "$old" "$new" >"$work/fin1.log" & f1=$!
move 14 "$old" "$new" >"$work/fin2.log" & f2=$!
r1=0; wait $f1 || r1=$?; r2=0; wait $f2 || r2=$?
[ "$r1$r2" = 00 ] || cat "$work/fin1.log" "$work/fin2.log"
check "killed after the cutover, two re-runs at once both finish (exit $r1 $r2), every row there, nothing left" \
  "$r1$r2|$(rows_of "$new" 14)|$(q "$old" -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'insta14'")|$(nothing_left)" \
  "00|$rows|0|0|0"
use_pg 18; stop_cluster move-new

# Onto a server with the per-session guard (16, not preloaded), its clock 2 s
# behind: a session opened there before the move, which has used the guard,
# does not see the raised mark; the cutover waits until that server's clock
# passes it, so the session's IDs in the moved shard are later than the old
# server's last, written by a writer up to the cutover.
use_pg 16
start_cluster move-new16 --faketime >/dev/null
new16="host=$(cluster_dir move-new16) port=$(cluster_port move-new16) user=postgres dbname=app"
psql -X -q "${new16/dbname=app/dbname=postgres}" -c "CREATE DATABASE app"
q "$new16" -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id" -c "SELECT insta_id.create_shard(40)" \
  -c "CREATE TABLE insta40.t (v int)" -c "SELECT insta_id.add_id_column('insta40.t')" >/dev/null
clock_offset move-new16 -2
# The early session: uses the guard, waits (bounded) for the move to end,
# then writes to the moved shard.
q "$new16" -c "INSERT INTO insta40.t (v) VALUES (1)" \
  -c "DO \$\$ BEGIN FOR i IN 1..1200 LOOP EXIT WHEN (pg_stat_file('$work/moved16', true)).modification IS NOT NULL;
                  PERFORM pg_sleep(0.1); END LOOP; END \$\$" \
  -c "INSERT INTO insta12.users (name) VALUES ('early session') RETURNING insta_id.created_at(id)" >"$work/early.out" 2>&1 &
early=$!
for i in $(seq 300); do
  [ "$(q "$new16" -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%moved16%'")" = 0 ] || break
  sleep 0.1
done
check "the new server keeps the guard per session, and the early session has used it" \
  "$(q "$new16" -c "SELECT insta_id.guard_mode()")|$(q "$new16" -c "SELECT count(*) FROM insta40.t")" "session|1"
( while [ ! -e "$work/stop12" ]; do q "$old" -c "INSERT INTO insta12.users (name) VALUES ('w')" >/dev/null 2>&1 || true; done ) &
w12=$!
sleep 0.5
rc=0; move --subscription "$old" 12 "$old" "$new16" >"$work/move16.log" || rc=$?   # (the subscription's own connection string)
touch "$work/stop12" "$work/moved16"; wait $w12; wait $early || true
grep -A3 '== cutover' "$work/move16.log" | sed 's/^/     /' || cat "$work/move16.log"
at=$(cat "$work/early.out")
last=$(q "$new16" -c "SELECT max(insta_id.created_at(id)) FROM insta12.users WHERE name <> 'early session'" || true)
check_true "moved (exit $rc); that session's ID in the moved shard is later than the old server's last ($last < $at)" \
  "SELECT $rc = 0 AND '$at'::timestamptz > '$last'" "$new16"
stop_cluster move-new16
use_pg 15 "$(pg_binaries_config 15)"; stop_cluster move-old
finish
