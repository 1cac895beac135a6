#!/usr/bin/env bash
# `make bench` on one PostgreSQL version (PG=NN): every figure of
# BENCHMARKS.md for that version, measured in one run on a throwaway cluster
# with insta_id preloaded and a second one without preloading (the guard in
# a DSM segment, the registry's on 17+, the published one on 15 and 16:
# contenders named *_dsm), and a twin of
# the first running the previous release's library and SQL (built from its
# commit in sql/RELEASES: contenders named *_prev). Contenders are
# interleaved, in a rotating order, over ROUNDS rounds. Raw timings go to
# target/bench/pgNN; bench/report.py turns those of one or more versions into
# medians, ratios, BENCHMARKS.md and bench/per_call.png. Never part of `make test`.
#   ROUNDS=7 SCALING_ROUNDS=3 PGBENCH_SECONDS=3 IN_USE='10 10000 100000' PG=18 bench/run.sh
source "$(dirname "$0")/../scripts/dev/harness.sh"
ROUNDS=${ROUNDS:-7}
SCALING_ROUNDS=${SCALING_ROUNDS:-3}
PGBENCH_SECONDS=${PGBENCH_SECONDS:-3}
out="$repo/target/bench/pg$PG"; rm -rf "$out"; mkdir -p "$out"
raw="$out/raw.tsv"; : >"$raw"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$raw"; echo "round $1  $2  $3"; }

clusters=(bench bench-prev)
clusters+=(bench-dsm)
prev_config=$("$repo/scripts/dev/build.sh" previous)
prev_version=$(realpath --relative-to="$repo/target/previous" "$prev_config" | cut -d/ -f1)
trap 'for c in "${clusters[@]}"; do stop_cluster "$c"; done' EXIT
# on CLUSTER CMD...: run CMD pointed at that cluster.
on() { ( eval "$(cluster_env "$1")"; shift; "$@" ); }
for c in "${clusters[@]}"; do
  cluster_destroy "$c"
  # fsync on, as in production: the cost of the durable high-water mark's
  # fdatasync is inside the figures. Locks and buffers: one statement below
  # draws from 100,000 sequences, each locked until commit and each a page.
  preload=(); [ "$c" = bench-dsm ] || preload=(--preload)
  # The twin runs the copy of this installation that holds the previous library.
  bin=$PGBIN; [ "$c" = bench-prev ] && bin=$("$prev_config" --bindir)
  PGBIN=$bin cluster_start "$c" "${preload[@]}" \
    --conf 'fsync = on' --conf 'max_locks_per_transaction = 4096' --conf 'shared_buffers = 1GB'
  on "$c" q -d postgres -c "CREATE DATABASE bench"
  if [ "$c" = bench-prev ]; then
    # The previous SQL, and the plain sequences of the per-call statements.
    on "$c" q -d bench -f "$repo/bench/time_of.sql" -c "CREATE EXTENSION insta_id VERSION '$prev_version'" \
      -c "DO \$\$ BEGIN FOR i IN 0..63 LOOP EXECUTE format('CREATE SEQUENCE bs_%s', i); END LOOP; END \$\$" \
      -c "CREATE TABLE seqs AS SELECT array_agg(format('bs_%s', i)::regclass ORDER BY i) AS s FROM generate_series(0, 63) i" >/dev/null
  else
    on "$c" q -d bench -f "$repo/bench/time_of.sql" -f "$repo/bench/setup.sql" >/dev/null
  fi
  # Keep generate_series' million rows in memory for every contender alike.
  on "$c" q -d postgres -c "ALTER DATABASE bench SET work_mem = '256MB'"
done
eval "$(cluster_env bench)"

