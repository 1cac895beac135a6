#!/usr/bin/env bash
# Logical shards with standard tools, on real clusters:
# - a database with 64 shards (from a template) survives pg_dump/pg_restore:
#   the registry comes along, inserts continue, no ID repeats;
# - one shard moves to another server with the README's procedure
#   (lock out writers, pg_dump -n, pg_restore, adopt_shard, drop_shard) and
#   writes resume there without repeating an ID;
# - all 8192 shards on a server with PostgreSQL's default lock table
#   (shard_drift over all of them; with views, in the ranges it hints):
#   create_shards refuses the range up front (54000) and makes nothing;
#   create_shards_in_batches, cancelled part-way, leaves only complete,
#   registered shards, and called again finishes the job; from psycopg it
#   runs in autocommit mode and fails with 2D000 inside a transaction;
# - migrations (insta_id.migrate) on the 64 shards: history through
#   pg_dump/pg_restore and a shard move; against a long transaction, the
#   runner retries under lock_timeout while writers go on; a second runner
#   is refused; out of retries it stops at the busy shard; killed (kill -9)
#   it leaves no shard half-migrated; called again it goes on; run while
#   create_shards_in_batches copies the template, every shard ends migrated.
source "$(dirname "$0")/../scripts/dev/harness.sh"
dump=$(mktemp -d); trap 'rm -rf "$dump"' EXIT
[ "$(id -u)" = 0 ] && chmod 777 "$dump"

start_cluster shards-a --preload
a_env=$(cluster_env shards-a)
q -d postgres -c "CREATE DATABASE app" -c "CREATE ROLE app_writer LOGIN"
q -d app -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id" -f "$repo/tests/fixtures/shard_template.sql" \
  -f "$repo/tests/fixtures/template_extras.sql" -f "$repo/tests/fixtures/fill_shards.sql" >/dev/null
q -d app <<'SQL'
SELECT insta_id.create_shards(1, 64, 'template');
-- 100 users and 100 photos in every shard.
CALL public.fill_shards(100);
-- All photo IDs of all shards, tagged with the shard whose table holds them.
CREATE FUNCTION public.all_photo_ids() RETURNS TABLE (shard int, id bigint) LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT shard_id, schema_name FROM insta_id.shards ORDER BY shard_id LOOP
    IF to_regclass(format('%I.photos', r.schema_name)) IS NOT NULL THEN
      RETURN QUERY EXECUTE format('SELECT %s, id FROM %I.photos', r.shard_id, r.schema_name);
    END IF;
  END LOOP;
END $$;
SQL
check "64 shards registered, each with the template's 6 tables" "$(q -d app -c "SELECT count(*) FROM insta_id.shards WHERE tables = 6")" 64
# schema_ddl DB SCHEMA SHARD: pg_dump -s of one schema, its name and next_id's shard number as placeholders.
schema_ddl() {
  pg_dump -s -n "$2" "$1" | grep -v '^\\\(un\)\?restrict ' | sed -E "s/\b$2\b/<schema>/g; s/insta_id\.next_id\($3, /insta_id.next_id(<shard>, /g"
}
check "a shard's pg_dump -s is the template's, object for object (functions, trigger, views, policy, grants, owners)" \
  "$(diff <(schema_ddl app template 0) <(schema_ddl app insta1 1) && echo same)" same
check "the copy has them all" "$(schema_ddl app insta1 1 | grep -cE '^CREATE (FUNCTION|TRIGGER|VIEW|MATERIALIZED VIEW|POLICY|UNIQUE INDEX photo_counts|TYPE <schema>.visibility)|^ALTER TABLE <schema>.likes ENABLE ROW|OWNER TO app_writer|^GRANT SELECT ON TABLE <schema>.photo_captions TO app_writer|^ALTER TABLE ONLY <schema>.events ATTACH PARTITION')" 13
# A migration of the template and all 64 shards, recorded per schema.
q -d app -c "SET client_min_messages = warning" \
  -c "CALL insta_id.migrate('0001_photos_likes', 'template', \$\$ALTER TABLE photos ADD COLUMN likes int NOT NULL DEFAULT 0; CREATE INDEX photos_likes_idx ON photos (likes)\$\$)"
