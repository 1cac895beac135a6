#!/usr/bin/env bash
# A fleet of real PostgreSQL servers on this machine, one logical design:
#
#   scripts/demo/fleet.sh up [SERVERS [SHARDS]]   default 3 servers, 300 logical shards
#   scripts/demo/fleet.sh add N                   one more server, N, holding no shard yet
#   scripts/demo/fleet.sh move SHARD N            move a logical shard online to server N
#                                            (insta-id move --router)
#   scripts/demo/fleet.sh writer STOPFILE OUT SHARD...
#                                            a client inserting users through the router
#                                            into these shards in turn, retrying a failed
#                                            insert, until STOPFILE exists (at most 10 min):
#                                            OUT gets "shard|id|time" per row, OUT.summary
#                                            "rows failed-attempts"
#   scripts/demo/fleet.sh down
#   scripts/demo/fleet.sh env N                   PGHOST/PGPORT of server N
#
# Each server (clusters fleet-1..fleet-N, Unix sockets only, insta_id
# preloaded, wal_level = logical for online moves) has a database `app` holding a contiguous range of the logical
# shards, all made from one template (tests/fixtures/shard_template.sql) with
# insta_id.create_shards. Server 1 also has a database `router`: the
# logical-to-physical map (table shard_map) and PL/Proxy functions that run
# each call on the server holding the shard.
# PL/Proxy is packaged (by Debian) for PostgreSQL 15 only: run it with PG=15.
source "$(dirname "$0")/../dev/harness.sh"
on() { local n=$1; shift; ( eval "$(cluster_env "fleet-$n")"; q "$@" ); }
connstr() { ( eval "$(cluster_env "fleet-$1")"; echo "host=$PGHOST port=$PGPORT dbname=app user=postgres" ); }
# server N [FIRST LAST]: a fresh server with the template, holding shards FIRST..LAST.
server() {
  cluster_destroy "fleet-$1"
  # A moved shard's three tables are copied at once (the default, 2, leaves
  # the third waiting), and a table copied under writes is handed over to the
  # subscription's stream without a 5 s wait (docs/shards.md).
  cluster_start "fleet-$1" --preload --conf 'wal_level = logical' --conf 'max_sync_workers_per_subscription = 3' \
    --conf "wal_retrieve_retry_interval = '200ms'"
  on "$1" -d postgres -c "CREATE DATABASE app"
  on "$1" -d app -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id" \
    -f "$repo/tests/fixtures/shard_template.sql" -f "$repo/scripts/demo/fleet_server.sql" >/dev/null
  [ $# = 1 ] || on "$1" -d app -c "SELECT insta_id.create_shards($2, $3, 'template')" >/dev/null
}

cmd=${1:-}
case "$cmd" in
  up)
    servers=${2:-3}; shards=${3:-300}
    per=$(( (shards + servers - 1) / servers ))
    for n in $(seq 1 "$servers"); do
      first=$(( (n - 1) * per + 1 )); last=$(( n * per < shards ? n * per : shards ))
      server "$n" "$first" "$last"
    done
    # The router: the map, and PL/Proxy's cluster configuration read from it.
    on 1 -d postgres -c "CREATE DATABASE router"
    on 1 -d router -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id" -c "CREATE EXTENSION plproxy" \
      -f "$repo/scripts/demo/fleet_router.sql" >/dev/null
    for n in $(seq 1 "$servers"); do
      first=$(( (n - 1) * per + 1 )); last=$(( n * per < shards ? n * per : shards ))
      on 1 -d router -c "INSERT INTO shard_map (shard_id, server, connstr)
                         SELECT s, $n, '$(connstr "$n")' FROM generate_series($first, $last) s"
    done
    on 1 -d router -c "SELECT bump_map_version()" >/dev/null
    echo "fleet up: $servers servers, logical shards 1..$shards ($per per server); router: database router on fleet-1"
    ;;
  add)
    server "$2"
    echo "fleet: server $2 added ($(connstr "$2")), holding no shard yet"
    ;;
  move)
    shard=$2 to=$3 from=""
    # Where the shard is: the server registering it or holding its move's
    # publication (after an interrupted move the map may already name $to).
    for d in "$(cluster_dir fleet-)"*; do
      n=${d##*fleet-}
      [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" != "$to" ] || continue
      # (a server that does not answer stops this: it might be the one)
      holds=$(on "$n" -d app -c "SELECT EXISTS (SELECT FROM insta_id_admin.shard_registry WHERE shard_id = $shard)
                                 OR EXISTS (SELECT FROM pg_publication WHERE pubname = 'insta_move_$shard')")
      [ "$holds" = f ] || from=$(connstr "$n")
    done
    [ -n "$from" ] || from=$(on 1 -d router -c "SELECT connstr FROM shard_map WHERE shard_id = $shard")
    router=$(connstr 1); router=${router/dbname=app/dbname=router}
    # (the demo's application connects as the operator does: one role)
    insta-id move "$shard" --from "$from" --to "$(connstr "$to")" --rollback-window 0 --router "$router" --router-target "$(connstr "$to")"
    ;;
  writer)
    stopfile=$2 out=$3; shift 3
    ok=0 failed=0 until=$((SECONDS + 600))
    eval "$(cluster_env fleet-1)"
    while [ ! -e "$stopfile" ] && [ -d "$(dirname "$out")" ] && [ $SECONDS -lt $until ]; do
      for s in "$@"; do
        until q -d router -c "SELECT $s, insert_user($s, 'writer'), clock_timestamp()" >>"$out" 2>/dev/null; do
          failed=$((failed + 1))
          [ ! -e "$stopfile" ] && [ $SECONDS -lt $until ] || break 2
          sleep 0.01
        done
        ok=$((ok + 1))
      done
    done
    echo "$ok $failed" >"$out.summary"
    ;;
  down)
    for d in "$(cluster_dir fleet-)"*; do
      [ -d "$d" ] && cluster_destroy "fleet-${d##*fleet-}"
    done
    true
    ;;
  env)
    cluster_env "fleet-$2"
    ;;
  *)
    sed -n '2,19p' "$0" >&2; exit 2 ;;
esac
