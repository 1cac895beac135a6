#!/usr/bin/env bash
# `make cluster-demo`: 3 real PostgreSQL servers on this machine (the newest
# version), 300 logical shards spread over them from one template, and
# PgBouncer in front with an entry per logical shard (shard<N>), which
# applications connect to; then a fourth server, and `insta-id rebalance`
# moving a quarter of the shards onto it online while pgbench writes through
# the entries of four of the shards it moves. The map before and after, and
# what the clients saw; checked, so `make test` runs it too. Everything
# stops at the end.
source "$(dirname "$0")/../dev/harness.sh"
source "$repo/tests/checks.sh"
servers=(demo-1 demo-2 demo-3 demo-4)
work=$(mktemp -d); [ "$(id -u)" != 0 ] || chmod 755 "$work"
pids=()
stop_all() {
  [ ${#pids[@]} = 0 ] || kill "${pids[@]}" 2>/dev/null || true
  bouncer_stop demo-bouncer
  for s in "${servers[@]}"; do stop_cluster "$s"; done
  rm -rf "$work"
}
trap stop_all EXIT
conn() { echo "host=$(cluster_dir "$1") port=$(cluster_port "$1") dbname=app user=postgres"; }
target() { echo "host=$(cluster_dir "$1") port=$(cluster_port "$1") dbname=app"; }

say "3 servers, 300 logical shards of one template (1-100, 101-200, 201-300; 297-300 larger)"
for n in 1 2 3 4; do
  c=demo-$n
  cluster_destroy "$c"
  cluster_start "$c" --preload --conf 'wal_level = logical' --conf 'max_connections = 100'
  q -d "$(conn "$c" | sed 's/dbname=app/dbname=postgres/')" -c "CREATE DATABASE app"
  q -d "$(conn "$c")" -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id"
  [ "$n" = 4 ] && continue
  q -d "$(conn "$c")" -f "$repo/tests/fixtures/shard_template.sql" \
    -c "SELECT insta_id.create_shards($((n * 100 - 99)), $((n * 100)), 'template')" >/dev/null
  q -d "$(conn "$c")" -c "DO \$\$ BEGIN FOR s IN $((n * 100 - 99))..$((n * 100)) LOOP
      EXECUTE format('INSERT INTO insta%s.users (name) SELECT ''u'' || g FROM generate_series(1, 200) g', s); END LOOP; END \$\$"
done
# Four shards of server 3 grown larger: the plan moves the largest first.
for s in 297 298 299 300; do
  q -d "$(conn demo-3)" -c "INSERT INTO insta$s.users (name) SELECT 'u' || g FROM generate_series(1, 5000) g"
done

say "PgBouncer in front: transaction pooling, one entry per logical shard"
bouncer=$(bouncer_init demo-bouncer)
for s in $(seq 1 300); do
  echo "shard$s = $(target "demo-$(( (s - 1) / 100 + 1 ))")"
done | as_pg tee "$bouncer/shards.ini" >/dev/null
bouncer_start demo-bouncer 2 "server_idle_timeout = 10"
admin=$(bouncer_admin demo-bouncer) through=$(bouncer_through demo-bouncer) bport=$(bouncer_port demo-bouncer)
map() {  # PgBouncer's entries per server
  q -d "$admin" -c 'SHOW DATABASES' | awk -F'|' '$1 ~ /^shard[0-9]+$/ { n[$3]++; s = substr($1, 6) + 0
      if (!($3 in lo) || s < lo[$3]) lo[$3] = s; if (s > hi[$3]) hi[$3] = s }
    END { for (p in n) printf "   port %s: %d shards (%d to %d)\n", p, n[p], lo[p], hi[p] }' | sort
}
echo "-- an application connects to its shard's entry and names the shard's schema:"
echo "   psql 'host=$bouncer port=$bport dbname=shard150' -c 'INSERT INTO insta150.users (name) VALUES (...)'"
psql -X -q -d "$through dbname=shard150" -c "INSERT INTO insta150.users (name) VALUES ('through PgBouncer')
  RETURNING id, insta_id.shard_id(id) AS decoded_shard, current_setting('port') AS server_port"
echo "-- the map before (servers by port: $(for n in 1 2 3 4; do printf '%s=%s ' "$n" "$(cluster_port demo-$n)"; done))"
map

say "A fourth server, empty; insta-id plan (a dry run), then insta-id rebalance under pgbench"
args=(); for n in 1 2 3 4; do args+=(--server "$(conn demo-$n)"); done
insta-id plan "${args[@]}" >"$work/plan.out" || { cat "$work/plan.out"; exit 1; }
head -n 6 "$work/plan.out"
echo "   ..."
# pgbench (-M simple) on the four largest shards the plan moves (it moves
# them first), one client each.
benched=()
for s in $(sed -nE 's/^  shard ([0-9]+) .*/\1/p' "$work/plan.out" | head -n 4); do
  echo "INSERT INTO insta$s.users (name) VALUES ('pgbench');" >"$work/insert$s.sql"
  pgbench -n -M simple -c 1 -T 3600 -R 50 -f "$work/insert$s.sql" "$through dbname=shard$s" >"$work/pgbench$s.out" 2>&1 &
  pids+=("$!"); benched+=("$s")
done
sleep 1
started=$SECONDS
insta-id rebalance "${args[@]}" --pgbouncer "$admin" --pgbouncer-map "$bouncer/shards.ini" >"$work/rebalance.out" 2>&1 ||
  { tail -n 30 "$work/rebalance.out"; exit 1; }
for p in "${pids[@]}"; do kill -ALRM "$p"; wait "$p" || true; done
grep -E '^== rebalanced' "$work/rebalance.out" | sed 's/^== /   /'
echo "   (in $((SECONDS - started)) s; each move's pause of its PgBouncer entry, in ms:" \
  "$(sed -nE 's/^   shard[0-9]+ paused for ([0-9.]+) s$/\1/p' "$work/rebalance.out" | awk '{printf "%d ", $1 * 1000}' | head -c 200)...)"
echo "-- the map after"
map
echo "-- pgbench through the entries of shards ${benched[*]}, while they moved:"
for s in "${benched[@]}"; do
  echo "   shard $s: $(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1 transactions/p' "$work/pgbench$s.out"),"\
       "$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1 failed/p' "$work/pgbench$s.out")"
done

holders=$(for n in 1 2 3 4; do q -d "$(conn demo-$n)" -c "SELECT shard_id || ' ' || $(cluster_port demo-$n) FROM insta_id.shards()"; done | sort -n)
check "every shard on one server" "$(cut -d' ' -f1 <<<"$holders" | uniq | wc -l)|$(wc -l <<<"$holders")" "300|300"
check "PgBouncer's entry of every shard names the server holding it" \
  "$(q -d "$admin" -c 'SHOW DATABASES' | awk -F'|' '$1 ~ /^shard[0-9]+$/ {print substr($1, 6) " " $3}' | sort -n)" "$holders"
check "server 4 holds the shards the rebalance moved" "$(grep -c " $(cluster_port demo-4)\$" <<<"$holders")" \
  "$(sed -nE 's/^== rebalanced: ([0-9]+) moves.*/\1/p' "$work/rebalance.out")"
# (on the server holding the shard now: the rebalance plans again, with
# the sizes pgbench grew since the dry run, and may move other shards)
for s in "${benched[@]}"; do
  n=$(awk -v s="$s" '$1 == s { print $2 }' <<<"$holders")
  held_by=$(for k in 1 2 3 4; do [ "$(cluster_port demo-$k)" = "$n" ] && echo "demo-$k"; done)
  check "pgbench on shard $s: 0 failed transactions, every row once on the server holding it" \
    "$(sed -nE 's/^number of failed transactions: ([0-9]+).*/\1/p' "$work/pgbench$s.out")|$(q -d "$(conn "$held_by")" -c "SELECT count(*) FROM insta$s.users WHERE name = 'pgbench'")" \
    "0|$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/pgbench$s.out")"
done
finish