check "migrated: the template and 64 shards have it, none differs from the template" \
  "$(q -d app -F ' ' -c "SELECT count(*), (SELECT count(*) FROM insta_id.shard_drift('template')) FROM insta_id.applied_migrations")" "65 0"

pg_dump -Fc -f "$dump/app.dump" app
q -d postgres -c "CREATE DATABASE restored"
pg_restore -d restored "$dump/app.dump"
check "restored: the registry came with the dump" \
  "$(q -d restored -c "SELECT count(*), min(shard_id), max(shard_id) FROM insta_id.shards WHERE tables = 6" -F ' ')" "64 1 64"
q -d restored -c "DO \$\$ BEGIN FOR s IN 1..64 LOOP
    EXECUTE format('INSERT INTO insta%1\$s.photos (user_id, caption) SELECT id, ''after'' FROM insta%1\$s.users', s);
  END LOOP; END \$\$"
check "restored: inserts continue in every shard" "$(q -d restored -c "SELECT count(*) FROM all_photo_ids()")" 12800
check "restored: no ID repeats, before or after the dump" \
  "$(q -d restored -c "SELECT count(*) - count(DISTINCT id) FROM all_photo_ids()")" 0
check "restored: every ID decodes to the shard that holds it" \
  "$(q -d restored -c "SELECT count(*) FROM all_photo_ids() WHERE insta_id.shard_id(id) <> shard")" 0
check "restored: each shard holds every object it had" \
  "$(diff <(schema_ddl app insta5 5) <(schema_ddl restored insta5 5) && echo same)" same
check "restored: the partitioned table routes rows and mints the shard's IDs" \
  "$(q -d restored -F ' ' -c "INSERT INTO insta5.events (user_id, at) SELECT min(id), '2026-06-01' FROM insta5.users RETURNING tableoid::regclass, insta_id.shard_id(id)")" "insta5.events_2026 5"
check "restored: the trigger, view and materialized view work" \
  "$(q -d restored -F ' ' -c "INSERT INTO insta5.photos (user_id) SELECT min(id) FROM insta5.users RETURNING caption" \
       -c "REFRESH MATERIALIZED VIEW CONCURRENTLY insta5.photo_counts" \
       -c "SELECT max(photos), (SELECT max(caption_length) FROM insta5.photo_captions) FROM insta5.photo_counts")" "untitled
3 8"
check "restored: the migration history came with the dump" \
  "$(q -d restored -F ' ' -c "SELECT (SELECT count(*) FROM insta_id.migrations), count(*), (SELECT count(*) FROM insta_id.pending_migrations) FROM insta_id.applied_migrations")" "1 65 0"
q -d restored -c "SELECT insta_id.create_shards(65, 65, 'template')" >/dev/null
check "restored: a new shard has the template's migrations and its columns" \
  "$(q -d restored -F ' ' -c "SELECT count(*), (SELECT count(*) FROM insta_id.shard_drift('template')) FROM insta_id.applied_migrations WHERE schema_name = 'insta65'")" "1 0"

# Move shard 7 from server A to server B.
start_cluster shards-b --preload
b_env=$(cluster_env shards-b)
q -d postgres -c "CREATE DATABASE app" -c "CREATE ROLE app_writer LOGIN"
q -d app -c "SET client_min_messages = warning" -c "CREATE EXTENSION insta_id"
eval "$a_env"
q -d app -c "GRANT USAGE ON SCHEMA insta7 TO app_writer" \
  -c "GRANT INSERT, SELECT ON ALL TABLES IN SCHEMA insta7 TO app_writer" \
  -c "GRANT USAGE ON ALL SEQUENCES IN SCHEMA insta7 TO app_writer"
check "A: the application writes to shard 7" \
  "$(q -d app -U app_writer -c "INSERT INTO insta7.users (name) VALUES ('before move') RETURNING insta_id.shard_id(id)")" 7
# 1. Lock writers out of the shard on A: no more IDs minted there.
q -d app -c "REVOKE USAGE ON SCHEMA insta7 FROM app_writer"
check "A: writers are locked out of shard 7 during the move" \
  "$(q -d app -U app_writer -c "INSERT INTO insta7.users (name) VALUES ('x')" 2>&1 | grep -o 'permission denied for schema insta7')" \
  "permission denied for schema insta7"
