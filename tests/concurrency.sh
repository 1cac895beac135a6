#!/usr/bin/env bash
# Real concurrent sessions against the duplicate guard (release build).
# - shared guard (insta_id in shared_preload_libraries): 4 pgbench clients
#   burst 2000 IDs per statement from ONE sequence (SECONDS_PER_RUN): zero duplicates,
#   and the newest ID is not ahead of the wall clock.
# - not preloaded: the same load. On PostgreSQL 17+ (the DSM registry) the
#   same checks: zero duplicates. On 15 and 16 (a guard per session) no
#   session ever repeats its own IDs; across sessions duplicates are possible
#   (README, "Guarantees"): their count is printed, not asserted.
# - 1,000,000 rows in one INSERT into a table with a primary key succeed in the
#   default mode; 1,000,000 IDs in legacy mode repeat, like the original.
# - 2000 short sessions (connect, mint one ID, disconnect; two at a time)
#   while two long sessions burst on the same sequence: no ID of either is
#   ahead of its session's clock (read right after next_id), however many
#   sessions came before (0.8.0 without preloading: 160 ms more per session).
source "$(dirname "$0")/../scripts/harness.sh"
SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
burst=$(mktemp); trap 'rm -f "$burst"' EXIT
echo "INSERT INTO ids SELECT insta_id.next_id(1, 's'), pg_backend_pid() FROM generate_series(1, 2000);" >"$burst"

