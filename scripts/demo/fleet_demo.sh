#!/usr/bin/env bash
# `make cluster-demo`: 3 real PostgreSQL servers on this machine, 300 logical
# shards spread over them from one template, and a PL/Proxy router that runs
# each call on the server holding the shard; then a fourth server, and a
# quarter of the shards moved onto it online (insta-id move) while a
# client keeps inserting through the router. FLEET_KEEP=1 leaves it running
# (`scripts/demo/fleet.sh down` stops it).
source "$(dirname "$0")/../dev/harness.sh"
fleet() { "$repo/scripts/demo/fleet.sh" "$@"; }
on() { local n=$1; shift; ( eval "$(fleet env "$n")"; psql -X -q -v ON_ERROR_STOP=1 "$@" ); }

fleet up 3 300
trap '[ "${FLEET_KEEP:-0}" = 1 ] || fleet down' EXIT
echo
echo "== The logical-to-physical map (router database on server 1)"
on 1 -d router -c "SELECT server, min(shard_id) AS first_shard, max(shard_id) AS last_shard, count(*) AS shards,
                          min(connstr) AS connection FROM shard_map GROUP BY server ORDER BY server"
echo "== Writes through the router land on the right server; IDs say where they live"
on 1 -d router -c "SELECT s AS logical_shard, id, insta_id.shard_id(id) AS decoded_shard, get_user(id) AS read_back_by_id
                   FROM (SELECT s, insert_user(s, 'user of shard ' || s) AS id FROM unnest(ARRAY[7, 150, 299]) s) x"
for n in 1 2 3; do
  echo "== Server $n holds"
  on "$n" -d app -c "SELECT count(*) AS shards, min(shard_id) AS first, max(shard_id) AS last,
                            (SELECT count(*) FROM all_users()) AS users FROM insta_id.shards()"
done
map() {
  on 1 -d router -c "SELECT server, count(*) AS shards, min(shard_id) AS lowest, max(shard_id) AS highest
                     FROM shard_map GROUP BY server ORDER BY server"
}
echo "== Adding a fourth server, and moving a quarter of the logical shards onto it online"
echo "   (the last 25 of each server), while a client keeps inserting through the router"
fleet add 4
work=$(mktemp -d); trap 'touch "$work/stop"; wait; rm -rf "$work"; [ "${FLEET_KEEP:-0}" = 1 ] || fleet down' EXIT
[ "$(id -u)" = 0 ] && chmod 777 "$work"
echo "-- the map before"
map
moving=$(for n in 1 2 3; do seq $((n * 100 - 24)) $((n * 100)); done | tr '\n' ' ')
# shellcheck disable=SC2086
fleet writer "$work/stop" "$work/rows" $moving &
started=$SECONDS
for s in $moving; do
  fleet move "$s" 4 >"$work/move.log" 2>&1 || { cat "$work/move.log"; exit 1; }
  printf '\r   moved %s, cutover %s' "$s" "$(grep -A3 '== cutover' "$work/move.log" | grep -o '([0-9.]* s)' | head -n1)"
done
touch "$work/stop"; wait
read -r ok failed <"$work/rows.summary"
printf '\r   75 shards moved in %s s; the client committed %s rows through the router, %s attempts failed and were retried\n' \
  $((SECONDS - started)) "$ok" "$failed"
echo "-- the map after"
map
echo "== Every row the client wrote is on server 4, once"
on 4 -d app -c "SELECT count(*) AS rows_of_the_client, count(DISTINCT id) AS distinct_ids FROM all_users()
                WHERE id = ANY ('{$(cut -d'|' -f2 "$work/rows" | paste -sd,)}'::bigint[])"
if [ "${FLEET_KEEP:-0}" = 1 ]; then
  echo "The fleet is still running: $(fleet env 1 | sed 's/^export //') psql -d router"
  echo "Stop it with: scripts/demo/fleet.sh down"
fi
