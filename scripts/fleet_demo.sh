#!/usr/bin/env bash
# `make cluster-demo`: 3 real PostgreSQL servers on this machine, 300 logical
# shards spread over them from one template, and a PL/Proxy router that runs
# each call on the server holding the shard. FLEET_KEEP=1 leaves it running
# (`scripts/fleet.sh down` stops it).
source "$(dirname "$0")/harness.sh"
fleet() { "$repo/scripts/fleet.sh" "$@"; }
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
                            (SELECT count(*) FROM all_users()) AS users FROM insta_id.shards"
done
if [ "${FLEET_KEEP:-0}" = 1 ]; then
  echo "The fleet is still running: $(fleet env 1 | sed 's/^export //') psql -d router"
  echo "Stop it with: scripts/fleet.sh down"
fi
