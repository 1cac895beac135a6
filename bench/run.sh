#!/usr/bin/env bash
# `make bench`: every performance figure of the README and BENCHMARKS.md,
# measured in one run on a throwaway cluster with insta_id preloaded and, on
# PostgreSQL 17+, a second one without preloading (the DSM-registry guard:
# contenders named *_dsm). Contenders are interleaved, in a rotating order, over
# ROUNDS rounds; bench/report.py turns the raw timings into medians, ratios,
# BENCHMARKS.md and bench/per_call.png. Never part of `make test`.
#   ROUNDS=7 PGBENCH_SECONDS=5 bench/run.sh
source "$(dirname "$0")/../scripts/harness.sh"
ROUNDS=${ROUNDS:-7}
PGBENCH_SECONDS=${PGBENCH_SECONDS:-5}
out="$repo/target/bench"; mkdir -p "$out"
raw="$out/raw.tsv"; : >"$raw"

clusters=(bench)
[ "$PG" -ge 17 ] && clusters+=(bench-dsm)
trap 'for c in "${clusters[@]}"; do stop_cluster "$c"; done' EXIT
# on CLUSTER CMD...: run CMD pointed at that cluster.
on() { ( eval "$(cluster_env "$1")"; shift; "$@" ); }
for c in "${clusters[@]}"; do
  cluster_destroy "$c"
  cluster_start "$c" $([ "$c" = bench ] && echo --preload)
  on "$c" q -d postgres -c "CREATE DATABASE bench"
  on "$c" q -d bench -f "$repo/bench/time_of.sql" -f "$repo/bench/setup.sql" >/dev/null
  # Keep generate_series' million rows in memory for every contender alike.
  on "$c" q -d postgres -c "ALTER DATABASE bench SET work_mem = '256MB'"
done
eval "$(cluster_env bench)"

N=1000000
spread="FROM generate_series(1, $N) g, seqs"
declare -A sql=(
  [per_call/nextval]="SELECT count(nextval(s[(g & 63) + 1])) $spread"
  [per_call/next_id]="SELECT count(insta_id.next_id(1, s[(g & 63) + 1])) $spread"
  [per_call/plpgsql_original]="SELECT count(plpgsql_next_id(1, s[(g & 63) + 1])) $spread"
  [per_call/gen_random_uuid]="SELECT count(gen_random_uuid()) $spread"
  [ceiling/next_id_one_sequence]="SELECT count(insta_id.next_id(1, 'single_seq')) FROM generate_series(1, $N) g"
  [insert_500k/bigserial]="INSERT INTO ins_bigserial (v) SELECT g FROM generate_series(1, 500000) g"
  [insert_500k/plpgsql_original]="INSERT INTO ins_plpgsql_original (v) SELECT g FROM generate_series(1, 500000) g"
  [insert_500k/next_id]="INSERT INTO ins_next_id (v) SELECT g FROM generate_series(1, 500000) g"
  [decode/id_parts]="SELECT count(*) FROM (SELECT insta_id.id_parts(id) AS p FROM decode_ids OFFSET 0) x WHERE (p).created_at IS NOT NULL AND (p).shard_id >= 0 AND (p).seq_id >= 0"
  [decode/scalar_decoders]="SELECT count(*) FROM decode_ids WHERE insta_id.created_at(id) IS NOT NULL AND insta_id.shard_id(id) >= 0 AND insta_id.seq_id(id) >= 0"
  [decode/sql_bit_shifts]="SELECT count(*) FROM decode_ids WHERE to_timestamp(((id >> 23) + 1314220021721) / 1000.0) IS NOT NULL AND ((id >> 10) & 8191)::int >= 0 AND (id & 1023)::int >= 0"
)
names=(per_call/nextval per_call/next_id per_call/plpgsql_original per_call/gen_random_uuid
       ceiling/next_id_one_sequence insert_500k/bigserial insert_500k/plpgsql_original insert_500k/next_id
       decode/id_parts decode/scalar_decoders decode/sql_bit_shifts)
if [ "$PG" -ge 17 ]; then
  # The same statements on the cluster without preloading.
  for n in per_call/nextval per_call/next_id insert_500k/bigserial insert_500k/next_id; do
    sql[${n}_dsm]=${sql[$n]}; names+=("${n}_dsm")
  done
fi
cluster_of() { case "$1" in *_dsm) echo bench-dsm ;; *) echo bench ;; esac; }

for round in $(seq 1 "$ROUNDS"); do
  n=${#names[@]}
  for i in $(seq 0 $((n - 1))); do
    name=${names[$(( (i + round) % n ))]}
    c=$(cluster_of "$name"); table=${name#insert_500k/}
    case "$name" in insert_500k/*) on "$c" q -d bench -c "TRUNCATE ins_${table%_dsm}" -c "CHECKPOINT" ;; esac
    s=$(on "$c" q -d bench -c "SELECT time_of(\$q\$${sql[$name]}\$q\$)")
    printf '%s\t%s\t%s\n' "$round" "$name" "$s" >>"$raw"
    echo "round $round  $name  $s s"
  done
done

# INSERT throughput with pgbench: 4 clients, one row per transaction.
for round in $(seq 1 "$ROUNDS"); do
  for t in bigserial plpgsql_original next_id; do
    q -d bench -c "TRUNCATE ins_$t"
    echo "INSERT INTO ins_$t (v) VALUES (1);" >"$out/pgbench_$t.sql"
    tps=$(pgbench -n -c 4 -j 2 -T "$PGBENCH_SECONDS" -f "$out/pgbench_$t.sql" bench 2>&1 \
          | sed -nE 's/^tps = ([0-9.]+) .*/\1/p')
    name="pgbench_tps/$t"
    printf '%s\t%s\t%s\n' "$round" "$name" "$tps" >>"$raw"
    echo "round $round  $name  $tps tps"
  done
done

# create_shards: 1000 logical shards from a template of 3 tables, in one call
# (one transaction), once.
q -d postgres -c "CREATE DATABASE shards"
q -d shards -c "CREATE EXTENSION insta_id" -f "$repo/bench/time_of.sql" -f "$repo/tests/fixtures/shard_template.sql" >/dev/null
s=$(q -d shards -c "SELECT time_of('SELECT insta_id.create_shards(1, 1000, ''template'')')")
printf '1\tcreate_shards/1000_shards_3_tables\t%s\n' "$s" >>"$raw"
echo "create_shards 1000 shards x 3 tables  $s s"

{
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(sed -nE 's/^model name\s*: //p' /proc/cpuinfo | head -n1)"
  echo "postgres: $(q -d bench -c 'SELECT version()')"
  echo "insta_id: $(q -d bench -c "SELECT extversion FROM pg_extension WHERE extname = 'insta_id'"), guard $(q -d bench -c 'SELECT insta_id.guard_mode()')"
  echo "rounds: $ROUNDS; pgbench seconds: $PGBENCH_SECONDS; date: $(date -u +%Y-%m-%d)"
} >"$out/machine.txt"
for name in "${names[@]}"; do printf '%s\t%s\n' "$name" "${sql[$name]}"; done >"$out/statements.tsv"
printf 'create_shards/1000_shards_3_tables\tSELECT insta_id.create_shards(1, 1000, %s)\n' "'template'" >>"$out/statements.tsv"
# The plot needs matplotlib: a private virtualenv, made once (from PyPI).
venv="$repo/target/bench-venv"
if ! "$venv/bin/python" -c "import matplotlib" 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q matplotlib
fi
"$venv/bin/python" "$repo/bench/report.py" "$out" "$repo"
