#!/usr/bin/env bash
# A fleet of real PostgreSQL servers on this machine, one logical design:
#
#   scripts/fleet.sh up [SERVERS [SHARDS]]   default 3 servers, 300 logical shards
#   scripts/fleet.sh down
#   scripts/fleet.sh env N                   PGHOST/PGPORT of server N
#
# Each server (clusters fleet-1..fleet-N, Unix sockets only, insta_id
# preloaded) has a database `app` holding a contiguous range of the logical
# shards, all made from one template (tests/fixtures/shard_template.sql) with
# insta_id.create_shards. Server 1 also has a database `router`: the
# logical-to-physical map (table shard_map) and PL/Proxy functions that run
# each call on the server holding the shard.
# PL/Proxy is packaged (by Debian) for PostgreSQL 15 only: run it with PG=15.
source "$(dirname "$0")/harness.sh"
on() { local n=$1; shift; ( eval "$(cluster_env "fleet-$n")"; q "$@" ); }
connstr() { ( eval "$(cluster_env "fleet-$1")"; echo "host=$PGHOST port=$PGPORT dbname=app user=postgres" ); }

cmd=${1:-}
case "$cmd" in
  up)
    servers=${2:-3}; shards=${3:-300}
    per=$(( (shards + servers - 1) / servers ))
    for n in $(seq 1 "$servers"); do
      cluster_destroy "fleet-$n"
      cluster_start "fleet-$n" --preload
      first=$(( (n - 1) * per + 1 )); last=$(( n * per < shards ? n * per : shards ))
      on "$n" -d postgres -c "CREATE DATABASE app"
      on "$n" -d app -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id" \
        -f "$repo/tests/fixtures/shard_template.sql" \
        -f "$repo/scripts/fleet_server.sql" \
        -c "SELECT insta_id.create_shards($first, $last, 'template')" >/dev/null
    done
    # The router: the map, and PL/Proxy's cluster configuration read from it.
    on 1 -d postgres -c "CREATE DATABASE router"
    on 1 -d router -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id" -c "CREATE EXTENSION plproxy" \
      -f "$repo/scripts/fleet_router.sql" >/dev/null
    for n in $(seq 1 "$servers"); do
      first=$(( (n - 1) * per + 1 )); last=$(( n * per < shards ? n * per : shards ))
      on 1 -d router -c "INSERT INTO shard_map (shard_id, server, connstr)
                         SELECT s, $n, '$(connstr "$n")' FROM generate_series($first, $last) s"
    done
    on 1 -d router -c "SELECT bump_map_version()" >/dev/null
    echo "fleet up: $servers servers, logical shards 1..$shards ($per per server); router: database router on fleet-1"
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
    sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
