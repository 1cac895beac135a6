#!/usr/bin/env bash
# Several real servers, one logical design (scripts/demo/fleet.sh: 3 servers, 300
# logical shards from one template, a PL/Proxy router):
# - writers on all servers at once, directly and through the router: every
#   ID collected from all servers is unique, decodes to the shard whose table
#   holds it, carries the time it was written, and routed writes land on the
#   server the map names;
# - logical shard 150 moves from server 2 to server 3 (README procedure, the
#   router's map as the lock-out); writes resume there, no ID repeats;
# - a streaming standby of server 3 refuses next_id like nextval, and after
#   promotion mints IDs that repeat none of the primary's.
source "$(dirname "$0")/../scripts/dev/harness.sh"
SECONDS_OF_LOAD=${SECONDS_OF_LOAD:-5}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
[ "$(id -u)" = 0 ] && chmod 777 "$work"
fleet() { "$repo/scripts/demo/fleet.sh" "$@"; }
on() { local n=$1; shift; ( eval "$(fleet env "$n")"; q "$@" ); }

SECONDS=0
fleet up 3 300 >/dev/null
echo "     fleet up after ${SECONDS}s"
collect() { # all users of all servers into collect.users on server 1
  on 1 -d postgres -c "DROP DATABASE IF EXISTS collect" -c "CREATE DATABASE collect"
  on 1 -d collect -c "CREATE EXTENSION insta_id" \
    -c "CREATE TABLE users (server int, shard int, id bigint, written_at timestamptz)"
  for n in 1 2 3; do
    on "$n" -d app -c "COPY (SELECT $n, shard, id, written_at FROM all_users()) TO STDOUT" \
      | on 1 -d collect -c "COPY users FROM STDIN"
  done
}

# Writers everywhere at once: 2 clients per server writing 10 rows per
# statement into random shards of that server, and 2 clients writing single
# rows through the router to random logical shards.
echo "SELECT write_random(10);" >"$work/direct.sql"
printf '\\set s random(1, 300)\nSELECT insert_user(:s, %s);\n' "'routed'" >"$work/routed.sql"
pids=()
for n in 1 2 3; do
  ( eval "$(fleet env "$n")"; pgbench -n -c 2 -j 1 -T "$SECONDS_OF_LOAD" -f "$work/direct.sql" app >"$work/pgbench-$n.log" 2>&1 ) &
  pids+=($!)
done
( eval "$(fleet env 1)"; pgbench -n -c 2 -j 1 -T "$SECONDS_OF_LOAD" -f "$work/routed.sql" router >"$work/pgbench-router.log" 2>&1 ) &
pids+=($!)
for p in "${pids[@]}"; do wait "$p" || { cat "$work"/pgbench-*.log; check "pgbench ran" failed ok; }; done

collect
echo "     after ${SECONDS}s collected: $(on 1 -d collect -F ' ' -c "SELECT count(*) || ' IDs from ' || count(DISTINCT server) || ' servers, ' || count(DISTINCT shard) || ' shards' FROM users")"
check "every server and the router wrote" \
  "$(on 1 -d collect -c "SELECT count(DISTINCT server) = 3 AND bool_and(n > 1000) FROM (SELECT server, count(*) n FROM users GROUP BY server) s")" t
check "every ID from all servers is unique" "$(on 1 -d collect -c "SELECT count(*) - count(DISTINCT id) FROM users")" 0
check "every ID decodes to the shard whose table holds it" \
  "$(on 1 -d collect -c "SELECT count(*) FROM users WHERE insta_id.shard_id(id) <> shard")" 0
# Time order: the time field of every ID is when its row was written (the ID
# is minted first, written_at a moment later in the same row), so sorting by
# ID sorts by write time to the millisecond (up to a preempted writer's delay).
check "every ID's time field is the moment its row was written (within 1 s before written_at)" \
  "$(on 1 -d collect -c "SELECT count(*) FROM users WHERE insta_id.created_at(id) > written_at
                                 OR insta_id.created_at(id) < written_at - interval '1 second'")" 0
