#!/usr/bin/env bash
# Upgrade suite: releases as a chain, checked in full.
# 1. scripts/dev/release.sh check: released scripts unchanged, nothing in
#    sql/ unreleased but the upgrade to the version being made, and, once the
#    current version is released, the SQL generated from src/ unchanged.
# 2. Every earlier version installs from the base script along the chain
#    (CREATE EXTENSION insta_id VERSION '<old>'), works with this library
#    (a newer package installed under a running server serves every database
#    until each is updated), and after ALTER EXTENSION UPDATE has exactly the
#    objects of a fresh install: tests/fixtures/describe_extension.sql, every
#    function's whole definition, views, tables by column, grants, comments.
# 3. The check cannot miss: an upgrade script that leaves out one function
#    changed in src/ (shard_drift) makes it fail, naming that function.
source "$(dirname "$0")/../scripts/dev/harness.sh"
cd "$repo"
version=$(insta_id_version)
extdir="$("$PG_CONFIG" --sharedir)/extension"

out=$(scripts/dev/release.sh check 2>&1) && rc=0 || rc=$?
check "sql/ and src/ agree with sql/SHA256SUMS and CHANGELOG.md (scripts/dev/release.sh)" "$rc $out" "0 "

describe=$(cat tests/fixtures/describe_extension.sql)
start_cluster upgrade --preload
q -d postgres -c "CREATE DATABASE fresh"
q -d fresh -c "CREATE EXTENSION insta_id"
fresh=$(q -d fresh -c "$describe")
check "fresh install is version $version" "$(q -d fresh -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'")" "$version"
check_same "ALTER EXTENSION UPDATE on the newest version changes nothing" \
  "$(q -d fresh -c "ALTER EXTENSION insta_id UPDATE" 2>&1; q -d fresh -c "$describe")" \
  "NOTICE:  version \"$version\" of extension \"insta_id\" is already installed
$fresh"

# The versions: the base script's and every upgrade script's target.
mapfile -t earlier < <({ echo 0.1.0; for f in sql/insta_id--*--*.sql; do b=${f%.sql}; echo "${b##*--}"; done; } |
                        grep -vxF "$version" | sort -uV)
check "the chain starts at the base script and has every release since" \
  "$(ls sql/insta_id--*.sql | grep -vc -- '--.*--') ${earlier[*]:0:1}" "1 0.1.0"
for old in "${earlier[@]}"; do
  db="from_${old//./_}"
  q -d postgres -c "CREATE DATABASE $db"
  q -d "$db" -c "CREATE EXTENSION insta_id VERSION '$old'"
  check_true "$old SQL with the $version library: mints and decodes IDs" \
    "SELECT (insta_id.id_parts(insta_id.next_id(9, 'before_update'))).shard_id = 9" -d "$db" -c "CREATE SEQUENCE before_update"
  q -d "$db" -c "ALTER EXTENSION insta_id UPDATE"
  check "$old -> $version: version after UPDATE" "$(q -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'")" "$version"
  check_same "$old -> $version: the objects of a fresh install, in full" "$(q -d "$db" -c "$describe")" "$fresh"
  check_true "$old -> $version: mints IDs" "SELECT insta_id.shard_id(insta_id.next_id(7, 's')) = 7" -d "$db" -c "CREATE SEQUENCE s"
done

# A stale upgrade script: this version's, less the first function of $prev it
# re-creates (as if that function's body had changed in src/ only). It is
# installed as an upgrade to version '<version>-stale', for this test only.
prev=${earlier[-1]}
stale="$extdir/insta_id--$prev--$version-stale.sql"
sudo_if=(); [ -w "$extdir" ] || sudo_if=(sudo)
q -d postgres -c "CREATE DATABASE stale"
q -d stale -c "CREATE EXTENSION insta_id VERSION '$prev'"
functions_of_prev=$(q -d stale -c "SELECT string_agg(oid::regproc::text, ' ') FROM pg_proc WHERE pronamespace = 'insta_id'::regnamespace")
left_out=$(python3 - "sql/insta_id--$prev--$version.sql" "$stale.tmp" $functions_of_prev <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = next((m for m in re.finditer(r"^CREATE OR REPLACE FUNCTION (insta_id\.\w+)\(.*?^\$\$;\n", text, re.M | re.S)
          if m.group(1) in sys.argv[3:]), None)
if m is None:
    sys.exit("the upgrade script re-creates no SQL-bodied function of the last release: give the stale-script test another mutation")
open(sys.argv[2], "w").write(text[:m.start()] + text[m.end():])
print(m.group(1))
PY
)
"${sudo_if[@]}" mv "$stale.tmp" "$stale"
trap '"${sudo_if[@]}" rm -f "$stale"' EXIT
q -d stale -c "ALTER EXTENSION insta_id UPDATE TO '$version-stale'"
differ=$({ diff <(echo "$fresh") <(q -d stale -c "$describe") || true; } | sed -nE 's/^[<>] function ([^(]+)\(.*/\1/p' | sort -u)
check "$prev -> $version with a script stale in $left_out: the check fails, naming $left_out alone" "${differ:-nothing}" "$left_out"
stop_cluster upgrade
finish
