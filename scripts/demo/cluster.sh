#!/usr/bin/env bash
# A throwaway PostgreSQL cluster, from the command line (scripts/dev/harness.sh
# does the work; PG=16 or PG_CONFIG=... picks the version, default the newest).
#
#   scripts/demo/cluster.sh start [--preload] [--name NAME]   initdb (if needed) and start
#   scripts/demo/cluster.sh stop  [--name NAME]               stop it (data stays in target/)
#   scripts/demo/cluster.sh destroy [--name NAME]             stop and delete it
#   scripts/demo/cluster.sh env   [--name NAME]               print PGHOST/PGPORT exports
#
# It listens on a Unix socket in target/clusters/pgNN-NAME only.
# --preload adds shared_preload_libraries = 'insta_id'.
source "$(dirname "$0")/../dev/harness.sh"
cmd=${1:-}; shift || true
name=main; opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --preload) opts+=(--preload) ;;
    --name) name=$2; shift ;;
    *) echo "cluster.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$cmd" in
  start) cluster_start "$name" "${opts[@]}" ;;
  stop) cluster_stop "$name" ;;
  destroy) cluster_destroy "$name" ;;
  env) cluster_env "$name" ;;
  *) sed -n '2,11p' "$0" >&2; exit 2 ;;
esac