check "routed writes landed on the server the map names (shards 1-100: 1, 101-200: 2, 201-300: 3)" \
  "$(on 1 -d collect -c "SELECT count(*) FROM users u WHERE u.server <> (u.shard - 1) / 100 + 1")" 0

# Move logical shard 150 from server 2 to server 3.
# 1. Lock writers out: the router's map sends shard 150 nowhere.
on 1 -d router -c "UPDATE shard_map SET connstr = 'host=/nonexistent dbname=shard_150_moving' WHERE shard_id = 150" \
  -c "SELECT bump_map_version()" >/dev/null
check "during the move, writes to shard 150 fail" \
  "$(on 1 -d router -c "SELECT insert_user(150, 'x')" 2>&1 | grep -c 'shard_150_moving')" 1
# 2.-4. Dump, restore, adopt.
( eval "$(fleet env 2)"; pg_dump -Fc -n insta150 -f "$work/insta150.dump" app )
( eval "$(fleet env 3)"; pg_restore -d app "$work/insta150.dump" )
on 3 -d app -c "SELECT insta_id.adopt_shard('insta150', 150)" >/dev/null
# 5. Point the map at server 3.
on 1 -d router -c "UPDATE shard_map SET server = 3, connstr = (SELECT connstr FROM shard_map WHERE shard_id = 300) WHERE shard_id = 150" \
  -c "SELECT bump_map_version()" >/dev/null
check "after the move, routed writes to shard 150 land on server 3" \
  "$(on 1 -d router -c "SELECT insta_id.shard_id(insert_user(150, 'moved'))"; on 3 -d app -c "SELECT count(*) FROM insta150.users WHERE name = 'moved'")" "150
1"
on 1 -d router -c "SELECT insert_user(150, 'moved') FROM generate_series(1, 200)" >/dev/null
on 2 -d app -c "SET client_min_messages = warning" -c "SELECT insta_id.drop_shard(150, force => true)" >/dev/null
collect
check "after the move, still no ID repeats anywhere" "$(on 1 -d collect -c "SELECT count(*) - count(DISTINCT id) FROM users")" 0
check "shard 150 lives on server 3 only, with its old rows and 201 new ones" \
  "$(on 1 -d collect -F ' ' -c "SELECT string_agg(DISTINCT server::text, ','), count(*) FILTER (WHERE written_at > now() - interval '1 minute' AND id > 0) >= 201 FROM users WHERE shard = 150")" "3 t"

# Online moves (scripts/move_shard.sh, through `fleet.sh move`): a fourth
# server, and logical shards 25, 125 and 225 (one from each server) moved onto
# it while a client keeps inserting into them through the router, retrying
# what fails; the third move is killed after the router's map switch and run
# again.
fleet add 4 >/dev/null
fleet writer "$work/stop" "$work/routed" 25 125 225 &
wpid=$!
sleep 1
rcs=""
for s in 25 125; do rc=0; fleet move $s 4 >"$work/move-$s.log" 2>&1 || rc=$?; rcs+="$rc "; done
rc=0; MOVE_STOP_AFTER=map fleet move 225 4 >"$work/move-225.log" 2>&1 || rc=$?; rcs+="$rc "
rc=0; fleet move 225 4 >>"$work/move-225.log" 2>&1 || rc=$?; rcs+="$rc"
sleep 1; touch "$work/stop"; wait $wpid
sed 's/^/     /' "$work/move-125.log" "$work/move-225.log"
read -r routed_ok routed_failed <"$work/routed.summary"
echo "     routed writer: $routed_ok rows committed, $routed_failed attempts failed and were retried"
check "the moves succeeded; the one killed after the map switch finished when run again" "$rcs" "0 0 137 0"
check "the map sends the three shards to server 4" \
  "$(on 1 -d router -c "SELECT string_agg(server::text, ',' ORDER BY shard_id) FROM shard_map WHERE shard_id IN (25, 125, 225)")" "4,4,4"
