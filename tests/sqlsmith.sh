#!/usr/bin/env bash
# Random SQL (sqlsmith, Debian's package) against a database with insta_id,
# two shards and a table of boundary arguments: zero server crashes, and no
# internal error (XX000) from a statement calling insta_id. With
# track_functions = all it shows that insta_id's functions really ran.
#   tests/sqlsmith.sh [QUERIES]   default 2000 (make test); make fuzz: 50000
source "$(dirname "$0")/../scripts/dev/harness.sh"
queries=${1:-2000}
seed=${SMITH_SEED:-42}
start_cluster smith --preload --conf "track_functions = all
log_line_prefix = '%m [%p] %e '
log_min_messages = error
log_min_error_statement = error
max_parallel_workers_per_gather = 0
restart_after_crash = on"
log="$(cluster_dir smith)/server.log"
q -d postgres -c "CREATE DATABASE smith"
q -d smith -c "SET client_min_messages = error" -f "$repo/tests/fixtures/sqlsmith_target.sql" >/dev/null
q -d smith -c "SELECT pg_stat_reset()" >/dev/null
out="$repo/target/sqlsmith-pg$PG"; mkdir -p "$out"
# Runs of a quarter each, seeds SEED, SEED+1, ...: how often sqlsmith reaches
# a function that takes arguments swings by a factor of 100 between seeds (a
# few queries that read the 2000-row argument table dominate; 60 to 4319 calls
# over the seeds tried, and the same seeds vary between machines), so four
# draws, and up to four more while those calls stay under 20: the fuzzing must
# have reached them.
smith_run() {  # smith_run N: the Nth quarter, seed SEED+N
  # sqlsmith exits 0 at --max-queries even after a crash: the log decides. It
  # sets statement_timeout = 1s itself; timeout bounds the whole run.
  timeout -s INT $((30 + queries / 60)) sqlsmith \
    --target="host=$PGHOST port=$PGPORT dbname=smith user=insta_id_smith" \
    --exclude-catalog --seed=$((seed + $1)) --max-queries=$((queries / 4)) --verbose \
    >"$out/queries-$1.log" 2>"$out/sqlsmith-$1.err" || status=$?
  tail -n 3 "$out/sqlsmith-$1.err" | sed 's/^/     /'
}
function_stats() {  # functions called, calls, calls of functions taking arguments
  sleep 1  # sqlsmith's backend reports its function counts as it exits
  q -d smith -F ' ' -c "SELECT count(*) FILTER (WHERE calls > 0), coalesce(sum(calls), 0),
          coalesce(sum(calls) FILTER (WHERE p.pronargs > 0), 0)
        FROM pg_stat_user_functions f JOIN pg_proc p ON p.oid = f.funcid WHERE schemaname = 'insta_id'"
}
say "sqlsmith: $queries queries in 4 runs, seeds $seed..$((seed + 3))"
status=0
for s in 0 1 2 3; do smith_run $s; done
read -r nfuncs calls argcalls <<<"$(function_stats)"
for s in 4 5 6 7; do
  [ "$argcalls" -lt 20 ] || break
  say "functions taking arguments called $argcalls times: one more run, seed $((seed + s))"
  smith_run $s
  read -r nfuncs calls argcalls <<<"$(function_stats)"
done
check "every sqlsmith run ran its queries to the end" "$status" 0
crashed='terminated by signal|terminated by exception|PANIC:'
grep -A3 -E "$crashed" "$log" | head -n 20 | sed 's/^/     /' || true
check "no server process crashed" "$(grep -cE "$crashed" "$log" || true)" 0
# An internal error, with the statement that raised it.
internal=$(grep -A2 -E ' XX000 (ERROR|FATAL|PANIC):' "$log" || true)
[ -z "$internal" ] || { echo "     internal errors:"; echo "$internal" | head -n 30 | sed 's/^/     /'; }
check "no internal error (XX000) from a statement calling insta_id" \
  "$(echo "$internal" | grep -c 'STATEMENT:.*insta_id\.' || true)" 0
echo "     insta_id functions called: $nfuncs, calls: $calls, of functions taking arguments: $argcalls"
q -d smith -c "SELECT funcname || ' ' || calls FROM pg_stat_user_functions WHERE schemaname = 'insta_id' ORDER BY calls DESC" \
  | sed 's/^/       /'
check_true "sqlsmith called at least 5 of insta_id's functions, $queries times in all, those taking arguments at least 20 times" \
  "SELECT $nfuncs >= 5 AND $calls >= $queries AND $argcalls >= 20"
stop_cluster smith
finish
