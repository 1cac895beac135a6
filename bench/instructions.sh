#!/usr/bin/env bash
# Instructions per call of nextval() and next_id on the same plain sequences,
# counted with valgrind's callgrind (this VM exposes no hardware counters to
# perf stat): unlike wall time they do not drift with the machine's speed.
# Part of `make bench`; appends instructions/<guard>/<fn> rows to
# target/bench/pgNN/raw.tsv (bench/run.sh made it).
#
# Each count runs one statement in a single-user backend (postgres --single)
# under callgrind, once with N calls and once with 2N: the difference over N is
# the cost of one call, without the backend's start, the parse and the plan.
# Guards: preloaded (shared memory), and not preloaded (a DSM segment: the
# registry's on 17+, the one published in the data directory on 15 and 16).
# Each count is made ROUNDS times (default 3): the report takes the median,
# and their spread is how far two counts of one build can differ.
#   N=20480 ROUNDS=3 PG=18 bench/instructions.sh
source "$(dirname "$0")/../scripts/dev/harness.sh"
# A multiple of 64 sequences x 32 values: nextval writes a sequence's WAL
# record every 32 values, so N and 2N calls write exactly N / 32 more
# records whatever the sequences' phase, and the counts repeat.
N=${N:-20480}
ROUNDS=${ROUNDS:-3}
out="$repo/target/bench/pg$PG"; mkdir -p "$out"
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is missing: scripts/dev/setup.sh bench" >&2; exit 1; }
guards=(preloaded dsm)

# ir DATA SQL: the instructions the backend executes for SQL.
ir() {
  as_pg valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$PGBIN/postgres" --single -D "$1" bench <<<"$2" 2>&1 |
    sed -nE 's/.*Collected : ([0-9]+)$/\1/p'
}
for guard in "${guards[@]}"; do
  data="$out/callgrind-$guard"
  rm -rf "$data"; mkdir -p "$data"; chown "$(as_pg id -un)" "$data" 2>/dev/null || true
  as_pg "$PGBIN/initdb" -D "$data" -U postgres --no-sync >/dev/null
  [ "$guard" = preloaded ] && echo "shared_preload_libraries = 'insta_id'" | as_pg tee -a "$data/postgresql.conf" >/dev/null
  as_pg "$PGBIN/postgres" --single -D "$data" postgres <<<"CREATE DATABASE bench" >/dev/null 2>&1
  # The per-call statements' 64 plain sequences (bench/setup.sql), used a
  # thousand times each by both functions first, so that no count meets a
  # sequence's first values (whose WAL differs).
  as_pg "$PGBIN/postgres" --single -j -D "$data" bench >/dev/null 2>&1 <<'EOF'
CREATE EXTENSION insta_id;
DO $$ BEGIN FOR i IN 0..63 LOOP EXECUTE format('CREATE SEQUENCE bs_%s', i); END LOOP; END $$;
CREATE TABLE seqs AS SELECT array_agg(format('bs_%s', i)::regclass ORDER BY i) AS s FROM generate_series(0, 63) i;
SELECT count(nextval(s[(g & 63) + 1])) FROM generate_series(1, 64000) g, seqs;
SELECT count(insta_id.next_id(1, s[(g & 63) + 1])) FROM generate_series(1, 64000) g, seqs;
EOF
  # Round 0 is not recorded: the first backends after the set-up do more
  # (the relcache's init file, ...) and their counts come out lower.
  for round in $(seq 0 "$ROUNDS"); do
    for fn in nextval next_id; do
      call="nextval(s[(g & 63) + 1])"; [ "$fn" = next_id ] && call="insta_id.next_id(1, s[(g & 63) + 1])"
      stmt() { echo "SELECT count($call) FROM generate_series(1, $1) g, seqs"; }
      one=$(ir "$data" "$(stmt "$N")"); two=$(ir "$data" "$(stmt $((2 * N)))")
      [ -n "$one" ] && [ -n "$two" ] || { echo "instructions.sh: callgrind counted nothing for $fn ($guard)" >&2; exit 1; }
      per=$(( (two - one) / N ))
      [ "$round" = 0 ] && continue
      printf '%s\tinstructions/%s/%s\t%s\n' "$round" "$guard" "$fn" "$per" >>"$out/raw.tsv"
      echo "round $round  instructions/$guard/$fn  $per per call"
    done
  done
  rm -rf "$data"
done
