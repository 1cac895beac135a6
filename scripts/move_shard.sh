#!/usr/bin/env bash
# Moves one logical shard to another server while it takes writes, with
# PostgreSQL's logical replication (15+; both servers need insta_id 0.9.0+).
#
#   scripts/move_shard.sh [--router CONNINFO --router-target CONNINFO] [--subscription CONNINFO]
#                         SHARD 'FROM conninfo' 'TO conninfo'
#   scripts/move_shard.sh --undo SHARD 'FROM conninfo' 'TO conninfo'
#
# Connection strings carry no password (refused): libpq reads it from
# ~/.pgpass (PGPASSFILE) or a service file (service=NAME, PGSERVICEFILE),
# so it is never on a command line (ps) nor in a file the move writes.
# --subscription: how the new server reaches the old one (the
# subscription's connection, made by the new server's processes; default:
# FROM): its password belongs in the new server's password file (the
# server's OS user's ~/.pgpass, or passfile= in this string), never in it:
# pg_subscription stores the string and log_statement may log it.
# --router-target: the connection string the router's map gets for the new
# server, the application's (its role, not the operator's).
#
# Run it again after an interruption at any step (a kill, a lost connection, a
# failed wait): it finishes the move, or, if the old server still holds the
# shard, rolls the partial copy back and moves it afresh. --undo only rolls a
# move back while the old server still holds the shard. --router names the
# fleet's router database (scripts/demo/fleet_router.sql): its map is re-pointed
# to --router-target.
#
# The session that holds the shard's locks at the cutover has TCP keepalives
# (idle 10 s, then 3 probes 5 s apart): if the operator's connection is lost,
# the old server ends it, and releases the locks, within about 25 s; on a
# Unix socket at once. Its own waits are not cut short (no statement or idle
# timeout).
#
# A script rather than SQL functions over dblink: CREATE SUBSCRIPTION with a
# slot cannot run in a transaction block (so not in a function), the cutover
# needs one session holding locks on the old server while another acts on the
# new one, and an operator runs it from where both servers are reachable.
#
# Each server records its side of the move in insta_id.moves (the step and
# when, in the transaction that makes it; insta-id status shows them): the
# old server's row reaches 'cutover' in the transaction that drops the
# shard there, which is how a re-run knows the move is past its point of no
# return. Each row is deleted once nothing of the move is left there.
#
# Steps (each printed with its duration):
#  1. checks: insta_id 0.9.0+ on both; the shard registered on FROM only; a
#     session on FROM takes insta_id.lock_shard_for_move and keeps it for the
#     whole move (insta_id.migrate skips the shard: DDL is not replicated; a
#     second mover is refused; what an interrupted move left is undone only
#     under it); wal_level = logical on FROM; the schema absent on TO; every
#     table with a primary key or replica identity; no fence left in it.
#  2. on FROM: publication insta_move_<shard> FOR TABLES IN SCHEMA <schema>
#  3. on TO, in one transaction: the schema (pg_dump -s -n), the fence
#     (insta_id.move_fence: a trigger on each table refusing clients' writes,
#     55006, while the shard is not adopted),
#     and a subscription insta_move_<shard>, disabled, without a slot. So a
#     schema on TO is ours exactly when that subscription exists: what a
#     re-run undoes.
#     Then on FROM the slot insta_move_<shard>; on TO enable: the copy.
#  4. wait until every table is copied and streaming (MOVE_COPY_SECONDS, 3600)
#  5. cutover, in the session on FROM: insta_id.move_lock locks the shard's tables IN ACCESS
#     EXCLUSIVE MODE (MOVE_LOCK_TIMEOUT, 5s, then writers go on and it tries
#     again: MOVE_LOCK_ATTEMPTS, 5) and its sequences (writers, readers and
#     next_id wait); wait until TO
#     has applied everything; on TO set the sequences past FROM's, raise the
#     high-water mark to FROM's (IDs stay unique if TO's clock is behind), copy
#     the migration history; then on FROM drop the shard in the same
#     transaction and COMMIT: the point of no return. Writers that waited fail
#     and retry (through the router: on TO).
#  6. on TO adopt the shard at once (which opens the fence); then, under a
#     lock on TO that finishers queue on (MOVE_FINISH_WAIT, 120 s), re-point
#     the router's map
#  7. drop the subscription, the slots, the publication and the fence
# MOVE_STOP_AFTER=<step> kills the script after that step (slot, copy,
# blocked, sequences, cutover, adopted, map, unsubscribed: the replication
# dropped, not the fence): how tests/tap/t/008_move.pl interrupts it.
set -euo pipefail
router="" router_target="" subscription="" undo=0
while [ $# -gt 3 ]; do
  case "$1" in
    --router) router=$2; shift 2 ;;
    --router-target) router_target=$2; shift 2 ;;
    --subscription) subscription=$2; shift 2 ;;
    --undo) undo=1; shift ;;
    *) break ;;
  esac