# 2. Dump the shard's schema, 3. restore it on B, 4. register it there and
#    give writers back the schema privilege revoked in step 1.
pg_dump -Fc -n insta7 -f "$dump/insta7.dump" app
q -d app -c "\\copy (SELECT * FROM insta_id.applied_migrations WHERE schema_name = 'insta7') TO '$dump/insta7.migrations'"
eval "$b_env"
pg_restore -d app "$dump/insta7.dump"
q -d app -c "SELECT insta_id.adopt_shard('insta7', 7)" -c "\\copy insta_id.applied_migrations FROM '$dump/insta7.migrations'"
check "B: shard 7 holds every object it had on A" \
  "$(diff <(eval "$a_env"; schema_ddl app insta7 7) <(schema_ddl app insta7 7) && echo same)" same
q -d app -c "GRANT USAGE ON SCHEMA insta7 TO app_writer"
check "B: shard 7's migration history came along" \
  "$(q -d app -c "SELECT string_agg(migration, ',') FROM insta_id.applied_migrations WHERE schema_name = 'insta7'")" 0001_photos_likes
check "B: shard 7 registered after adopt_shard" "$(q -d app -c "SELECT schema_name FROM insta_id.shards WHERE shard_id = 7")" insta7
check "B: the application writes to shard 7 again" \
  "$(q -d app -U app_writer -c "INSERT INTO insta7.users (name) VALUES ('after move') RETURNING insta_id.shard_id(id)")" 7
q -d app -c "INSERT INTO insta7.photos (user_id, caption) SELECT id, 'on B' FROM insta7.users"
b_ids=$(q -d app -c "SELECT string_agg(id::text, ',') FROM insta7.photos WHERE caption = 'on B'")
# 5. Drop the old copy on A (after checking the move).
eval "$a_env"
a_ids=$(q -d app -c "SELECT string_agg(id::text, ',') FROM insta7.photos")
check "no photo ID minted on B repeats one minted on A" \
  "$(q -d app -c "SELECT count(*) - count(DISTINCT x) FROM unnest(string_to_array('$a_ids,$b_ids', ',')) x")" 0
check "B has A's 100 photos and 102 new ones, their seq fields continuing A's sequence" \
  "$(eval "$b_env"; q -d app -F ' ' -c "SELECT count(*), count(*) FILTER (WHERE caption = 'on B' AND insta_id.seq_id(id) > 100) FROM insta7.photos")" "202 102"
q -d app -c "SET client_min_messages = warning" -c "SELECT insta_id.drop_shard(7, force => true)"
check "A: shard 7 is gone" "$(q -d app -c "SELECT count(*) FROM insta_id.shards WHERE shard_id = 7")" 0
check "A: and so is its migration history" "$(q -d app -c "SELECT count(*) FROM insta_id.applied_migrations WHERE schema_name = 'insta7'")" 0

