#!/usr/bin/env bash
# adopt_id_column's time per million rows, for `make bench` (never part of
# `make test`): one throwaway cluster (preloaded, fsync on), tables of each
# size in SIZES (rows), made afresh and checkpointed before every timed
# run, the kinds interleaved in a rotating order over ROUNDS rounds:
#   bigserial   a bigserial key: no rewrite, only the default changes
#   identity    an identity key: the identity dropped, a sequence in its place
#   serial      a serial (integer) key: the table rewritten to bigint
#   serial_fk   the same with a referencing table of as many rows (an indexed
#               integer foreign key): both rewritten, the key revalidated
#   alter       the floor of `serial`: the plain ALTER TABLE ... TYPE bigint
#   alter_fk    the floor of `serial_fk`: both columns ALTERed, one statement each
# Raw figures go to target/bench/adopt-pgNN; bench/report.py reports them.
#   ROUNDS=3 SIZES='1000000 4000000' PG=18 bench/adopt.sh
source "$(dirname "$0")/../scripts/dev/harness.sh"
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-1000000 4000000}
out="$repo/target/bench/adopt-pg$PG"; rm -rf "$out"; mkdir -p "$out"
raw="$out/raw.tsv"; : >"$raw"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$raw"; echo "round $1  $2  $3"; }

trap 'stop_cluster bench-adopt' EXIT
cluster_destroy bench-adopt
cluster_start bench-adopt --preload --conf 'fsync = on' --conf 'shared_buffers = 1GB' --conf 'max_wal_size = 8GB'
eval "$(cluster_env bench-adopt)"
q -d postgres -c "CREATE DATABASE bench" -c "ALTER DATABASE bench SET maintenance_work_mem = '256MB'"
q -d bench -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id" -f "$repo/bench/time_of.sql" >/dev/null

# make KIND ROWS: the tables a run of KIND times, filled and analyzed.
make_tables() {
  local kind=$1 rows=$2 key
  case "$kind" in
    bigserial) key="bigserial PRIMARY KEY" ;;
    identity) key="bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY" ;;
    *) key="serial PRIMARY KEY" ;;
  esac
  q -d bench -c "SET client_min_messages = warning" -c "DROP TABLE IF EXISTS child, parent" \
    -c "CREATE TABLE parent (id $key, v int NOT NULL)" \
    -c "INSERT INTO parent (v) SELECT g FROM generate_series(1, $rows) g"
  case "$kind" in *_fk)
    q -d bench -c "CREATE TABLE child (id bigserial PRIMARY KEY, parent_id int NOT NULL REFERENCES parent, v int)" \
      -c "INSERT INTO child (parent_id, v) SELECT g, g FROM generate_series(1, $rows) g" \
      -c "CREATE INDEX ON child (parent_id)" ;;
  esac
  q -d bench -c "VACUUM ANALYZE" -c "CHECKPOINT"
}
adopt="SELECT count(*) FROM insta_id.adopt_id_column('parent', 'id', 1)"
declare -A stmt=(
  [bigserial]=$adopt [identity]=$adopt [serial]=$adopt [serial_fk]=$adopt
  [alter]="ALTER TABLE parent ALTER COLUMN id TYPE bigint"
  [alter_fk]="ALTER TABLE parent ALTER COLUMN id TYPE bigint; ALTER TABLE child ALTER COLUMN parent_id TYPE bigint"
)
kinds=(bigserial identity serial serial_fk alter alter_fk)
for round in $(seq 1 "$ROUNDS"); do
  n=${#kinds[@]}
  for i in $(seq 0 $((n - 1))); do
    kind=${kinds[$(( (i + round) % n ))]}
    for rows in $SIZES; do
      make_tables "$kind" "$rows"
      s=$(q -d bench -c "SELECT time_of(\$q\$${stmt[$kind]}\$q\$)")
      record "$round" "$kind/$rows" "$s"
      # What it did, checked: the key is bigint with a next_id default, or
      # (the floors) bigint only; no row lost.
      check=$(q -d bench -c "SELECT format_type(atttypid, atttypmod) || ' ' || coalesce(pg_get_expr(adbin, adrelid) LIKE 'insta_id.next_id(1, %', false)
                               || ' ' || (SELECT count(*) FROM parent)
                             FROM pg_attribute LEFT JOIN pg_attrdef ON adrelid = attrelid AND adnum = attnum
                             WHERE attrelid = 'parent'::regclass AND attname = 'id'")
      want="bigint true $rows"; case "$kind" in alter*) want="bigint false $rows" ;; esac
      [ "$check" = "$want" ] || { echo "bench/adopt.sh: $kind/$rows left '$check', expected '$want'" >&2; exit 1; }
    done
  done
done
for kind in "${kinds[@]}"; do printf '%s\t%s\n' "$kind" "${stmt[$kind]}"; done >"$out/statements.tsv"
{
  echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(sed -nE 's/^model name\s*: //p' /proc/cpuinfo | head -n1)"
  echo "postgres: $(q -d bench -c 'SELECT version()')"
  echo "rounds: $ROUNDS; sizes: $SIZES; date: $(date -u +%Y-%m-%d)"
} >"$out/machine.txt"
say "bench: adopt_id_column's timings of PostgreSQL $PG in $out"