done
usage() { echo "move_shard: $*" >&2; sed -n '5,7p' "$0" | sed 's/^# *//' >&2; exit 2; }
[ $# = 3 ] || usage "three arguments: the shard, the old server's and the new server's connection strings"
shard=$1 from=$2 to=$3
# 7 and 007 are one shard: the number, in decimal.
[[ "$shard" =~ ^[0-9]{1,9}$ ]] || usage "the shard must be a number from 0 to 8191, not '$shard'"
shard=$((10#$shard))
[ "$shard" -le 8191 ] || usage "the shard must be a number from 0 to 8191, not $shard"
[ -z "$router" ] || [ -n "$router_target" ] ||
  usage "--router needs --router-target: the new server's connection string for the application, not this script's"
subscription=${subscription:-$from}
# A password in a connection string would be on psql's and pg_dump's command
# lines, or stored in pg_subscription: refused, whichever spelling.
for conninfo in "$from" "$to" "$router" "$router_target" "$subscription"; do
  if [[ "$conninfo" =~ (^|[[:space:]])password[[:space:]]*= ]] || [[ "$conninfo" =~ ^postgres(ql)?://[^/@]*:[^/@]*@ ]] ||
     [[ "$conninfo" =~ [?\&]password= ]]; then
    usage "a connection string holds a password: put it in ~/.pgpass (PGPASSFILE) or a service file instead (docs/shards.md, \"Moving a logical shard online\")"
  fi
done
name="insta_move_$shard"
attempts=${MOVE_LOCK_ATTEMPTS:-5}
[[ "$attempts" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "move_shard: MOVE_LOCK_ATTEMPTS must be a number from 1 to 999" >&2; exit 2; }
step_started=0
step() {
  local now; now=$(date +%s.%N)
  [ "$step_started" = 0 ] || printf '   (%.2f s)\n' "$(echo "$now - $step_started" | bc)"
  step_started=$now; echo "== $*"
}
# The script's own sessions on both servers (and pg_dump's) resolve
# nothing through a schema a database owner controls, whatever the
# database's or role's settings: options the client gives override them.
# (Not the router's: its repoint_shard is called by name.)
shard_opts="-c search_path=pg_catalog,pg_temp -c standard_conforming_strings=on"
qf() { PGOPTIONS="${PGOPTIONS:-} $shard_opts" psql -X -v ON_ERROR_STOP=1 -qtA "$from" "$@"; }
qt() { PGOPTIONS="${PGOPTIONS:-} $shard_opts" psql -X -v ON_ERROR_STOP=1 -qtA "$to" "$@"; }
qr() { psql -X -v ON_ERROR_STOP=1 -qtA "$router" "$@"; }
die() { echo "move_shard: $*" >&2; exit 1; }
lit() { printf "'%s'" "${1//\'/\'\'}"; }   # an SQL string literal
# Standard input without control characters: names a shard's owner chose
# reach the operator's terminal and log only as text.
printable() { tr -d '[:cntrl:]'; }
stop_after() {
  if [ "${MOVE_STOP_AFTER:-}" = "$1" ]; then echo "   (killed after step '$1': MOVE_STOP_AFTER)"; kill -KILL $$; fi
}
# wait_for SECONDS WHAT COMMAND...: until COMMAND prints t, at most SECONDS.
wait_for() {
  local until=$((SECONDS + $1)) what=$2; shift 2
  until [ "$("$@")" = t ]; do
    [ $SECONDS -lt $until ] || die "gave up waiting for $what"
    sleep 0.05
  done
}

# A session kept for the whole move: on FROM, the one that holds the move
# lock and, later, the cutover; when finishing, one on TO.
hold_open() {  # hold_open CONNINFO WHERE
  hold_where=$2
  coproc HOLD { PGOPTIONS="${PGOPTIONS:-} $shard_opts" psql -X -qtA -v ON_ERROR_STOP=1 "$1" 2>&1; }
  hold_pid=$!
  # Copies of its pipes: bash closes a coprocess's own as soon as it has
  # reaped it, and an error's last lines would go unread.
  [ -n "${HOLD[0]:-}" ] && exec {hold_r}<&"${HOLD[0]}" {hold_w}>&"${HOLD[1]}" || die "psql to $hold_where ended at once"
  # No timeout cuts the move's own waits short; keepalives end the session
  # (and its locks) if this end is gone.
  hold "SET client_min_messages = warning; SET statement_timeout = 0;
        SET idle_in_transaction_session_timeout = 0; SET idle_session_timeout = 0;
        SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3;"
}
hold_close() {  # psql ends at the end of its input: every copy of that pipe closed
  exec {hold_w}>&- {hold_r}<&-
  [ -z "${HOLD[1]:-}" ] || exec {HOLD[1]}>&-
  wait "$hold_pid" 2>/dev/null || true
}
# The end of each reply in that session: drawn at random, so that no name
# a shard's owner chose can end a reply early and shift what follows.
hold_end="__insta_move_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')__"
# hold SQL: runs SQL in that session; what it printed is left in HELD (set
# in this shell: no $(hold ...), no pipes). If
# the session ends (an error: ON_ERROR_STOP), its transaction is rolled
# back: die, with what it printed.
hold() {
  local line
  HELD=""
  # A session gone: no SIGPIPE, read what it said.
  trap '' PIPE; printf '%s\n\\echo %s\n' "$1" "$hold_end" >&"$hold_w" 2>/dev/null || true; trap - PIPE
  while IFS= read -r line <&"$hold_r"; do
    if [ "$line" = "$hold_end" ]; then return 0; fi
    case $line in WARNING:*) echo "   $line"; continue ;; esac   # as it comes
    HELD+="$line"$'\n'
  done
  die "on $hold_where: ${HELD:-the session ended}"
}

# Where the move stands: the registries, and our subscription on TO.
registered() { "$1" -c "SELECT schema_name FROM insta_id.shard_registry WHERE shard_id = $shard"; }
this_db="(SELECT oid FROM pg_database WHERE datname = current_database())"   # catalogs below are cluster-wide
read_state() {
  on_from=$(registered qf)
  on_to=$(registered qt)
  sub_schema=$(qt -c "SELECT coalesce((SELECT min(n.nspname) FROM pg_subscription_rel r JOIN pg_class c ON c.oid = r.srrelid
                                JOIN pg_namespace n ON n.oid = c.relnamespace WHERE r.srsubid = s.oid), '')
                             || '|' || s.oid FROM pg_subscription s
                           WHERE s.subname = '$name' AND s.subdbid = $this_db")
  has_sub=$([ -n "$sub_schema" ] && echo 1 || echo 0)
  subid=${sub_schema##*|} sub_schema=${sub_schema%|*}
}
to_sysid=$(qt -c "SELECT system_identifier FROM pg_control_system()")
# Each server as the other's insta_id.moves row names it: host (or socket
# directory):port/database, as the server itself sees them.
label_sql="SELECT format('%s:%s/%s', coalesce(host(inet_server_addr()), split_part(current_setting('unix_socket_directories'), ',', 1)),
                         current_setting('port'), current_database())"
from_label=$(qf -c "$label_sql") to_label=$(qt -c "$label_sql")
# record_call SIDE STEP SCHEMA: the call that records a step on that side's
# server; record_sql: the statement.
record_call() {
  local peer=$to_label
  [ "$1" = leaving ] || peer=$from_label
  printf "insta_id.move_step(%s, '%s', '%s', %s, %s)" "$shard" "$1" "$2" "$(lit "$3")" "$(lit "$peer")"
}
record_sql() { echo "SELECT $(record_call "$@");"; }
read_state

# Drops what the move made for replication, each part only if it is there.
# On TO in one transaction: the subscription, detached from its slot, and
# when undoing (drop_replication undo) the schema and its history with it,
# so that a schema of ours is on TO exactly while the subscription is. Then
# on FROM the slots (the subscription's and its table copies') and the
# publication.
drop_replication() {
  local slots="slot_name = '$name'" undo_sql=() mine="database = current_database()"
  if [ "${1:-}" = undo ]; then
    undo_sql=(-c "DROP SCHEMA IF EXISTS \"${schema//\"/\"\"}\" CASCADE"
              -c "DELETE FROM insta_id.applied_migrations WHERE schema_name = $(lit "$schema")"
              -c "SELECT insta_id.move_done($shard, 'arriving')")
  fi
  if [ "$has_sub" = 1 ]; then
    qt -1 -c "SET client_min_messages = warning" -c "ALTER SUBSCRIPTION $name DISABLE" \
      -c "ALTER SUBSCRIPTION $name SET (slot_name = NONE)" -c "DROP SUBSCRIPTION $name" "${undo_sql[@]}"
    # Table-copy slots are pg_<subscription oid>_sync_<relid>_<system
    # identifier of the new server>: only this move's.
    slots+=" OR slot_name LIKE 'pg\\_${subid}\\_sync\\_%\\_$to_sysid'"
  fi
  wait_for 30 "the slots of the move to be released" qf -c "SELECT count(*) = 0 FROM pg_replication_slots WHERE ($slots) AND $mine AND active"
  qf -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE ($slots) AND $mine" >/dev/null
  qf -1 -c "SET client_min_messages = warning" -c "DROP PUBLICATION IF EXISTS $name" -c "SELECT insta_id.move_done($shard, 'leaving')" >/dev/null
}

# Finishers of one move (two re-runs, or a re-run beside the mover) queue
# on an advisory lock on TO, the key of lock_shard_for_move (so migrate
# skips the shard meanwhile), held by a session kept to the end; each reads
# the state again once it has it. Waits MOVE_FINISH_WAIT seconds (120) at most.
lock_finish() {
  local until=$((SECONDS + ${MOVE_FINISH_WAIT:-120})) said=0
  hold_open "$to" "the new server"
  while hold "SELECT pg_try_advisory_lock(insta_id._move_lock_key(), $shard);" && [ "${HELD%$'\n'}" != t ]; do
    if [ $said = 0 ]; then
      echo "   waiting for process $(qt -c "SELECT insta_id._lock_holder(insta_id._move_lock_key(), $shard)") on the new server (finishing this move, or moving the shard on)"
      said=1
    fi
    [ $SECONDS -lt $until ] || die "gave up waiting for the lock of shard $shard on the new server"
    sleep 0.2
  done
  read_state
}

# After the cutover committed, under lock_finish: the shard is TO's; finish
# what is left.
finish_move() {
  local schema=$1
  if [ -z "$on_to" ]; then
    step "adopt $schema on the new server"
    hold "BEGIN; SELECT insta_id.adopt_shard($(lit "$schema"), $shard); $(record_sql arriving adopted "$schema") COMMIT;"   # opens the fence
  fi
  stop_after adopted
  if [ -n "$router" ]; then
    step "re-point the router's map"
    version=$(qr -c "SELECT repoint_shard($shard, $(lit "$router_target"))")
    qt -c "$(record_sql arriving map "$schema")" >/dev/null
    echo "   map version $version"
    stop_after map
  fi
  step "cleanup: subscription, slots, publication, fence"
  qt -c "$(record_sql arriving cleanup "$schema")" >/dev/null
  drop_replication
  stop_after unsubscribed
  # Dropping a trigger locks its table (ACCESS EXCLUSIVE), which now takes
  # writes: one table at a time, each wait short. The fence is open already;
  # a re-run drops what this leaves.
  # Tables by OID: a name may hold a newline.
  local rel attempt
  while IFS= read -r rel; do
    for attempt in $(seq 20); do
      qt -f - <<<"SET lock_timeout = '500ms';
SELECT format('DROP TRIGGER IF EXISTS insta_id_move_fence ON %s', oid::regclass) FROM pg_class WHERE oid = $rel \gexec" >/dev/null && break
      [ "$attempt" -lt 20 ] || die "the fence's trigger on $(qt -c "SELECT $rel::regclass") is still there (open; a re-run drops it)"
      sleep 0.5
    done
  done < <(qt -c "SELECT c.oid FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.tgname = 'insta_id_move_fence' AND n.nspname = $(lit "$schema")")
  # (0.9.0's first script made the fence's function in the schema.)
  qt -1 -c "DROP FUNCTION IF EXISTS \"${schema//\"/\"\"}\".insta_id_move_fence()" -c "SELECT insta_id.move_done($shard, 'arriving')" >/dev/null
  step "moved shard $shard ($schema)"
}

for side in qf qt; do
  [ "$($side -c "SELECT to_regclass('insta_id.moves') IS NOT NULL")" = t ] ||
    die "insta_id 0.9.0 or later is needed on both servers (ALTER EXTENSION insta_id UPDATE)"
done
if [ -n "$on_from" ] && [ -n "$on_to" ]; then
  die "shard $shard is registered on both servers: not a state this script leaves; compare them and drop one by hand"
fi
if [ -z "$on_from" ]; then
  [ "$undo" = 0 ] || die "shard $shard is not on the old server: nothing to undo (a move past its cutover is only finished)"
  lock_finish
  [ -z "$on_from" ] || die "shard $shard came back to the old server while this waited: run again"
  if [ -n "$on_to" ] || [ "$has_sub" = 1 ]; then
    # Adopted on TO (only ever after the cutover), or the old server's
    # record of the cutover, committed with the drop: anything else is not
    # a move this script can finish.
    # (A move begun by 0.9.0's first script put a comment on the publication.)
    [ -n "$on_to" ] || [ "$(qf -c "SELECT step FROM insta_id.moves WHERE shard_id = $shard AND side = 'leaving'")" = cutover ] ||
      [ "$(qf -c "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = '$name'")" = "insta_id: cutover committed" ] ||
      die "shard $shard is on neither server's registry and its cutover did not commit: compare the servers by hand"
    step "shard $shard left the old server: finishing the move"
    finish_move "${on_to:-$sub_schema}"
    exit 0
  fi
  die "shard $shard is not registered on the old server"
fi
schema=$on_from
# The move's lock first: a mover still running elsewhere is never undone.
hold_open "$from" "the old server"
hold "SET lock_timeout = '${MOVE_LOCK_TIMEOUT:-5s}'; SELECT insta_id.lock_shard_for_move($shard);"
# A move whose cutover committed is never undone, even if the shard is
# registered on the old server again: the new server's copy is the shard.
if [ "$(qf -c "SELECT step FROM insta_id.moves WHERE shard_id = $shard AND side = 'leaving'")" = cutover ] ||
   [[ "$(qt -c "SELECT step FROM insta_id.moves WHERE shard_id = $shard AND side = 'arriving'")" =~ ^(adopted|map|cleanup)$ ]]; then
  die "shard $shard is registered on the old server, but its move to the new one committed its cutover there: the new server's copy is the shard; compare them by hand"
fi
if [ "$has_sub" = 1 ] || [ -n "$(qf -c "SELECT 1 FROM pg_publication WHERE pubname = '$name' UNION SELECT 1 FROM pg_replication_slots WHERE slot_name = '$name' AND database = current_database()
                                        UNION SELECT 1 FROM insta_id.moves WHERE shard_id = $shard AND side = 'leaving'")" ]; then
  step "undo an interrupted move: the old server still holds shard $shard"
  drop_replication undo
fi
if [ "$undo" = 1 ]; then step "shard $shard is on the old server only"; exit 0; fi

step "checks"
[ "$(qf -c "SHOW wal_level")" = logical ] || die "wal_level on the old server is not logical"
[ "$(qt -c "SELECT count(*) FROM pg_namespace WHERE nspname = $(lit "$schema")")" = 0 ] || die "schema $schema exists on the new server"
nokey=$(qf -c "SELECT string_agg(c.oid::regclass::text, ', ') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = $(lit "$schema") AND c.relkind = 'r' AND c.relreplident IN ('d', 'n')
                 AND (c.relreplident = 'n' OR NOT EXISTS (SELECT FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary))")
[ -z "$nokey" ] || die "tables without a primary key or replica identity: $nokey"
# A publication carries permanent tables only: unlogged tables would lose
# their rows, materialized views would arrive empty.
other=$(qf -c "SELECT string_agg(c.oid::regclass::text, ', ') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = $(lit "$schema") AND (c.relkind = 'm' OR (c.relkind IN ('r', 'p') AND c.relpersistence <> 'p'))")
[ -z "$other" ] || die "unlogged tables or materialized views, which logical replication does not carry: $other"
[ "$(qf -c "SELECT (SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                       WHERE t.tgname = 'insta_id_move_fence' AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $(lit "$schema")))
                    + (SELECT count(*) FROM pg_proc WHERE proname = 'insta_id_move_fence'
                       AND pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $(lit "$schema")))")" = 0 ] ||
  die "$schema still has the fence of the move that brought it here (insta_id_move_fence): run that move again to finish its cleanup"
# PostgreSQL 15 applies replicated rows as the subscription's owner (the
# superuser running this); 16 and later as each table's owner. So onto 15,
# no code a non-superuser owns may run in the apply: none in the schema,
# none its tables' constraints, indexes, triggers or defaults call.
if [ "$(qt -c "SHOW server_version_num")" -lt 160000 ]; then
  owners=$(qf -c "WITH nsp AS (SELECT oid FROM pg_namespace WHERE nspname = $(lit "$schema")),
                       rels AS (SELECT c.oid FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp)),
                       owner AS (SELECT c.relowner AS o FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM nsp)
                                 UNION SELECT p.proowner FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM nsp)
                                 UNION SELECT t.typowner FROM pg_type t WHERE t.typnamespace = (SELECT oid FROM nsp)
                                 UNION SELECT o.oprowner FROM pg_operator o WHERE o.oprnamespace = (SELECT oid FROM nsp)
                                 UNION SELECT p.proowner FROM pg_depend d JOIN pg_proc p ON p.oid = d.refobjid
                                 WHERE d.refclassid = 'pg_proc'::regclass
                                   AND (d.classid = 'pg_class'::regclass AND d.objid IN (SELECT oid FROM rels)
                                        OR d.classid = 'pg_constraint'::regclass AND d.objid IN (SELECT oid FROM pg_constraint WHERE conrelid IN (SELECT oid FROM rels))
                                        OR d.classid = 'pg_trigger'::regclass AND d.objid IN (SELECT oid FROM pg_trigger WHERE tgrelid IN (SELECT oid FROM rels))
                                        OR d.classid = 'pg_attrdef'::regclass AND d.objid IN (SELECT oid FROM pg_attrdef WHERE adrelid IN (SELECT oid FROM rels))))
                  SELECT string_agg(DISTINCT quote_ident(r.rolname), ', ') FROM owner JOIN pg_roles r ON r.oid = owner.o WHERE NOT r.rolsuper")
  [ -z "$owners" ] ||
    die "the new server runs PostgreSQL 15, which applies replicated rows as the subscription's owner, a superuser: code of $schema owned by $owners would run with its rights there. Move it onto PostgreSQL 16 or later (rows applied as each table's owner), or give those objects to a superuser first"
fi
[ "$(qf -c "SELECT extract(epoch FROM insta_id.epoch())")" = "$(qt -c "SELECT extract(epoch FROM insta_id.epoch())")" ] ||
  die "the servers' insta_id.epoch differ: IDs of the new server could repeat the old one's"

step "publication on the old server"
qf -1 -c "CREATE PUBLICATION $name FOR TABLES IN SCHEMA \"${schema//\"/\"\"}\"" -c "$(record_sql leaving published "$schema")" >/dev/null

step "schema and subscription on the new server (one transaction)"
# (in memory, not in a file a killed move would leave)
ddl=$(PGOPTIONS="${PGOPTIONS:-} $shard_opts" pg_dump -s -n "\"${schema//\"/\"\"}\"" "$from")   # quoted: a name, not a pattern
# The copy refuses writes until the shard is adopted here (insta_id's
# fence, src/sql/moves.sql): a client that reaches the new server early
# would mint IDs for the shard beside the old server.
ddl+=$'\n'"SELECT insta_id.move_fence($(lit "$schema"), $shard);"
ddl+=$'\n'"CREATE SUBSCRIPTION $name CONNECTION $(lit "$subscription") PUBLICATION $name
      WITH (enabled = false, create_slot = false, slot_name = '$name');"
ddl+=$'\n'"$(record_sql arriving subscribed "$schema")"
qt -1 -f - <<<"$ddl" >/dev/null
subid=$(qt -c "SELECT oid FROM pg_subscription WHERE subname = '$name' AND subdbid = $this_db")

step "slot on the old server; copy"
qf -c "SELECT pg_create_logical_replication_slot('$name', 'pgoutput')" -c "$(record_sql leaving slot "$schema")" >/dev/null
qt -1 -c "ALTER SUBSCRIPTION $name ENABLE" -c "$(record_sql arriving copying "$schema")" >/dev/null
stop_after slot

step "waiting for the copy"
wait_for "${MOVE_COPY_SECONDS:-3600}" "the initial copy" qt -c "SELECT count(*) FILTER (WHERE srsubstate <> 'r') = 0 FROM pg_subscription_rel r
                                         WHERE r.srsubid = $subid"
qt -c "$(record_sql arriving copied "$schema")" >/dev/null
stop_after copy

step "cutover"
# insta_id.move_lock: the shard's tables in ACCESS EXCLUSIVE mode (the mode
# the drop needs), each try waiting MOVE_LOCK_TIMEOUT at most behind a long
# reader before it lets the writers go on and tries again, up to
# MOVE_LOCK_ATTEMPTS times; then its sequences. It returns the WAL position
# after which nothing of the shard commits here.
hold "BEGIN; SELECT insta_id.move_lock($shard, $attempts);"
lsn=${HELD%$'\n'}
[[ "$lsn" =~ ^[0-9A-F]{1,8}/[0-9A-F]{1,8}$ ]] || die "the old server's WAL position is not one: '$lsn'"
# Everything committed before the lock is before $lsn. A transaction that
# commits with synchronous_commit on flushes the WAL past it at once, so the
# walsender need not wait for the WAL writer to send it.
qf -c "SET synchronous_commit = on" -c "SELECT pg_current_xact_id()" >/dev/null
wait_for 60 "the subscription to apply $lsn" qf -c "SELECT confirmed_flush_lsn >= '$lsn' FROM pg_replication_slots WHERE slot_name = '$name'"
stop_after blocked
# Logical replication carries neither sequences nor the time of the last ID
# (nor insta_id's history of the shard): insta_id.move_state reads them
# under the lock, where no writer can change them, and insta_id.move_carry
# sets them on the new server in one transaction, with the mark raised so
# that IDs stay unique when the new server's clock is behind.
hold "SELECT insta_id.move_state($shard);"
state=${HELD%$'\n'}
[[ "$state" == "{"*"}" && "$state" != *$'\n'* ]] || die "the old server's state of the shard is not one: '$state'"
# (On standard input: a shard may have sequences enough to pass the limit
# of one command-line argument.)
raised=$(qt -f - <<<"SELECT insta_id.move_carry($shard, $(lit "$state"));")
echo "   sequences continue after the old server's: $(qt -f - <<<"SELECT coalesce(string_agg(format('%s %s', quote_ident(key),
                                                   CASE WHEN (value ->> 1)::boolean THEN value ->> 0 ELSE '(next ' || (value ->> 0) || ')' END), ', ' ORDER BY key), 'none')
                                                   FROM jsonb_each($(lit "$state")::jsonb -> 'sequences');" | printable)"
mark=$(qt -f - <<<"SELECT extract(epoch FROM ($(lit "$state")::jsonb ->> 'mark')::timestamptz);")   # empty before the old server's first ID
if [ -n "$mark" ]; then
  echo "   high-water mark carried over: $(qf -c "SELECT to_timestamp($mark)") (new server's: $raised)"
  mode=$(qt -c "SELECT insta_id.guard_mode()")
  if [ "$mode" = session ]; then
    # The per-session guard (15/16 not preloaded): open sessions do not see a
    # raised mark, so wait until the new server's clock is past it.
    wait_for 60 "the new server's clock to pass the old one's mark" qt -c "SELECT clock_timestamp() > to_timestamp($mark)"
  fi
fi
stop_after sequences
# What the cutover drops on the old server, said before it does.
nsp="(SELECT oid FROM pg_namespace WHERE nspname = $(lit "$schema"))"
hold "SELECT coalesce(string_agg(format('%s %I', CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table'
                                   WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' ELSE 'relation' END, c.relname), ', '
                                   ORDER BY c.relname), 'nothing')
             || format(', %s functions, %s types', (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = $nsp),
                       (SELECT count(*) FROM pg_type y LEFT JOIN pg_class t ON t.oid = y.typrelid
                        WHERE y.typnamespace = $nsp AND (y.typtype IN ('e', 'd') OR t.relkind = 'c')))
      FROM pg_class c WHERE c.relnamespace = $nsp AND c.relkind IN ('r', 'p', 'S', 'v');"
echo "   dropping schema $(printable <<<"$schema") on the old server: $(printable <<<"${HELD%$'\n'}") (never another schema's objects: drop_shard refuses those)"
hold "SELECT insta_id.drop_shard($shard, force => true); $(record_sql leaving cutover "$schema") COMMIT;"
hold_close
stop_after cutover
# At once: until then the shard takes writes nowhere. Under the finishers'
# lock, taken for this transaction (a re-run finishing beside us adopts
# first, then this adopts nothing).
step "adopt $schema on the new server"
qt -1 -c "SELECT pg_advisory_xact_lock(insta_id._move_lock_key(), $shard)" \
   -c "SELECT insta_id.adopt_shard($(lit "$schema"), $shard), $(record_call arriving adopted "$schema")
       WHERE NOT EXISTS (SELECT FROM insta_id.shard_registry WHERE shard_id = $shard)" >/dev/null
lock_finish
finish_move "$schema"