# Migrations against real sessions. A long transaction reads shard 10's photos;
# the runner's ALTER TABLE there needs a lock that waits for it. With
# lock_timeout it gives up after 100 ms and retries later, so the shard's
# writers never queue behind it for longer than that.
blocker() {  # blocker SHARD: a transaction holding a read lock until terminated
  psql -X -d app -c "BEGIN" -c "SELECT count(*) FROM insta$1.photos" -c "SELECT pg_sleep(300)" >/dev/null 2>&1 &
  for _ in $(seq 200); do
    [ "$(q -d app -c "SELECT count(*) FROM pg_locks WHERE relation = 'insta$1.photos'::regclass AND mode = 'AccessShareLock' AND granted AND pid <> pg_backend_pid()")" = 1 ] && return
    sleep 0.1
  done
  echo "blocker on shard $1 did not start" >&2; return 1
}
unblock() { q -d app -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(300)'" >/dev/null; }
runner_log=$dump/runner.log
blocker 10
psql -X -d app -c "CALL insta_id.migrate('0002_photos_flag', 'template', 'ALTER TABLE photos ADD COLUMN flag boolean', lock_timeout => '100ms', lock_retries => 1000)" >"$runner_log" 2>&1 &
runner=$!
for _ in $(seq 600); do grep -q 'schema insta10 busy, retry' "$runner_log" && break; sleep 0.1; done
check "runner: shard 10 is busy, the runner retries (NOTICE)" "$(grep -c 'schema insta10 busy, retry 1 of 1000' "$runner_log")" 1
# 20 s for a writer: 200 times what lock_timeout lets the runner make it wait.
check "runner: meanwhile shard 10's writers are not held up" \
  "$(q -d app -c "SET lock_timeout = '20s'" -c "INSERT INTO insta10.users (name) VALUES ('during') RETURNING insta_id.shard_id(id)")" 10
out=$(q -d app -c "CALL insta_id.migrate('0003_other', 'template', 'SELECT 1')" 2>&1 || true)
check "a second runner is refused while the first runs (55006)" \
  "$(echo "$out" | grep -c '^ERROR:  another insta_id.migrate is running')" 1
unblock
rc=0; wait $runner || rc=$?
check "runner: once the long transaction ends, it finishes every shard" \
  "$rc $(grep -o 'migration 0002_photos_flag: .* shards migrated.*' "$runner_log")" "0 migration 0002_photos_flag: 63 shards migrated, 0 had it already"
check "runner: no shard lacks it, none differs" \
  "$(q -d app -F ' ' -c "SELECT (SELECT count(*) FROM insta_id.pending_migrations), (SELECT count(*) FROM insta_id.shard_drift('template'))")" "0 0"
# Out of retries: it stops at the busy shard, naming it; called again, it goes on.
blocker 20
out=$(q -d app -c "CALL insta_id.migrate('0004_photos_note', 'template', 'ALTER TABLE photos ADD COLUMN note text', lock_timeout => '50ms', lock_retries => 2)" 2>&1 || true)
check "out of retries: stopped at shard 20 with 55P03's message" \
  "$(echo "$out" | grep -o '^ERROR:  migration .0004_photos_note. could not lock what it changes in schema insta20 within lock_timeout (50ms), 3 times')" \
  "ERROR:  migration '0004_photos_note' could not lock what it changes in schema insta20 within lock_timeout (50ms), 3 times"
check "out of retries: shards 20..64 are pending, the ones before have it" \
  "$(q -d app -F ' ' -c "SELECT count(*), min(shard_id), max(shard_id) FROM insta_id.pending_migrations WHERE migration = '0004_photos_note'")" "45 20 64"
# Killed (kill -9 of its backend: the server restarts) while it retries shard 20.
psql -X -d app -c "CALL insta_id.migrate('0004_photos_note', 'template', 'ALTER TABLE photos ADD COLUMN note text', lock_timeout => '100ms', lock_retries => 1000)" >"$runner_log" 2>&1 &
runner=$!
for _ in $(seq 600); do grep -q 'schema insta20 busy' "$runner_log" && break; sleep 0.1; done
kill -9 "$(q -d app -c "SELECT pid FROM pg_stat_activity WHERE query LIKE 'CALL insta_id.migrate(%'")"
wait $runner || true
for _ in $(seq 300); do q -d app -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.2; done
check "killed: after the restart shards 20..64 are still pending, shard 20 unchanged" \
  "$(q -d app -F ' ' -c "SELECT count(*), min(shard_id), (SELECT count(*) FROM pg_attribute WHERE attrelid = 'insta20.photos'::regclass AND attname = 'note') FROM insta_id.pending_migrations")" "45 20 0"
q -d app -c "SET client_min_messages = warning" -c "CALL insta_id.migrate('0004_photos_note', 'template', 'ALTER TABLE photos ADD COLUMN note text')"
check "called again: every shard has it, none differs" \
  "$(q -d app -F ' ' -c "SELECT (SELECT count(*) FROM insta_id.pending_migrations), (SELECT count(*) FROM insta_id.shard_drift('template'))")" "0 0"
# A migration while shards are being created from the template: every shard
# ends with it, made before the migration (the runner migrates it) or after
# (copied from the migrated template, with its record), none half-way.
psql -X -d app -c "CALL insta_id.create_shards_in_batches(100, 399, 'template', 5)" >"$runner_log" 2>&1 &
creator=$!
for _ in $(seq 600); do
  [ "$(q -d app -c "SELECT count(*) >= 40 FROM insta_id.shard_registry WHERE shard_id >= 100")" = t ] && break
  sleep 0.1
done
q -d app -c "SET client_min_messages = warning" -c "CALL insta_id.migrate('0005_photos_rating', 'template', 'ALTER TABLE photos ADD COLUMN rating int')"
rc=0; wait $creator || rc=$?
# (how it interleaved: a record made with the shard came with the copy, a later one from the runner)
echo "     $(q -d app -c "SELECT format('%s shards copied with the migration, %s migrated by the runner',
    count(*) FILTER (WHERE a.applied_at = r.created_at), count(*) FILTER (WHERE a.applied_at > r.created_at))
  FROM insta_id.shard_registry r JOIN insta_id.applied_migrations a ON a.schema_name = r.schema_name
  WHERE r.shard_id >= 100 AND a.migration = '0005_photos_rating'")"
check "concurrent: all 300 shards made, none lacks the migration, none differs" \
  "$rc $(q -d app -F ' ' -c "SELECT (SELECT count(*) FROM insta_id.shard_registry WHERE shard_id >= 100), (SELECT count(*) FROM insta_id.pending_migrations), (SELECT count(*) FROM insta_id.shard_drift('template'))")" "0 300 0 0"
stop_cluster shards-a
stop_cluster shards-b
# All 8192 shards on a stock server: max_connections and max_locks_per_transaction
# at PostgreSQL's defaults (the harness raises them for its other clusters).
start_cluster shards-stock --conf 'max_connections = 100' --conf 'max_locks_per_transaction = 64'
eval "$(cluster_env shards-stock)"
q -d postgres -c "CREATE DATABASE big"
q -d big -c "SET client_min_messages = error" -c "CREATE EXTENSION insta_id" -f "$repo/tests/fixtures/shard_template.sql" >/dev/null
out=$(q -d big -c "SELECT insta_id.create_shards(0, 8191, 'template')" 2>&1 || true)
check "stock server: create_shards(0, 8191) is refused up front with a hint" \
  "$(echo "$out" | grep -cE '^(ERROR:  creating 8192 shards in one transaction needs|HINT:  CALL insta_id.create_shards_in_batches\(0, 8191)')" 2
check "stock server: and made nothing" "$(q -d big -c "SELECT count(*) FROM insta_id.shards")" 0

# The procedure, cancelled once a thousand shards exist.
log=$dump/create.log
psql -X -d big -c "CALL insta_id.create_shards_in_batches(0, 8191, 'template')" >"$log" 2>&1 &
bg=$!
for _ in $(seq 600); do
  [ "$(q -d big -c "SELECT count(*) >= 1000 FROM insta_id.shard_registry")" = t ] && break
  sleep 0.5
done
q -d big -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
             WHERE query LIKE 'CALL insta_id.create_shards_in_batches%' AND pid <> pg_backend_pid()" >/dev/null
rc=0; wait $bg || rc=$?
check "cancelled: the CALL ended with the cancel" "$rc $(grep -c 'canceling statement due to user request' "$log")" "1 1"
made=$(q -d big -c "SELECT count(*) FROM insta_id.shards")
echo "     cancelled after $made shards"
check_true "cancelled: at least 1000 shards were committed, and not all" "SELECT $made >= 1000 AND $made < 8192"
check "cancelled: every registered shard is complete (3 tables)" \
  "$(q -d big -c "SELECT count(*) FROM insta_id.shards WHERE tables <> 3")" 0
check "cancelled: no shard schema is left unregistered" \
  "$(q -d big -c "SELECT count(*) FROM pg_namespace n WHERE n.nspname ~ '^insta[0-9]+\$'
                  AND NOT EXISTS (SELECT FROM insta_id.shard_registry r WHERE r.schema_name = n.nspname)")" 0
started=$(date +%s.%N)
psql -X -d big -c "CALL insta_id.create_shards_in_batches(0, 8191, 'template')" >"$log" 2>&1
echo "     resumed: $(tail -n 2 "$log" | head -n 1) ($(echo "$(date +%s.%N) - $started" | bc | cut -c1-5) s)"
check "resumed: it made the rest and skipped the shards that existed" \
  "$(grep -o 'shards 0..8191: .*' "$log")" "shards 0..8191: $((8192 - made)) created, $made existed already"
check "resumed: it reported progress on the way" "$(grep -c 'done of 0..8191' "$log" | sed 's/^[1-9][0-9]*$/yes/')" yes
check "8192 shards, each with its 3 tables" \
  "$(q -d big -c "SELECT count(*), min(shard_id), max(shard_id) FROM insta_id.shards WHERE tables = 3" -F ' ')" "8192 0 8191"
check "shards 0 and 8191 mint their own IDs" \
  "$(q -d big -c "INSERT INTO insta0.users (name) VALUES ('a') RETURNING insta_id.shard_id(id)")$(
     q -d big -c "INSERT INTO insta8191.users (name) VALUES ('b') RETURNING insta_id.shard_id(id)")" 08191