check "every row the client committed through the router is on server 4, once" \
  "$(on 4 -d app -c "SELECT sum(n) FROM (SELECT count(*) n FROM insta25.users WHERE name = 'writer' UNION ALL
                                        SELECT count(*) FROM insta125.users WHERE name = 'writer' UNION ALL
                                        SELECT count(*) FROM insta225.users WHERE name = 'writer') x")" "$routed_ok"
check "no ID repeats among them" "$(cut -d'|' -f2 "$work/routed" | sort | uniq -d | wc -l)|$(wc -l <"$work/routed")" "0|$routed_ok"
check "the old servers hold none of them, and no publication, slot or subscription is left" \
  "$(for n in 1 2 3; do on "$n" -d app -c "SELECT (SELECT count(*) FROM insta_id.shards WHERE shard_id IN (25, 125, 225))
     + (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots)"; done | tr '\n' ' ')$(on 4 -d app -c "SELECT count(*) FROM pg_subscription")" "0 0 0 0"
gap=$(on 1 -d router -c "SELECT extract(epoch FROM max(t - p)) FROM (SELECT t, lag(t) OVER (ORDER BY t) p
      FROM (SELECT split_part(l, '|', 3)::timestamptz t FROM unnest(string_to_array(pg_read_file('$work/routed'), E'\n')) l WHERE l <> '') x) y")
echo "     longest gap between two routed writes: $gap s"
check "the longest gap is under 30 s (a bound, not a measurement)" "$(on 1 -d router -c "SELECT $gap < 30")" t

# A streaming standby of server 3, then a failover.
eval "$(fleet env 3)"
standby="$(cluster_dir fleet-3-standby)"
rm -rf "$standby"; mkdir -p "$standby"
[ "$(id -u)" = 0 ] && chown postgres "$standby"
as_pg pg_basebackup --checkpoint=fast -D "$standby/data" -R -X stream -h "$PGHOST" -p "$PGPORT" -U postgres
sport=$((PGPORT + 100))
as_pg tee -a "$standby/data/postgresql.auto.conf" >/dev/null <<CONF
port = $sport
unix_socket_directories = '$standby'
CONF
as_pg pg_ctl -D "$standby/data" -l "$standby/server.log" -w start >/dev/null
primary_last=$(q -d app -c "SELECT max(id) FROM insta150.users")
primary_seq=$(q -d app -c "SELECT last_value FROM insta150.users_id_seq")
until [ "$(q -h "$standby" -p $sport -d app -c "SELECT count(*) FROM insta150.users WHERE id = $primary_last")" = 1 ]; do sleep 0.2; done
check "on a hot standby, next_id fails like nextval (25006)" \
  "$(q -h "$standby" -p $sport -d app -c "SELECT insta_id.next_id(150, 'insta150.users_id_seq')" 2>&1 | grep -o 'cannot execute nextval() in a read-only transaction' | head -n1)" \
  "cannot execute nextval() in a read-only transaction"
as_pg pg_ctl -D "$(cluster_dir fleet-3)/data" -m immediate -w stop >/dev/null
as_pg pg_ctl -D "$standby/data" -w promote >/dev/null
new=$(q -h "$standby" -p $sport -d app -c "INSERT INTO insta150.users (name) SELECT 'after failover' FROM generate_series(1, 100) RETURNING id" | tr '\n' ',')
check "after promotion, the new primary mints IDs for shard 150" \
  "$(q -h "$standby" -p $sport -d app -c "SELECT count(*) FROM insta150.users WHERE name = 'after failover' AND insta_id.shard_id(id) = 150")" 100
check "and none repeats an ID of the old primary" \
  "$(on 1 -d collect -c "SELECT count(*) FROM users WHERE id = ANY (string_to_array(rtrim('$new', ','), ',')::bigint[])")" 0
check_true "the new primary's sequence went on above every value the old one handed out ($primary_seq)" \
  "SELECT last_value - 99 > $primary_seq FROM insta150.users_id_seq" -h "$standby" -p $sport -d app
as_pg pg_ctl -D "$standby/data" -m fast -w stop >/dev/null
rm -rf "$standby"
fleet down
finish