hammer() { # $1: label
  PGOPTIONS="-c client_min_messages=warning" q -d postgres -c "DROP DATABASE IF EXISTS conc" -c "CREATE DATABASE conc"
  # The checks group millions of IDs by (id, pid): PostgreSQL 18's hash
  # aggregate took over 8 minutes on 7M of them, in memory or spilled; a sort
  # takes seconds.
  q -d postgres -c "ALTER DATABASE conc SET work_mem = '512MB'" -c "ALTER DATABASE conc SET enable_hashagg = off"
  q -d conc -c "SET client_min_messages = error" -c "CREATE EXTENSION insta_id" \
    -c "CREATE SEQUENCE s" -c "CREATE UNLOGGED TABLE ids (id bigint, pid int)"
  started=$(q -d conc -c "SELECT clock_timestamp()")
  pgbench -n -c 4 -j 2 -T "$SECONDS_PER_RUN" -f "$burst" conc >"$repo/target/pgbench-pg$PG-$1.log" 2>&1 \
    || { cat "$repo/target/pgbench-pg$PG-$1.log"; check "$1: pgbench ran" failed ok; return; }
  ended=$(q -d conc -c "SELECT clock_timestamp()")
  ahead=$(q -d conc -c "SELECT extract(epoch FROM max(insta_id.created_at(id)) - '$ended') * 1000 FROM ids")
  stats=$(q -d conc -F ' ' -c "SELECT count(*), count(DISTINCT pid), max(n) FROM ids,
            LATERAL (SELECT 0) z, (SELECT max(c) AS n FROM (SELECT count(*) c FROM ids GROUP BY id >> 23) m) mm
            GROUP BY mm.n")
  echo "     $1: ids, sessions, most IDs in one ms: $stats; newest ID vs the clock at the end: ${ahead} ms"
  check_true "$1: IDs were minted by 4 sessions" "SELECT count(DISTINCT pid) = 4 AND count(*) >= 4 * 2000 FROM ids" -d conc
  check_true "$1: the newest ID is at most 5 ms ahead of the wall clock at the end of the burst" "SELECT $ahead <= 5"
  check_true "$1: no ID is older than the burst" "SELECT min(insta_id.created_at(id)) >= date_trunc('milliseconds', '$started'::timestamptz) FROM ids" -d conc
  check "$1: no session repeats its own IDs" \
    "$(q -d conc -c "SELECT count(*) FROM (SELECT 1 FROM ids GROUP BY id, pid HAVING count(*) > 1) d")" 0
}

# short_sessions LABEL: 2000 sessions of one ID each, beside bursting ones.
short_sessions() {
  local short long
  short=$(mktemp); long=$(mktemp)
  # at: the clock right after next_id (the subquery is evaluated first).
  echo "INSERT INTO lead SELECT id, clock_timestamp(), pg_backend_pid(), true FROM (SELECT insta_id.next_id(1, 's') id OFFSET 0) x;" >"$short"
  echo "INSERT INTO lead SELECT id, clock_timestamp(), pg_backend_pid(), false FROM (SELECT insta_id.next_id(1, 's') id FROM generate_series(1, 500) OFFSET 0) x;" >"$long"
  q -d conc -c "CREATE UNLOGGED TABLE lead (id bigint, at timestamptz, pid int, short bool)"
  pgbench -n -c 2 -j 1 -T 600 -f "$long" conc >"$repo/target/pgbench-pg$PG-$1-long.log" 2>&1 &
  local long_pid=$!
  pgbench -n -C -c 2 -j 1 -t 1000 -f "$short" conc >"$repo/target/pgbench-pg$PG-$1-short.log" 2>&1 \
    || { cat "$repo/target/pgbench-pg$PG-$1-short.log"; check "$1: pgbench ran" failed ok; }
  # SIGTERM: a background job of a script ignores SIGINT.
  kill -TERM "$long_pid" 2>/dev/null; wait "$long_pid" 2>/dev/null || true
  rm -f "$short" "$long"
  echo "     $1: $(q -d conc -c "SELECT count(DISTINCT pid) FILTER (WHERE short) || ' short sessions, ' || count(*) FILTER (WHERE NOT short) || ' IDs of long ones; newest ID at most ' || round(extract(epoch FROM max(insta_id.created_at(id) - at)) * 1000) || ' ms ahead of its clock' FROM lead")"
  check_true "$1: 2000 short sessions minted beside 2 bursting ones" \
    "SELECT count(DISTINCT pid) FILTER (WHERE short) = 2000 AND count(DISTINCT pid) FILTER (WHERE NOT short) >= 2 FROM lead" -d conc
  check "$1: no ID, of a short session or a long one, is ahead of its session's clock" \
    "$(q -d conc -c "SELECT count(*) FROM lead WHERE insta_id.created_at(id) > at")" 0
}

# exact LABEL: the checks of a server-wide guard on the last burst.
exact() {
  check "$1: zero duplicates across sessions" "$(q -d conc -c "SELECT count(*) - count(DISTINCT id) FROM ids")" 0
  check_true "$1: some milliseconds were full (1024 IDs of the sequence), so the guard was needed" \
    "SELECT max(c) = 1024 FROM (SELECT count(*) c FROM ids GROUP BY id >> 23) m" -d conc
  check_true "$1: no more IDs than the scheme's ceiling (1024 a ms) allows for the burst's real duration" \
    "SELECT count(*) <= 1024 * (extract(epoch FROM '$ended'::timestamptz - '$started') * 1000 + 1) FROM ids" -d conc
}

start_cluster conc --preload
hammer preloaded
exact preloaded
short_sessions preloaded
check "preloaded, short sessions: zero duplicates" "$(q -d conc -c "SELECT count(*) - count(DISTINCT id) FROM lead")" 0
q -d conc -c "CREATE SEQUENCE s1" -c "CREATE TABLE big (id bigint PRIMARY KEY DEFAULT insta_id.next_id(1, 's1'), v int)"
check "wait: INSERT of 1,000,000 rows into one shard table with a primary key" \
  "$(q -d conc -c "INSERT INTO big (v) SELECT g FROM generate_series(1, 1000000) g" -c "SELECT count(DISTINCT id) FROM big")" 1000000
check_true "wait: the newest of them is at most 5 ms ahead of the wall clock" \
  "SELECT max(insta_id.created_at(id)) <= clock_timestamp() + interval '5 ms' FROM big" -d conc
check_true "legacy: 1,000,000 IDs of one sequence in one statement repeat, like the original" \
  "SELECT count(*) > count(DISTINCT id) FROM (SELECT insta_id.next_id(1, 's2') AS id FROM generate_series(1, 1000000)) x" \
  -d conc -c "CREATE SEQUENCE s2" -c "SET insta_id.on_overflow = legacy"
check "wait: the same 1,000,000 IDs do not" \
  "$(q -d conc -c "CREATE SEQUENCE s3" -c "SELECT count(DISTINCT id) FROM (SELECT insta_id.next_id(1, 's3') AS id FROM generate_series(1, 1000000)) x")" 1000000
stop_cluster conc

start_cluster conc-nopreload
if [ "$PG" -ge 17 ]; then  # the DSM-registry guard
  check "PostgreSQL $PG without preload: CREATE EXTENSION says nothing" "$(q -d postgres -c "CREATE EXTENSION insta_id" 2>&1)" ""
  check "PostgreSQL $PG without preload: guard_mode() says shared (the DSM registry)" "$(q -d postgres -c "SELECT insta_id.guard_mode()")" shared
  hammer not-preloaded
  exact not-preloaded
  short_sessions not-preloaded
  check "not-preloaded, short sessions: zero duplicates" "$(q -d conc -c "SELECT count(*) - count(DISTINCT id) FROM lead")" 0
else
  check "PostgreSQL $PG without preload: CREATE EXTENSION warns that the guard is per session" \
    "$(q -d postgres -c "CREATE EXTENSION insta_id" 2>&1 | head -n1)" \
    "WARNING:  insta_id is not in shared_preload_libraries: each session guards only its own IDs against duplicates"
  check "PostgreSQL $PG without preload: guard_mode() says session" "$(q -d postgres -c "SELECT insta_id.guard_mode()")" session
  hammer not-preloaded
  echo "     not-preloaded: duplicates across sessions (allowed with a per-session guard): $(q -d conc -c "SELECT count(*) - count(DISTINCT id) FROM ids")"
  short_sessions not-preloaded
  echo "     not-preloaded, short sessions: duplicates across sessions (allowed with a per-session guard): $(q -d conc -c "SELECT count(*) - count(DISTINCT id) FROM lead")"
fi
stop_cluster conc-nopreload
finish
