#!/usr/bin/env bash
# Moves no client notices, for `make bench` (never part of `make test`): two
# servers of one PostgreSQL version (fsync and synchronous_commit on,
# wal_level = logical), Debian's PgBouncer in front (transaction pooling,
# one entry per logical shard in a file pgbouncer.ini includes), and
# MOVES shards of 20,000 users each moved from the first server to the
# second, one after another, with `insta-id move --pgbouncer` (no rollback
# window: the old copies fenced at the cutover, dropped after it), while
# pgbench (-M simple) inserts through the moving shard's entry with 4
# clients at RATE transactions a second, and 1 client through a shard that
# stays. Per move: the pause the tool held (it prints it), pgbench's failed
# transactions, and from pgbench's per-transaction log (-l) the latency of
# every transaction: p50, p99, max. Then one shard of LARGE_MB megabytes
# moved the same way: its copy's and its comparison's time (the time per
# GB), and its pause, against the cutover's budget (--pause-budget, 500 ms
# by default). Also `insta-id plan --sizes` on a
# synthetic fleet of 8192 shards over 4 servers. Beside them, release
# BASELINE (0.9.0 by default, none when empty): its library on a second
# pair of servers (a copy of this PostgreSQL installation, scripts/dev/
# build.sh previous), its PgBouncer, its insta-id; each of the MOVES
# shards moved there too, right after this version's, the same way: the
# pauses side by side, rounds interleaved. Raw figures go to
# target/bench/moves-pgNN; bench/report.py reports them.
#   MOVES=10 RATE=200 LARGE_MB=512 BASELINE=0.9.0 PG=18 bench/moves.sh
source "$(dirname "$0")/../scripts/dev/harness.sh"
source "$(dirname "$0")/../tests/checks.sh"
MOVES=${MOVES:-10}
RATE=${RATE:-200}
LARGE_MB=${LARGE_MB:-512}
BASELINE=${BASELINE-0.9.0}
out="$repo/target/bench/moves-pg$PG"; rm -rf "$out"; mkdir -p "$out"
raw="$out/raw.tsv"; : >"$raw"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$raw"; echo "move $1  $2  $3"; }
now() { date +%s.%N; }

# Planning, offline: 8192 shards on 3 servers, sizes log-normal (a fixed
# seed), a 4th server new and empty; `insta-id plan --sizes`, 5 times.
awk 'BEGIN { srand(42); print "db4"
             for (s = 0; s < 8192; s++) { z = sqrt(-2 * log(1 - rand())) * cos(6.28318530718 * rand())
                                          printf "db%d %d %d\n", 1 + s % 3, s, int(exp(16 + 1.2 * z)) } }' >"$out/fleet8192.txt"
for ((r = 1; r <= 5; r++)); do
  t=$(now); status=0
  insta-id plan --sizes "$out/fleet8192.txt" >"$out/plan8192.out" 2>&1 || status=$?
  record "$r" plan_seconds "$(echo "$(now) - $t" | bc)"
done
record 1 plan_moves "$(sed -nE 's/^moves: ([0-9]+) .*/\1/p' "$out/plan8192.out")"
record 1 plan_balanced "$([ "$status" = 0 ] && echo 1 || echo 0)"

# PostgreSQL's default max_connections, not the harness's 40: by the last
# move PgBouncer keeps up to 4 server connections for each of the 12 shards'
# entries on the new server (its pool, idle for server_idle_timeout, 10
# minutes), and the harness's 40 ran out ("too many clients already").
durable=(--preload --conf 'fsync = on' --conf 'synchronous_commit = on' --conf 'wal_level = logical' --conf 'max_connections = 100')
# Each side: its two servers, its PgBouncer, its insta-id, its PostgreSQL
# binaries (the baseline's: the copy holding its library) and the version
# CREATE EXTENSION makes.
sides=(head)
declare -A tool=([head]=insta-id) bin=([head]=$PGBIN) made=([head]="")
if [ -n "$BASELINE" ]; then
  sides+=(base)
  bin[base]=$("$("$repo/scripts/dev/build.sh" previous "$BASELINE")" --bindir)
  tool[base]=$("$repo/scripts/dev/build.sh" release-tool "$BASELINE")
  made[base]="VERSION '$BASELINE'"
