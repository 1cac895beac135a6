#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the demo, the tests and the benchmarks.
#
#   scripts/cluster.sh start [--preload] [--name NAME]   initdb (if needed) and start
#   scripts/cluster.sh stop  [--name NAME]               stop it (data stays in target/)
#   scripts/cluster.sh destroy [--name NAME]             stop and delete it
#   scripts/cluster.sh env   [--name NAME]               print PGHOST/PGPORT exports
#
# It listens on a Unix socket in target/clusters/NAME only (listen_addresses = '').
# As root, initdb and postgres run as the postgres user (they refuse root).
# --preload adds shared_preload_libraries = 'insta_id' (the server-wide guard).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$PG_CONFIG" --bindir)

cmd=${1:-}; shift || true
name=main; preload=0
while [ $# -gt 0 ]; do
  case "$1" in
    --preload) preload=1 ;;
    --name) name=$2; shift ;;
    *) echo "cluster.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

base="$here/target/clusters/$name"
data="$base/data"
# A port per name, so several clusters can run at once (5440..5499).
port=$((5440 + $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 60))

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    sudo -u postgres "$@"
  else
    "$@"
  fi
}

case "$cmd" in
  start)
    mkdir -p "$base"
    if [ "$(id -u)" = 0 ]; then
      chown postgres "$base"
      # postgres must be able to reach the directory through its parents.
      d="$base"; while [ "$d" != / ]; do chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
      as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$base/initdb.log" 2>&1 \
        || { cat "$base/initdb.log" >&2; exit 1; }
    fi
    conf="$data/postgresql.auto.conf"
    as_pg tee "$conf" >/dev/null <<CONF
listen_addresses = ''
port = $port
unix_socket_directories = '$base'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 40
shared_buffers = 256MB
max_wal_size = 4GB
# create_shards makes thousands of relations in one transaction.
max_locks_per_transaction = 1024
log_min_messages = warning
shared_preload_libraries = '$( [ $preload = 1 ] && echo insta_id )'
CONF
    if as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
      as_pg "$bindir/pg_ctl" -D "$data" -l "$base/server.log" -w restart >/dev/null
    else
      as_pg "$bindir/pg_ctl" -D "$data" -l "$base/server.log" -w start >/dev/null \
        || { cat "$base/server.log" >&2; exit 1; }
    fi
    ;;
  stop)
    if [ -f "$data/PG_VERSION" ] && as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
      as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null
    fi
    ;;
  destroy)
    "$0" stop --name "$name"
    rm -rf "$base"
    ;;
  env)
    echo "export PGHOST='$base' PGPORT=$port PGUSER=postgres"
    ;;
  *)
    sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
