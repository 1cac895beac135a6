#!/usr/bin/env bash
# Moves one logical shard to another server while it takes writes, with
# PostgreSQL's logical replication (15+). A first version for issue #14:
# what it does not do yet is listed at the end of this header.
#   scripts/move_shard.sh SHARD 'FROM conninfo' 'TO conninfo'
# A script rather than SQL functions over dblink: CREATE SUBSCRIPTION cannot
# run inside a transaction block (so not in a function), the cutover needs one
# session holding locks on the old server while another waits on the new one,
# and an operator runs it from where both servers are reachable.
# Steps (each printed with its duration; MOVE_COPY_SECONDS bounds the copy, default 3600):
#  1. checks: wal_level = logical on FROM; the shard registered there; its
#     schema absent on TO; every table has a primary key or replica identity
#  2. DDL: pg_dump -s -n <schema> FROM | psql TO
#  3. publication on FROM for the schema; subscription on TO (slot + copy)
#  4. wait until every table is copied and streaming ("r")
#  5. cutover, in one transaction on FROM: LOCK every table of the shard IN
#     EXCLUSIVE MODE (writers wait; reads go on), note the WAL position, wait
#     on TO until the subscription has applied it, set TO's sequences past
#     FROM's, adopt the shard on TO, then drop the old tables in the same
#     transaction, so writers that were waiting fail (and retry on TO through
#     the router) instead of committing on the old copy; the shard's migration
#     history is copied
#  6. drop subscription (and with it the slot), publication, registry row
# Not done yet: re-run after an interruption at each step, the router's map
# switch, carrying each sequence's last millisecond for a clock behind.
set -euo pipefail
shard=$1 from=$2 to=$3
step_started=0
step() { local now; now=$(date +%s.%N); [ "$step_started" = 0 ] || printf '   (%.2f s)\n' "$(echo "$now - $step_started" | bc)"; step_started=$now; echo "== $*"; }
qf() { psql -X -v ON_ERROR_STOP=1 -qtA "$from" "$@"; }
qt() { psql -X -v ON_ERROR_STOP=1 -qtA "$to" "$@"; }
die() { echo "move_shard: $*" >&2; exit 1; }

step "checks"
[ "$(qf -c "SHOW wal_level")" = logical ] || die "wal_level on the old server is not logical"
schema=$(qf -c "SELECT schema_name FROM insta_id.shard_registry WHERE shard_id = $shard")
[ -n "$schema" ] || die "shard $shard is not registered on the old server"
[ "$(qt -c "SELECT count(*) FROM pg_namespace WHERE nspname = '$schema'")" = 0 ] || die "schema $schema exists on the new server"
nokey=$(qf -c "SELECT string_agg(c.oid::regclass::text, ', ') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = '$schema' AND c.relkind = 'r' AND c.relreplident IN ('d', 'n')
                 AND (c.relreplident = 'n' OR NOT EXISTS (SELECT FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary))")
[ -z "$nokey" ] || die "tables without a primary key or replica identity: $nokey"
name="insta_move_$shard"

step "DDL of $schema onto the new server"
pg_dump -s -n "$schema" "$from" | qt >/dev/null

step "publication and subscription (initial copy)"
qf -c "CREATE PUBLICATION $name FOR TABLES IN SCHEMA \"$schema\""
qt -c "CREATE SUBSCRIPTION $name CONNECTION '$from' PUBLICATION $name"

step "waiting for the copy"
# wait_for SECONDS WHAT COMMAND...: until COMMAND prints t, at most SECONDS.
wait_for() {
  local until=$((SECONDS + $1)) what=$2; shift 2
  until [ "$("$@")" = t ]; do
    [ $SECONDS -lt $until ] || die "gave up waiting for $what"
    sleep 0.05
  done
}
wait_for "${MOVE_COPY_SECONDS:-3600}" "the initial copy" qt -c "SELECT count(*) FILTER (WHERE srsubstate <> 'r') = 0 FROM pg_subscription_rel r
                                         JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = '$name'"

step "cutover"
tables=$(qf -c "SELECT string_agg(c.oid::regclass::text, ', ') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '$schema' AND c.relkind IN ('r', 'p')")
seqs=$(qf -c "SELECT format('%I.%I', schemaname, sequencename) FROM pg_sequences WHERE schemaname = '$schema'")
coproc CUT { psql -X -qtA -v ON_ERROR_STOP=1 "$from" 2>&1; }
echo "BEGIN; LOCK TABLE $tables IN EXCLUSIVE MODE; SELECT pg_current_wal_insert_lsn();" >&"${CUT[1]}"
read -r lsn <&"${CUT[0]}"
[[ "$lsn" =~ ^[0-9A-F]+/[0-9A-F]+$ ]] || die "cutover on the old server: $lsn"
wait_for 60 "the subscription to apply $lsn" qf -c "SELECT confirmed_flush_lsn >= '$lsn' FROM pg_replication_slots WHERE slot_name = '$name'"
# Sequences: logical replication does not carry them; read them under the lock.
while read -r seq; do
  [ -n "$seq" ] || continue
  last=$(qf -c "SELECT last_value FROM $seq")
  qt -c "SELECT setval('$seq', $last + 1)" >/dev/null
  echo "   sequence $seq continues after $last"
done <<<"$seqs"
qt -c "SELECT insta_id.adopt_shard('$schema', $shard)" >/dev/null
# Its migration history comes along.
qf -c "\\copy (SELECT * FROM insta_id.applied_migrations WHERE schema_name = '$schema') TO STDOUT" |
  qt -c "\\copy insta_id.applied_migrations FROM STDIN"
echo "DROP TABLE $tables CASCADE; COMMIT; SELECT 'done';" >&"${CUT[1]}"
read -r done_ <&"${CUT[0]}"
[ "$done_" = done ] || die "cutover on the old server: $done_"
exec {CUT[1]}>&-

step "cleanup"
qt -c "DROP SUBSCRIPTION $name"   # drops its slot on the old server too
qf -c "DROP PUBLICATION $name" >/dev/null
qf -c "SET client_min_messages = warning" -c "SELECT insta_id.drop_shard($shard, force => true)" >/dev/null
step "moved shard $shard ($schema)"
