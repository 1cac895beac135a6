#!/usr/bin/env bash
# Upgrade suite.
# 1. The SQL of this version is fixed once released: the SHA-256 of
#    src/insta_id.sql followed by src/shards.sql (what pgrx installs) must be
#    sql/insta_id--<version>.sha256. Changing the SQL therefore means a new
#    version: freeze the old SQL first (cat src/insta_id.sql src/shards.sql
#    > sql/insta_id--<old>.sql), bump Cargo.toml, change src/, add the upgrade
#    script sql/insta_id--<old>--<new>.sql and write the new checksum.
# 2. For every earlier frozen version: CREATE EXTENSION at that version,
#    ALTER EXTENSION insta_id UPDATE, and the result must match a fresh
#    install object for object (signatures, volatility, strictness, parallel
#    safety, comments, privileges), and must mint IDs. Before the UPDATE the
#    old SQL must already work with this library (a newer package installed
#    under a running server serves every database until each is updated).
source "$(dirname "$0")/../scripts/harness.sh"
cd "$repo"
version=$(insta_id_version)

sum=$(cat src/insta_id.sql src/shards.sql | sha256sum | cut -d' ' -f1)
check "src/*.sql is the SQL released as $version (sql/insta_id--$version.sha256; if you changed it: a new version, see this file's header)" \
  "$sum" "$(cat "sql/insta_id--$version.sha256" 2>/dev/null)"

describe=$(cat "$repo/tests/fixtures/describe_extension.sql")

start_cluster upgrade --preload
q -d postgres -c "CREATE DATABASE fresh"
q -d fresh -c "CREATE EXTENSION insta_id"
fresh=$(q -d fresh -c "$describe")
check "fresh install is version $version" "$(q -d fresh -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'")" "$version"
check "ALTER EXTENSION UPDATE on the newest version changes nothing" \
  "$(q -d fresh -c "ALTER EXTENSION insta_id UPDATE" 2>&1; q -d fresh -c "$describe")" \
  "NOTICE:  version \"$version\" of extension \"insta_id\" is already installed
$fresh"

earlier=0
for f in sql/insta_id--*.sql; do
  b=$(basename "$f" .sql); old=${b#insta_id--}
  case "$old" in *--*|"$version") continue ;; esac
  earlier=$((earlier + 1))
  db="from_${old//./_}"
  q -d postgres -c "CREATE DATABASE $db"
  q -d "$db" -c "CREATE EXTENSION insta_id VERSION '$old'"
  check_true "$old SQL with the $version library: mints and decodes IDs" \
    "SELECT (insta_id.id_parts(insta_id.next_id(9, 'before_update'))).shard_id = 9" -d "$db" -c "CREATE SEQUENCE before_update"
  q -d "$db" -c "ALTER EXTENSION insta_id UPDATE"
  check "$old -> $version: version after UPDATE" "$(q -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'")" "$version"
  check "$old -> $version: same objects as a fresh install" "$(q -d "$db" -c "$describe")" "$fresh"
  check_true "$old -> $version: mints IDs" "SELECT insta_id.shard_id(insta_id.next_id(7, 's')) = 7" -d "$db" -c "CREATE SEQUENCE s"
done
[ $earlier -gt 0 ] || echo "note - no release before $version: nothing to upgrade from yet"
stop_cluster upgrade
finish