fi
declare -A prefix=([head]=bench-move [base]=bench-base)
stop_all() {
  for side in "${sides[@]}"; do
    bouncer_stop "${prefix[$side]}-bouncer"
    stop_cluster "${prefix[$side]}-a"; stop_cluster "${prefix[$side]}-b"
  done
}
trap stop_all EXIT
conn() { echo "host=$(cluster_dir "$1") port=$(cluster_port "$1") dbname=app user=postgres"; }
# use SIDE: the moves below go to that side's servers, PgBouncer and tool.
use() {
  side=$1; a=${prefix[$1]}-a b=${prefix[$1]}-b
  from=$(conn "$a") to=$(conn "$b")
  bouncer=$(cluster_dir "${prefix[$1]}-bouncer")
  admin=$(bouncer_admin "${prefix[$1]}-bouncer") through=$(bouncer_through "${prefix[$1]}-bouncer")
}
steady=$((MOVES + 1)) large=$((MOVES + 2)) readers=$((MOVES + 3))
for side in "${sides[@]}"; do
  for c in "${prefix[$side]}-a" "${prefix[$side]}-b"; do
    cluster_destroy "$c"
    PGBIN=${bin[$side]} cluster_start "$c" "${durable[@]}"
    ( eval "$(cluster_env "$c")"; q -d postgres -c "CREATE DATABASE app"
      q -d app -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id ${made[$side]}" )
  done
  use "$side"
  # The baseline: the shards moved side by side only.
  last=$readers; [ "$side" = head ] || last=$MOVES
  q -d "$from" -f "$repo/tests/fixtures/shard_template.sql" \
    -c "SELECT insta_id.create_shards(1, $last, 'template')" >/dev/null
  for s in $(seq 1 "$MOVES"); do
    q -d "$from" -c "INSERT INTO insta$s.users (name) SELECT 'u' || g FROM generate_series(1, 20000) g"
  done
  # PgBouncer, one entry per shard.
  bouncer_init "${prefix[$side]}-bouncer" >/dev/null
  for ((s = 1; s <= last; s++)); do
    echo "shard$s = host=$(cluster_dir "$a") port=$(cluster_port "$a") dbname=app"
  done | as_pg tee "$bouncer/shards.ini" >/dev/null
  bouncer_start "${prefix[$side]}-bouncer" 4
done
use head
for s in "$steady" "$readers"; do
  q -d "$from" -c "INSERT INTO insta$s.users (name) SELECT 'u' || g FROM generate_series(1, 20000) g"
done
# About LARGE_MB of users (a row of ~250 bytes with its index entries).
q -d "$from" -c "INSERT INTO insta$large.users (name) SELECT repeat('x', 180) || g FROM generate_series(1, $LARGE_MB * 4200) g" \
  -c "VACUUM ANALYZE insta$large.users"

# pgbench on a shard's entry of the side in use until SIGALRM (how -T ends
# it: with its summary), its per-transaction log in $out/<NAME>log<shard>.*;
# its process: $started.
bench_start() {  # SHARD CLIENTS [NAME]
  echo "INSERT INTO insta$1.users (name) VALUES ('pgbench');" >"$out/insert$1.sql"
  pgbench -n -M simple -c "$2" -j 1 -T 3600 -R "$RATE" -f "$out/insert$1.sql" -l --log-prefix="$out/${3:-}log$1" \
    "$through dbname=shard$1" >"$out/${3:-}pgbench$1.out" 2>&1 &
  started=$!
}
bench_stop() { kill -ALRM "$1"; wait "$1" || true; }
# p50, p99 and max latency (ms) of a shard's transactions: pgbench -l's third field, in µs.
latencies() {  # SHARD [NAME]
  cat "$out/${2:-}log$1".* | awk '{print $3}' | sort -n |
    awk '{v[NR] = $1} END {printf "%.2f %.2f %.2f %d\n", v[int(NR * 0.50) + 1] / 1000, v[int(NR * 0.99) + 1] / 1000, v[NR] / 1000, NR}'
}
# The longest wait of a shard's clients (ms): pgbench -l's time less its
# schedule lag (the 7th field, with -R).
longest_wait() {
  cat "$out/log$1".* | awk '{w = ($3 - $7) / 1000; if (w > m) m = w} END {printf "%.1f\n", m}'
}
# `insta-id move SHARD ...` through PgBouncer, with what follows SHARD.
move() {  # SHARD [OPTION...]
  "${tool[$side]}" move "$1" --from "$from" --to "$to" --rollback-window 0 --pgbouncer "$admin" --pgbouncer-map "$bouncer/shards.ini" \
    --pgbouncer-target "host=$(cluster_dir "$b") port=$(cluster_port "$b") dbname=app" "${@:2}"
}
# A shard moved under pgbench (4 clients on its entry, from 1 s before to
# 1 s after) on the side in use, its output in $out/move<SHARD>.log (the
# baseline's: base_move<SHARD>.log); its pause and pgbench's failed
# transactions recorded under KEY (the baseline's named base_...).
move_under_load() {  # SHARD KEY
  local name=""; [ "$side" = head ] || name=base_
  bench_start "$1" 4 "$name"; pid=$started
  sleep 1
  move "$1" >"$out/${name}move$1.log" 2>&1 ||
    { cat "$out/${name}move$1.log" >&2; exit 1; }
  sleep 1
  bench_stop "$pid"
  record "$2" "${name}pause" "$(sed -nE "s/^   shard$1 paused for ([0-9.]+) s$/\1/p" "$out/${name}move$1.log")"
  # The committed try, step by step (ms): "committed: ... (500 ms): pause 12, lock and catch-up 3, ...".
  sed -nE 's/^   committed: the try took [0-9]+ ms of its budget \([0-9]+ ms\): //p' "$out/${name}move$1.log" | tr ',' '\n' |
    while read -r lap; do record "$2" "${name}try_${lap% *}" "${lap##* }"; done
  record "$2" "${name}failed" "$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$out/${name}pgbench$1.out")"
  read -r p50 p99 max n <<<"$(latencies "$1" "$name")"
  record "$2" "${name}transactions" "$n"
  record "$2" "${name}p50_ms" "$p50"; record "$2" "${name}p99_ms" "$p99"; record "$2" "${name}max_ms" "$max"
}
# The duration printed under a step (on the next step's line).
step_seconds() {  # LOG STEP
  awk -v step="$2" 'index($0, "== " step) == 1 {c = 1; next} c && /^   \(/ {gsub(/[()s ]/, ""); print; exit}' "$1"
}
bench_start "$steady" 1; steady_pid=$started
for ((s = 1; s <= MOVES; s++)); do
  use head
  move_under_load "$s" "$s"
  record "$s" cutover "$(step_seconds "$out/move$s.log" cutover)"
  [ -z "$BASELINE" ] || { use base; move_under_load "$s" "$s"; }