# From the client side: psycopg (pinned in examples/requirements.txt).
python=$repo/target/clients-venv/bin/python
check "psycopg: CALL in autocommit mode; inside a transaction 2D000" "$(PGDATABASE=big "$python" - <<'PY'
import psycopg
with psycopg.connect(autocommit=True) as conn:
    conn.execute("CALL insta_id.create_shards_in_batches(8190, 8191, 'template')")
    print("autocommit ok")
with psycopg.connect() as conn:  # psycopg's default: statements run in a transaction
    try:
        conn.execute("CALL insta_id.create_shards_in_batches(8190, 8191, 'template')")
    except psycopg.errors.InvalidTransactionTermination as e:
        print(e.sqlstate)
PY
)" "autocommit ok
2D000"

# shard_drift at 8192 shards on the stock server. Tables, columns, indexes
# and constraints are read without locks: one call covers every shard. A
# view is deparsed under locks held to the end of the transaction: with a
# view in every shard one call needs more than the lock table, and is
# refused (54000) with ranges that fit, which then work.
started=$(date +%s.%N)
check "stock server: shard_drift over all 8192 shards of a 3-table template, one call: no drift" \
  "$(q -d big -c "SELECT count(*) FROM insta_id.shard_drift('template')")" 0
echo "     shard_drift, 8192 shards: $(echo "$(date +%s.%N) - $started" | bc | cut -c1-5) s"
q -d big -c "CALL insta_id.migrate('view', 'template', 'CREATE VIEW named AS SELECT id, name FROM users')" >/dev/null 2>&1
check "stock server: a view in every shard (migrate)" \
  "$(q -d big -c "SELECT count(*) FROM pg_views WHERE viewname = 'named' AND schemaname ~ '^insta[0-9]+\$'")" 8192
out=$(psql -X -d big -v VERBOSITY=verbose -c "SELECT count(*) FROM insta_id.shard_drift('template')" 2>&1 || true)
check "stock server: shard_drift of 8192 shards with views is refused (54000)" \
  "$(echo "$out" | grep -c '^ERROR:  54000: comparing shards 0 to 8191 with template template needs more locks')" 1
fit=$(echo "$out" | sed -nE "s/^HINT:  Compare ranges of about ([0-9]+) shards.*shard_drift\('template', 0, ([0-9]+)\).*/\1 \2/p")
echo "     hint: ranges of ${fit% *} shards"
check "stock server: the hint's range ends where its size says" "$([ -n "$fit" ] && echo $(( ${fit% *} - 1 )))" "${fit#* }"
size=${fit% *}; total=0
for ((first = 0; first <= 8191; first += ${size:-8192})); do
  n=$(q -d big -c "SELECT count(*) FROM insta_id.shard_drift('template', $first, $((first + size - 1 > 8191 ? 8191 : first + size - 1)))") || n=failed
  total=$([ "$n" = failed ] && echo failed || echo $((total + n)))
done
check "stock server: in the hint's ranges, each its own transaction, every shard is compared: no drift" "$total" 0
stop_cluster shards-stock

finish