N=1000000
spread="FROM generate_series(1, $N) g, seqs"
cached="FROM generate_series(1, $N) g, hseqs"
declare -A sql=(
  [per_call/nextval]="SELECT count(nextval(s[(g & 63) + 1])) $spread"
  [per_call/next_id]="SELECT count(insta_id.next_id(1, s[(g & 63) + 1])) $spread"
  [per_call/next_id_untracked]="SELECT count(insta_id.next_id(1, s[(g & 63) + 1])) $spread, (SELECT set_config('insta_id.track_guard_stats', 'off', false)) untracked"
  [per_call/next_id_pg_extern]="SELECT count(next_id_pg_extern(1, s[(g & 63) + 1])) $spread"
  [per_call/nextval_cached]="SELECT count(nextval(s[(g & 63) + 1])) $cached"
  [per_call/next_id_cached]="SELECT count(insta_id.next_id(1, s[(g & 63) + 1])) $cached"
  [per_call/plpgsql_original]="SELECT count(plpgsql_next_id(1, s[(g & 63) + 1])) $spread"
  [per_call/gen_random_uuid]="SELECT count(gen_random_uuid()) $spread"
  [ceiling/next_id_one_sequence]="SELECT count(insta_id.next_id(1, 'single_seq')) FROM generate_series(1, $N) g"
  [insert_500k/bigserial]="INSERT INTO ins_bigserial (v) SELECT g FROM generate_series(1, 500000) g"
  [insert_500k/next_id]="INSERT INTO ins_next_id (v) SELECT g FROM generate_series(1, 500000) g"
  [insert_500k/next_id_helper]="INSERT INTO ins_next_id_helper (v) SELECT g FROM generate_series(1, 500000) g"
  [insert_500k/ids_next_id_order]="INSERT INTO ins_ids_next_id_order (id, v) SELECT id, v FROM ids_made ORDER BY v"
  [insert_500k/ids_serial_order]="INSERT INTO ins_ids_serial_order (id, v) SELECT serial_id, v FROM ids_made ORDER BY v"
  [insert_500k/nextval_spread]="INSERT INTO ins_nextval_spread (id, v) SELECT nextval(s[(g & 63) + 1]) * 64 + (g & 63), g FROM generate_series(1, 500000) g, seqs"
  [insert_500k/next_id_spread]="INSERT INTO ins_next_id_spread (id, v) SELECT insta_id.next_id((g & 63) + 1, s[(g & 63) + 1]), g FROM generate_series(1, 500000) g, seqs"
  [decode/id_parts]="SELECT count(*) FROM (SELECT insta_id.id_parts(id) AS p FROM decode_ids OFFSET 0) x WHERE (p).created_at IS NOT NULL AND (p).shard_id >= 0 AND (p).seq_id >= 0"
  [decode/sql_expression]="SELECT count(*) FROM decode_ids WHERE to_timestamp((((id >> 23) & 2199023255551) + 1314220021721) / 1000.0) IS NOT NULL AND ((id >> 10) & 8191)::int >= 0 AND (id & 1023)::int >= 0"
  [decode/scalar_decoders]="SELECT count(*) FROM decode_ids WHERE insta_id.created_at(id) IS NOT NULL AND insta_id.shard_id(id) >= 0 AND insta_id.seq_id(id) >= 0"
  [decode/shard_id]="SELECT count(*) FROM decode_ids WHERE insta_id.shard_id(id) >= 0"
  [decode/shard_id_pg_extern]="SELECT count(*) FROM decode_ids WHERE shard_id_pg_extern(id) >= 0"
  [decode/shortcode]="SELECT count(*) FROM decode_ids WHERE insta_id.shortcode(id) IS NOT NULL"
  [decode/from_shortcode]="SELECT count(*) FROM decode_codes WHERE insta_id.from_shortcode(code) <> 0"
)
names=(per_call/nextval per_call/next_id per_call/next_id_untracked per_call/next_id_pg_extern
       per_call/nextval_cached per_call/next_id_cached per_call/plpgsql_original per_call/gen_random_uuid
       ceiling/next_id_one_sequence
       insert_500k/bigserial insert_500k/next_id insert_500k/next_id_helper
       insert_500k/nextval_spread insert_500k/next_id_spread
       insert_500k/ids_next_id_order insert_500k/ids_serial_order
       decode/id_parts decode/sql_expression decode/scalar_decoders decode/shard_id decode/shard_id_pg_extern
       decode/shortcode decode/from_shortcode)
if [ "$PG" -ge 18 ]; then
  # PostgreSQL 18's uuidv7(): next_id must stay cheaper, per call and per row.
  sql[per_call/uuidv7]="SELECT count(uuidv7()) $spread"
  sql[insert_500k/uuidv7]="INSERT INTO ins_uuidv7 (v) SELECT g FROM generate_series(1, 500000) g"
  names+=(per_call/uuidv7 insert_500k/uuidv7)
fi
# The previous release, preloaded, on the same plain sequences.
for n in per_call/nextval per_call/next_id; do sql[${n}_prev]=${sql[$n]}; names+=("${n}_prev"); done
# The same statements on the cluster without preloading.
for n in per_call/nextval per_call/next_id per_call/next_id_cached insert_500k/bigserial \
         insert_500k/next_id_helper insert_500k/nextval_spread insert_500k/next_id_spread; do
  sql[${n}_dsm]=${sql[$n]}; names+=("${n}_dsm")