done
use head
# The large shard: how long its copy and its comparison take, per GB.
record large bytes "$(q -d "$from" -c "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
                                       WHERE c.relnamespace = 'insta$large'::regnamespace AND c.relkind IN ('r', 't')")"
move_under_load "$large" large
record large copy_seconds "$(step_seconds "$out/move$large.log" "waiting for the copy")"
record large compare_seconds "$(step_seconds "$out/move$large.log" "compare the copy")"
record large budget_ms 500
# Giving up within the budget: back-to-back readers of a second on the old
# server hold the shard's table, so a try that pauses the entry waits for
# one past its budget and its watchdog gives it up. Recorded: what each
# such try said it held its clients for, the longest wait of the clients
# it held (from pgbench's log: the transactions that began after the
# tool's line before and before the line that says it), and the longest
# wait of the shard's pgbench clients over the whole run, against the
# budget (500 ms).
bench_start "$readers" 4; pid=$started
sleep 1
for _ in $(seq 60); do echo "SELECT count(*), pg_sleep(1) FROM insta$readers.users;"; done >"$out/readers.sql"
psql -XqtA -d "$from" -f "$out/readers.sql" >/dev/null 2>&1 &
readers_pid=$!
until [ "$(q -d "$from" -c "SELECT count(*) FROM pg_locks WHERE relation = 'insta$readers.users'::regclass AND granted")" != 0 ]; do
  sleep 0.1
done
# (Each line of the tool's with the time it came: bash's clock, a fork
# a line being too slow for it.)
move "$readers" --pause-budget 500 --cutover-attempts 8 --cutover-retry 1 2>&1 |
  while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$out/readers.timed" || true
cut -d' ' -f2- "$out/readers.timed" >"$out/readers.log"
kill "$readers_pid"; wait "$readers_pid" 2>/dev/null || true
move "$readers" >>"$out/readers.log" 2>&1 || { cat "$out/readers.log" >&2; exit 1; }
sleep 1
bench_stop "$pid"
# Each try that paused: what it said it held, and its clients' longest
# wait (pgbench -l: a transaction's start is its end less its time; its
# wait, its time less its schedule lag).
sed -nE "s/^([0-9.]+) +\(this try held the shard's clients ([0-9]+) ms of its budget of 500 ms.*/\1 \2/p" "$out/readers.timed" |
  awk '{print NR, $1, $2}' | { after=0; while read -r try said held; do
    record readers "try_held_ms_$try" "$held"
    record readers "try_client_wait_ms_$try" "$(cat "$out/log$readers".* | awk -v a="$after" -v b="$said" '
      {start = $5 + $6 / 1e6 - $3 / 1e6; w = ($3 - $7) / 1000; if (start > a && start <= b && w > m) m = w}
      END {printf "%.1f\n", m}')"
    after=$said
  done; }
record readers client_wait_ms "$(longest_wait "$readers")"
record readers failed "$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$out/pgbench$readers.out")"
record readers budget_ms 500
bench_stop "$steady_pid"
read -r p50 p99 max n <<<"$(latencies "$steady")"
record steady failed "$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$out/pgbench$steady.out")"
record steady transactions "$n"
record steady p50_ms "$p50"; record steady p99_ms "$p99"; record steady max_ms "$max"
check "every shard moved, each on the new server once" \
  "$(q -d "$to" -c "SELECT count(*) FROM insta_id.shards()")|$(q -d "$from" -c "SELECT count(*) FROM insta_id.shards()")" "$((MOVES + 2))|1"
if [ -n "$BASELINE" ]; then
  use base
  check "$BASELINE's shards moved too" "$(q -d "$to" -c "SELECT count(*) FROM insta_id.shards()")" "$MOVES"
  use head
fi
{
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(sed -nE 's/^model name\s*: //p' /proc/cpuinfo | head -n1)"
  echo "postgres: $(q -d "$from" -c 'SELECT version()')"
  echo "pgbouncer: $(/usr/sbin/pgbouncer --version | head -n1); moves: $MOVES; rate: $RATE; date: $(date -u +%Y-%m-%d)"
  echo "baseline: ${BASELINE:-none}"
} >"$out/machine.txt"
finish