done
cluster_of() { case "$1" in *_dsm) echo bench-dsm ;; *_prev) echo bench-prev ;; *) echo bench ;; esac; }
# ins_table NAME: the table an insert_500k/* contender fills.
ins_table() { local t=${1#insert_500k/}; echo "ins_${t%_dsm}"; }

for round in $(seq 1 "$ROUNDS"); do
  n=${#names[@]}
  for i in $(seq 0 $((n - 1))); do
    name=${names[$(( (i + round) % n ))]}
    c=$(cluster_of "$name")
    case "$name" in insert_500k/*) on "$c" q -d bench -c "TRUNCATE $(ins_table "$name")" -c "CHECKPOINT" ;; esac
    s=$(on "$c" q -d bench -c "SELECT time_of(\$q\$${sql[$name]}\$q\$)")
    record "$round" "$name" "$s"
  done
done
for name in "${names[@]}"; do printf '%s\t%s\n' "$name" "${sql[$name]}"; done >"$out/statements.tsv"

# The ratios of the targets, as adjacent pairs in one session (see paired()
# in bench/time_of.sql): PAIRS pairs each, INTERVAL_PAIRS for the INSERTs
# and the decoders, whose targets are the upper bound of a bootstrap
# interval (bench/report.py). Recorded as pair/<a>/<b> (time(a) / time(b))
# and diff/<a>/<b> (time(a) - time(b), seconds).
PAIRS=${PAIRS:-15}
INTERVAL_PAIRS=${INTERVAL_PAIRS:-60}
pairs=(per_call/next_id:per_call/nextval per_call/next_id_cached:per_call/nextval
       per_call/next_id_cached:per_call/nextval_cached per_call/next_id_untracked:per_call/next_id
       per_call/next_id_pg_extern:per_call/next_id per_call/plpgsql_original:per_call/next_id
       insert_500k/next_id_helper:insert_500k/bigserial insert_500k/next_id_spread:insert_500k/nextval_spread
       insert_500k/next_id:insert_500k/bigserial insert_500k/ids_next_id_order:insert_500k/ids_serial_order
       decode/id_parts:decode/sql_expression decode/scalar_decoders:decode/sql_expression
       decode/shard_id_pg_extern:decode/shard_id
       decode/shortcode:decode/id_parts decode/from_shortcode:decode/id_parts
       per_call/next_id:per_call/next_id_prev per_call/next_id_prev:per_call/nextval_prev)
[ "$PG" -ge 18 ] && pairs+=(per_call/uuidv7:per_call/next_id insert_500k/uuidv7:insert_500k/next_id_helper)
pairs+=(per_call/next_id_dsm:per_call/nextval_dsm per_call/next_id_cached_dsm:per_call/nextval_dsm
        insert_500k/next_id_helper_dsm:insert_500k/bigserial_dsm
        insert_500k/next_id_spread_dsm:insert_500k/nextval_spread_dsm
        per_call/next_id_dsm:per_call/next_id)
for pair in "${pairs[@]}"; do
  a=${pair%%:*}; b=${pair#*:}; c=$(cluster_of "$a")
  if [ "$(cluster_of "$b")" != "$c" ]; then
    # Across the two clusters: alternate statements from two sessions.
    for i in $(seq 1 "$PAIRS"); do
      ta=$(on "$c" q -d bench -c "SELECT time_of(\$q\$${sql[$a]}\$q\$)")
      tb=$(on "$(cluster_of "$b")" q -d bench -c "SELECT time_of(\$q\$${sql[$b]}\$q\$)")
      record "$i" "pair/$a/$b" "$(awk -v a="$ta" -v b="$tb" 'BEGIN { print a / b }')"
      record "$i" "diff/$a/$b" "$(awk -v a="$ta" -v b="$tb" 'BEGIN { print a - b }')"
    done
    continue
  fi
  # What the series before left dirty is written now, not during this one.
  on "$c" q -d bench -c "CHECKPOINT"
  n=$PAIRS
  case "$a" in insert_500k/*|decode/id_parts) n=$INTERVAL_PAIRS ;; esac
  prep="\$p\$RESET insta_id.track_guard_stats\$p\$"
  case "$a" in insert_500k/*) prep="\$p\$TRUNCATE $(ins_table "$a"), $(ins_table "$b")\$p\$" ;; esac
  i=0
  while IFS='|' read -r r d; do
    i=$((i + 1)); record "$i" "pair/$a/$b" "$r"; record "$i" "diff/$a/$b" "$d"
  done < <(on "$c" q -d bench -c "SELECT ta / tb, ta - tb FROM paired(\$a\$${sql[$a]}\$a\$, \$b\$${sql[$b]}\$b\$, $n, $prep)")
done

# The primary keys' sizes, in pages, after one insert of each: the keys'
# order is what differs.
for name in insert_500k/ids_next_id_order insert_500k/ids_serial_order insert_500k/next_id insert_500k/bigserial; do
  t=$(ins_table "$name")
  record 1 "pages/$t" "$(q -d bench -c "TRUNCATE $t" -c "${sql[$name]}" \
    -c "SELECT pg_relation_size('${t}_pkey') / current_setting('block_size')::int")"
done

# Sequences in use: 300,000 calls round-robin over 10, 10,000 and 100,000
# sequences; the guard's table holds insta_id.max_sequences (16,384) of them,
# so at 100,000 every call evicts one. The array is built per statement (a
# CTE, the same for both contenders): a stored 100,000-element array would be
# detoasted on every subscript.
IN_USE=${IN_USE:-10 10000 100000}
most=$(printf '%s\n' $IN_USE | sort -n | tail -n1)
for start in $(seq 0 10000 $((most - 1))); do  # 10,000 per transaction
  q -d bench -c "DO \$\$ BEGIN FOR i IN $start..$((start + 9999)) LOOP EXECUTE format('CREATE SEQUENCE u_%s', i); END LOOP; END \$\$"
done
in_use() { # COUNT CALL: CALL with @ for the sequence
  local call=${2//@/"s[(g % $1) + 1]"}
  echo "WITH a AS MATERIALIZED (SELECT array_agg(format('u_%s', i)::regclass ORDER BY i) AS s FROM generate_series(0, $(($1 - 1))) i) SELECT count($call) FROM generate_series(1, 300000) g, a"
}
declare -A call=([nextval]="nextval(@)" [next_id]="insta_id.next_id(1, @)")
for round in $(seq 1 "$SCALING_ROUNDS"); do
  for count in $IN_USE; do
    for fn in nextval next_id; do
      stmt=$(in_use "$count" "${call[$fn]}")
      # Timed the second time in one session: the first opens every
      # sequence (relcache), which costs both contenders alike and a lot.
      t=$(q -d bench -c "SELECT time_of(\$q\$$stmt\$q\$)" -c "SELECT insta_id.guard_stats_reset()" \
            -c "SELECT time_of(\$q\$$stmt\$q\$)" | tail -n1)
      record "$round" "in_use/$count/$fn" "$t"
      [ "$fn" = nextval ] || record "$round" "in_use/$count/evictions" \
        "$(q -d bench -c "SELECT evictions FROM insta_id.guard_stats_total()")"
      [ "$round" != 1 ] || printf 'in_use/%s/%s\t%s\n' "$count" "$fn" "$stmt" >>"$out/statements.tsv"
    done
  done
done

# Scaling with sessions (pgbench): 1, 2 and 4 clients inserting single rows or
# batches of 100, (a) all into one table (one sequence: the guard's hot
# case), (b) each client into its own table (its own shard and sequence);
# next_id tables made by add_id_column, against bigserial. Rows per second.
pgb="$out/pgbench"; mkdir -p "$pgb"
for gen in bigserial next_id; do
  for size in row batch100; do
    values="VALUES (1)"; [ "$size" = batch100 ] && values="SELECT g FROM generate_series(1, 100) g"
    echo "INSERT INTO one_$gen (v) $values;" >"$pgb/${size}_one_$gen.sql"
    {
      for c in 0 1 2 3; do
        [ "$c" = 0 ] && echo "\\if :client_id = 0" || echo "\\elif :client_id = $c"
        echo "INSERT INTO own_${gen}_$c (v) $values;"
      done
      echo "\\endif"
    } >"$pgb/${size}_own_$gen.sql"
  done
done
for round in $(seq 1 "$SCALING_ROUNDS"); do
  for clients in 1 2 4; do
    for size in row batch100; do
      for where in one own; do
        for gen in bigserial next_id; do
          q -d bench -c "TRUNCATE one_$gen, own_${gen}_0, own_${gen}_1, own_${gen}_2, own_${gen}_3"
          tps=$(pgbench -n -c "$clients" -j "$((clients < 2 ? clients : 2))" -T "$PGBENCH_SECONDS" \
                -f "$pgb/${size}_${where}_$gen.sql" bench 2>&1 | sed -nE 's/^tps = ([0-9.]+) .*/\1/p')
          rows=$(awk -v t="$tps" -v s="$size" 'BEGIN { printf "%.0f", t * (s == "row" ? 1 : 100) }')
          record "$round" "scaling/$size/$where/$clients/$gen" "$rows"
        done
      done
    done
  done
done

{
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(sed -nE 's/^model name\s*: //p' /proc/cpuinfo | head -n1)"
  echo "postgres: $(q -d bench -c 'SELECT version()')"
  echo "insta_id: $(q -d bench -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'"), guard $(q -d bench -c 'SELECT insta_id.guard_mode()'); previous release on the twin: $prev_version"
  echo "rounds: $ROUNDS (scaling and sequences in use: $SCALING_ROUNDS); pgbench seconds: $PGBENCH_SECONDS; date: $(date -u +%Y-%m-%d)"
} >"$out/machine.txt"
say "bench: raw timings of PostgreSQL $PG in $out"
