# Logical shards with standard tools, on real servers:
# - a database with 64 shards (from a template) survives pg_dump/pg_restore:
#   the registry comes along, inserts continue, no ID repeats;
# - one shard moves to another server with the README's procedure (lock out
#   writers, pg_dump -n, pg_restore, adopt_shard, drop_shard) and writes
#   resume there without repeating an ID;
# - migrations (insta_id.migrate) on the 64 shards: history through
#   pg_dump/pg_restore and the move; against a long transaction, the runner
#   retries under lock_timeout while writers go on; a second runner is
#   refused; out of retries it stops at the busy shard; killed (kill -9) it
#   leaves no shard half-migrated; called again it goes on; a crash right
#   after it returns loses none of it, and it waits for synchronous standbys
#   as a COMMIT does; run while
#   create_shards_in_batches copies the template, every shard ends migrated;
# - all 8192 shards of a rich template (its objects owned by a role that is
#   not a superuser) on a server with PostgreSQL's default settings:
#   create_shards refuses the range up front (54000) and makes nothing;
#   create_shards_in_batches, cancelled part-way, leaves only complete,
#   registered shards, and called again finishes the job (from psycopg:
#   examples/psycopg, tests/clients.sh);
#   shard_drift over all of them in one call, with views in every shard,
#   finding a difference planted in shard 8000.
# Sessions wait on what the server shows (a NOTICE, pg_locks, a row count),
# never on a sleep.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $fixtures = "$FindBin::RealBin/../../fixtures";

# pg_dump -s of one schema, its name and next_id's shard number as placeholders.
sub schema_ddl
{
	my ($node, $db, $schema, $shard) = @_;
	local %ENV = $node->_get_env();
	my ($out, $err) = run_command([ 'pg_dump', '-s', '-n', $schema, $node->connstr($db) ]);
	die "pg_dump: $err" if $err;
	my $ddl = join "\n", grep { !/^\\(un)?restrict / } split /\n/, $out;
	$ddl =~ s/\b\Q$schema\E\b/<schema>/g;
	$ddl =~ s/insta_id\.next_id\($shard, /insta_id.next_id(<shard>, /g;
	return $ddl;
}

sub tool
{
	my ($node, @cmd) = @_;
	local %ENV = $node->_get_env();
	system_or_bail(@cmd);
}

# --- 64 shards, pg_dump/pg_restore --------------------------------------
# restart_after_crash: the framework turns it off; the runner is killed with
# -9 below and the server must come back as in production.
# (streaming allowed: WAL senders, which a wait for synchronous standbys needs)
my $srv_a = insta_node('a', preload => 1, streaming => 1, conf => "max_locks_per_transaction = 1024\nrestart_after_crash = on\n");
$srv_a->safe_psql('postgres', 'CREATE DATABASE app; CREATE ROLE app_writer LOGIN');
$srv_a->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
psql_file($srv_a, 'app', map { "$fixtures/$_.sql" } qw(shard_template template_extras template_partitions fill_shards));
$srv_a->safe_psql('app', q{
	SELECT insta_id.create_shards(1, 64, 'template');
	-- 100 users and 100 photos in every shard.
	CALL public.fill_shards(100);
	-- All photo IDs of all shards, tagged with the shard whose table holds them.
	CREATE FUNCTION public.all_photo_ids() RETURNS TABLE (shard int, id bigint) LANGUAGE plpgsql AS $$
	DECLARE r record;
	BEGIN
	  FOR r IN SELECT shard_id, schema_name FROM insta_id.shards() ORDER BY shard_id LOOP
	    IF to_regclass(format('%I.photos', r.schema_name)) IS NOT NULL THEN
	      RETURN QUERY EXECUTE format('SELECT %s, id FROM %I.photos', r.shard_id, r.schema_name);
	    END IF;
	  END LOOP;
	END $$;
});
is($srv_a->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE tables = 6'), 64, '64 shards registered, each with the template\'s 6 tables');
same_text(schema_ddl($srv_a, 'app', 'insta1', 1), schema_ddl($srv_a, 'app', 'template', 0),
	"a shard's pg_dump -s is the template's, object for object (functions, trigger, views, policy, grants, owners)");
my @kinds = grep { /^CREATE (FUNCTION|TRIGGER|VIEW|MATERIALIZED VIEW|POLICY|UNIQUE INDEX photo_counts|TYPE <schema>.visibility)|^ALTER TABLE <schema>.likes ENABLE ROW|OWNER TO app_writer|^GRANT SELECT ON TABLE <schema>.photo_captions TO app_writer|^ALTER TABLE ONLY <schema>.events ATTACH PARTITION/ }
  split /\n/, schema_ddl($srv_a, 'app', 'insta1', 1);
is(scalar @kinds, 13, 'the copy has them all');
# A migration of the template and all 64 shards, recorded per schema.
$srv_a->safe_psql('app', q{SET client_min_messages = warning;
	CALL insta_id.migrate('0001_photos_likes', 'template', $$ALTER TABLE photos ADD COLUMN likes int NOT NULL DEFAULT 0; CREATE INDEX photos_likes_idx ON photos (likes)$$)});
is($srv_a->safe_psql('app', q{SELECT count(*) || ' ' || (SELECT count(*) FROM insta_id.shard_drift('template')) FROM insta_id_admin.applied_migrations}),
	'65 0', 'migrated: the template and 64 shards have it, none differs from the template');

my $dump = $srv_a->basedir . '/dump';
mkdir $dump;
tool($srv_a, 'pg_dump', '-Fc', '-f', "$dump/app.dump", '-d', $srv_a->connstr('app'));
$srv_a->safe_psql('postgres', 'CREATE DATABASE restored');
tool($srv_a, 'pg_restore', '-d', $srv_a->connstr('restored'), "$dump/app.dump");
is($srv_a->safe_psql('restored', q{SELECT count(*) || ' ' || min(shard_id) || ' ' || max(shard_id) FROM insta_id.shards() WHERE tables = 6}),
	'64 1 64', 'restored: the registry came with the dump');
$srv_a->safe_psql('restored', q{DO $$ BEGIN FOR s IN 1..64 LOOP
	EXECUTE format('INSERT INTO insta%1$s.photos (user_id, caption) SELECT id, ''after'' FROM insta%1$s.users', s);
	END LOOP; END $$});
is($srv_a->safe_psql('restored', 'SELECT count(*) FROM all_photo_ids()'), 12800, 'restored: inserts continue in every shard');
is($srv_a->safe_psql('restored', 'SELECT count(*) - count(DISTINCT id) FROM all_photo_ids()'), 0, 'restored: no ID repeats, before or after the dump');
is($srv_a->safe_psql('restored', 'SELECT count(*) FROM all_photo_ids() WHERE insta_id.shard_id(id) <> shard'), 0,
	'restored: every ID decodes to the shard that holds it');
same_text(schema_ddl($srv_a, 'restored', 'insta5', 5), schema_ddl($srv_a, 'app', 'insta5', 5), 'restored: each shard holds every object it had');
is($srv_a->safe_psql('restored', q{INSERT INTO insta5.events (user_id, at) SELECT min(id), '2026-06-01' FROM insta5.users
	                          RETURNING tableoid::regclass || ' ' || insta_id.shard_id(id)}),
	'insta5.events_2026 5', 'restored: the partitioned table routes rows and mints the shard\'s IDs');
is($srv_a->safe_psql('restored', q{INSERT INTO insta5.photos (user_id) SELECT min(id) FROM insta5.users RETURNING caption;
	REFRESH MATERIALIZED VIEW CONCURRENTLY insta5.photo_counts;
	SELECT max(photos) || ' ' || (SELECT max(caption_length) FROM insta5.photo_captions) FROM insta5.photo_counts}),
	"untitled\n3 8", 'restored: the trigger, view and materialized view work');
is($srv_a->safe_psql('restored', q{SELECT (SELECT count(*) FROM insta_id_admin.migrations) || ' ' || count(*) || ' ' || (SELECT count(*) FROM insta_id.pending_migrations())
	                          FROM insta_id_admin.applied_migrations}),
	'1 65 0', 'restored: the migration history came with the dump');
$srv_a->safe_psql('restored', q{SELECT insta_id.create_shards(65, 65, 'template')});
is($srv_a->safe_psql('restored', q{SELECT count(*) || ' ' || (SELECT count(*) FROM insta_id.shard_drift('template'))
	                          FROM insta_id_admin.applied_migrations WHERE schema_name = 'insta65'}),
	'1 0', 'restored: a new shard has the template\'s migrations and its columns');

# --- Shard 7 moved from server A to server B ----------------------------
my $srv_b = insta_node('b', preload => 1);
$srv_b->safe_psql('postgres', 'CREATE DATABASE app; CREATE ROLE app_writer LOGIN');
$srv_b->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
$srv_a->safe_psql('app', 'GRANT USAGE ON SCHEMA insta7 TO app_writer; GRANT INSERT, SELECT ON ALL TABLES IN SCHEMA insta7 TO app_writer;
	GRANT USAGE ON ALL SEQUENCES IN SCHEMA insta7 TO app_writer');
my $writer_insert = sub {
	my ($node, $name) = @_;
	return $node->safe_psql('app', "INSERT INTO insta7.users (name) VALUES ('$name') RETURNING insta_id.shard_id(id)",
		extra_params => [ '-U', 'app_writer' ]);
};
is($writer_insert->($srv_a, 'before move'), 7, 'A: the application writes to shard 7');
# 1. Lock writers out of the shard on A: no more IDs minted there.
$srv_a->safe_psql('app', 'REVOKE USAGE ON SCHEMA insta7 FROM app_writer');
like(error_of($srv_a, 'app', q{SET ROLE app_writer; INSERT INTO insta7.users (name) VALUES ('x')}),
	qr/^ERROR:  42501: permission denied for schema insta7$/m, 'A: writers are locked out of shard 7 during the move (42501)');
# 2. Dump the shard's schema, 3. restore it on B, 4. register it there and
#    give writers back the schema privilege revoked in step 1.
tool($srv_a, 'pg_dump', '-Fc', '-n', 'insta7', '-f', "$dump/insta7.dump", '-d', $srv_a->connstr('app'));
$srv_a->safe_psql('app', "\\copy (SELECT * FROM insta_id_admin.applied_migrations WHERE schema_name = 'insta7') TO '$dump/insta7.migrations'");
tool($srv_b, 'pg_restore', '-d', $srv_b->connstr('app'), "$dump/insta7.dump");
$srv_b->safe_psql('app', "SELECT insta_id.adopt_shard('insta7', 7);\n\\copy insta_id_admin.applied_migrations FROM '$dump/insta7.migrations'");
same_text(schema_ddl($srv_b, 'app', 'insta7', 7), schema_ddl($srv_a, 'app', 'insta7', 7), 'B: shard 7 holds every object it had on A');
$srv_b->safe_psql('app', 'GRANT USAGE ON SCHEMA insta7 TO app_writer');
is($srv_b->safe_psql('app', q{SELECT string_agg(migration, ',') FROM insta_id_admin.applied_migrations WHERE schema_name = 'insta7'}),
	'0001_photos_likes', "B: shard 7's migration history came along");
is($srv_b->safe_psql('app', 'SELECT schema_name FROM insta_id.shards() WHERE shard_id = 7'), 'insta7', 'B: shard 7 registered after adopt_shard');
is($writer_insert->($srv_b, 'after move'), 7, 'B: the application writes to shard 7 again');
$srv_b->safe_psql('app', q{INSERT INTO insta7.photos (user_id, caption) SELECT id, 'on B' FROM insta7.users});
my $b_ids = $srv_b->safe_psql('app', q{SELECT string_agg(id::text, ',') FROM insta7.photos WHERE caption = 'on B'});
# 5. Drop the old copy on A (after checking the move).
my $a_ids = $srv_a->safe_psql('app', q{SELECT string_agg(id::text, ',') FROM insta7.photos});
is($srv_a->safe_psql('app', "SELECT count(*) - count(DISTINCT x) FROM unnest(string_to_array('$a_ids,$b_ids', ',')) x"),
	0, 'no photo ID minted on B repeats one minted on A');
is($srv_b->safe_psql('app', q{SELECT count(*) || ' ' || count(*) FILTER (WHERE caption = 'on B' AND insta_id.seq_id(id) > 100) FROM insta7.photos}),
	'202 102', "B has A's 100 photos and 102 new ones, their seq fields continuing A's sequence");
$srv_a->safe_psql('app', 'SET client_min_messages = warning; SELECT insta_id.drop_shard(7, force => true)');
is($srv_a->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 7'), 0, 'A: shard 7 is gone');
is($srv_a->safe_psql('app', q{SELECT count(*) FROM insta_id_admin.applied_migrations WHERE schema_name = 'insta7'}), 0, 'A: and so is its migration history');
$srv_b->stop;

# --- Migrations against real sessions -----------------------------------
# A long transaction reads a shard's photos; the runner's ALTER TABLE there
# needs a lock that waits for it. With lock_timeout the runner gives up
# after 100 ms and retries later, so the shard's writers never queue behind
# it for longer than that.
sub blocker
{
	my ($shard) = @_;
	my $s = $srv_a->background_psql('app');
	$s->query_safe("BEGIN; SELECT count(*) FROM insta$shard.photos");
	return $s;
}
# A CALL in a session of its own; bg_until waits for what it prints.
sub call_in_background
{
	my ($node, $db, $sql) = @_;
	my $s = $node->background_psql($db, on_error_stop => 0);
	$s->query_until(qr/started/, "\\echo started\n$sql;\n\\echo finished\n");
	return $s;
}

my $blk    = blocker(10);
my $runner = call_in_background($srv_a, 'app',
	q{CALL insta_id.migrate('0002_photos_flag', 'template', 'ALTER TABLE photos ADD COLUMN flag boolean', lock_timeout => '100ms', lock_retries => 1000)});
like(bg_until($runner, 'stderr', qr/schema insta10 busy, retry 1 of 1000/), qr/NOTICE:  .*schema insta10 busy, retry 1 of 1000/,
	'runner: shard 10 is busy, the runner retries (NOTICE)');
# 20 s for a writer: 200 times what lock_timeout lets the runner make it wait.
is($srv_a->safe_psql('app', q{SET lock_timeout = '20s'; INSERT INTO insta10.users (name) VALUES ('during') RETURNING insta_id.shard_id(id)}),
	10, "runner: meanwhile shard 10's writers are not held up");
like(error_of($srv_a, 'app', q{CALL insta_id.migrate('0003_other', 'template', 'SELECT 1')}),
	qr/^ERROR:  55006: another insta_id\.migrate is running\nDETAIL:  Process \d+ holds the migration runner's lock\./m,
	'a second runner is refused while the first runs (55006), naming its process');
$blk->quit;
bg_until($runner, 'stdout', qr/finished/);
like($runner->{stderr}, qr/migration 0002_photos_flag: 63 shards migrated, 0 had it already/, 'runner: once the long transaction ends, it finishes every shard');
unlike($runner->{stderr}, qr/ERROR/, 'runner: without an error');
$runner->quit;
is($srv_a->safe_psql('app', q{SELECT (SELECT count(*) FROM insta_id.pending_migrations()) || ' ' || (SELECT count(*) FROM insta_id.shard_drift('template'))}),
	'0 0', 'runner: no shard lacks it, none differs');

# Out of retries: it skips the busy shard, naming who holds it, migrates
# the others and fails listing it; called again, it finishes it.
$blk = blocker(20);
my $blocker_pid = $blk->query_safe('SELECT pg_backend_pid()');
my $out_of_retries = error_of($srv_a, 'app', q{CALL insta_id.migrate('0004_photos_note', 'template', 'ALTER TABLE photos ADD COLUMN note text', lock_timeout => '50ms', lock_retries => 2)});
like($out_of_retries,
	qr/^ERROR:  55P03: migration '0004_photos_note' skipped shards it could not lock within lock_timeout \(50ms\), 3 times: 20$/m,
	'out of retries: shard 20 skipped (55P03)');
like($out_of_retries, qr/^DETAIL:  62 other shards were migrated\. Busy: shard 20: .*process $blocker_pid \(role \S+, application '[^']*'\) holds AccessShareLock on it since /m,
	'out of retries: the others migrated, the holder named with its process');
is($srv_a->safe_psql('app', q{SELECT count(*) || ' ' || min(shard_id) || ' ' || max(shard_id) FROM insta_id.pending_migrations() WHERE migration = '0004_photos_note'}),
	'1 20 20', 'out of retries: shard 20 alone is pending');
# Killed (kill -9 of its backend: the server restarts) while it retries shard 20.
$runner = call_in_background($srv_a, 'app',
	q{CALL insta_id.migrate('0004_photos_note', 'template', 'ALTER TABLE photos ADD COLUMN note text', lock_timeout => '100ms', lock_retries => 1000)});
bg_until($runner, 'stderr', qr/schema insta20 busy/);
my $log = -s $srv_a->logfile;
kill 'KILL', $srv_a->safe_psql('app', q{SELECT pid FROM pg_stat_activity WHERE query LIKE 'CALL insta_id.migrate(%'});
# The crash ends both sessions' connections: the runner's psql exits as soon
# as it sees its own lost (->quit's \q would race that), the blocker's when
# its input ends.
end_session($runner);
end_session($blk);
# Back once the postmaster has reinitialised and accepts connections again (a
# connection made before it noticed the crash would reach the crashed run;
# one refused during recovery can break the pipe of the framework's psql).
$srv_a->wait_for_log(qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s, $log);
is($srv_a->safe_psql('app', q{SELECT count(*) || ' ' || min(shard_id) || ' '
	|| (SELECT count(*) FROM pg_attribute WHERE attrelid = 'insta20.photos'::regclass AND attname = 'note') FROM insta_id.pending_migrations()}),
	'1 20 0', 'killed: after the restart shard 20 is still pending, unchanged');
$srv_a->safe_psql('app', q{SET client_min_messages = warning; CALL insta_id.migrate('0004_photos_note', 'template', 'ALTER TABLE photos ADD COLUMN note text')});
is($srv_a->safe_psql('app', q{SELECT (SELECT count(*) FROM insta_id.pending_migrations()) || ' ' || (SELECT count(*) FROM insta_id.shard_drift('template'))}),
	'0 0', 'called again: every shard has it, none differs');

# Each schema's COMMIT does not wait for its WAL; the call's last one waits
# for all of them. With the WAL writer asleep for 10 s, a crash right after
# migrate returns (an immediate stop: what was not written is lost) keeps
# every schema's migration.
$srv_a->safe_psql('app', q{ALTER SYSTEM SET wal_writer_delay = '10s'; SELECT pg_reload_conf()});
$srv_a->safe_psql('app', q{SET client_min_messages = warning; CALL insta_id.migrate('0004_photos_seen', 'template', 'ALTER TABLE photos ADD COLUMN seen boolean')});
$srv_a->stop('immediate');
$srv_a->start;
is($srv_a->safe_psql('app', q{SELECT (SELECT count(*) FROM insta_id_admin.applied_migrations WHERE migration = '0004_photos_seen') || ' '
	|| (SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN insta_id.shards() s ON s.schema_name = c.relnamespace::regnamespace::name
	    WHERE c.relname = 'photos' AND a.attname = 'seen')}),
	'64 63', 'durable once it returns: after a crash right after it, the template and every shard have the migration, recorded');
# It waits as a COMMIT would for synchronous standbys too: with one named
# that never connects, the call waits (SyncRep) once its schemas are done,
# and a cancel ends the wait with COMMIT's own warning.
$srv_a->safe_psql('app', q{ALTER SYSTEM SET synchronous_standby_names = 'nobody'; SELECT pg_reload_conf()});
$runner = call_in_background($srv_a, 'app', q{CALL insta_id.migrate('0004_photos_hidden', 'template', 'ALTER TABLE photos ADD COLUMN hidden boolean')});
$srv_a->poll_query_until('app', q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE 'CALL insta_id.migrate(%'}) or die 'migrate never waited for the standby';
is($srv_a->safe_psql('app', q{SELECT count(*) FROM insta_id_admin.applied_migrations WHERE migration = '0004_photos_hidden'}),
	64, 'synchronous standbys: the call waits for them once every schema is done');
$srv_a->safe_psql('app', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'CALL insta_id.migrate(%'});
bg_until($runner, 'stdout', qr/finished/);
like($runner->{stderr}, qr/WARNING:  canceling wait for synchronous replication due to user request.*migration 0004_photos_hidden: 63 shards migrated/s,
	"synchronous standbys: a cancel ends the wait with COMMIT's warning, the migration done");
$runner->quit;
$srv_a->safe_psql('app', q{ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()});
$srv_a->safe_psql('app', q{ALTER SYSTEM RESET wal_writer_delay; SELECT pg_reload_conf()});

# A migration while shards are being created from the template: every shard
# ends with it, made before the migration (the runner migrates it) or after
# (copied from the migrated template, with its record), none half-way.
my $creator = call_in_background($srv_a, 'app', q{CALL insta_id.create_shards_in_batches(100, 399, 'template', 5)});
$srv_a->poll_query_until('app', 'SELECT count(*) >= 40 FROM insta_id_admin.shard_registry WHERE shard_id >= 100') or die 'no shards made';
$srv_a->safe_psql('app', q{SET client_min_messages = warning; CALL insta_id.migrate('0005_photos_rating', 'template', 'ALTER TABLE photos ADD COLUMN rating int')});
bg_until($creator, 'stdout', qr/finished/);
unlike($creator->{stderr}, qr/ERROR/, 'concurrent: create_shards_in_batches finished without an error');
$creator->quit;
note $srv_a->safe_psql('app', q{SELECT format('%s shards copied with the migration, %s migrated by the runner',
	    count(*) FILTER (WHERE a.applied_at = r.created_at), count(*) FILTER (WHERE a.applied_at > r.created_at))
	FROM insta_id_admin.shard_registry r JOIN insta_id_admin.applied_migrations a ON a.schema_name = r.schema_name
	WHERE r.shard_id >= 100 AND a.migration = '0005_photos_rating'});
is($srv_a->safe_psql('app', q{SELECT (SELECT count(*) FROM insta_id_admin.shard_registry WHERE shard_id >= 100) || ' ' || (SELECT count(*) FROM insta_id.pending_migrations())
	                     || ' ' || (SELECT count(*) FROM insta_id.shard_drift('template'))}),
	'300 0 0', 'concurrent: all 300 shards made, none lacks the migration, none differs');
$srv_a->stop;

# --- All 8192 shards on a stock server ----------------------------------
# max_connections and max_locks_per_transaction at PostgreSQL's defaults.
# (pg_stat_statements: which statements were JIT-compiled, below)
my $big = insta_node('stock', conf => "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track_utility = off\n");
is($big->safe_psql('postgres', 'SHOW max_locks_per_transaction'), 64, 'stock server: max_locks_per_transaction is the default');
# The template a rich one: template_extras' functions, trigger, views,
# materialized view, policy, grants and enum, every object owned by
# app_writer, not a superuser, whose code each copy runs. (Not its
# partitions: PostgreSQL's cost of a new partition grows with the catalogs,
# 8192 shards of them take ten minutes here; bench/shards.sh measures them.)
$big->safe_psql('postgres', 'CREATE DATABASE big; CREATE ROLE app_writer');
$big->safe_psql('big', 'SET client_min_messages = error; CREATE EXTENSION insta_id');
psql_file($big, 'big', map { "$fixtures/$_.sql" } qw(shard_template template_extras template_owner));
like(error_of($big, 'big', q{SELECT insta_id.create_shards(0, 8191, 'template')}),
	qr/^ERROR:  54000: creating 8192 shards in one transaction needs.*^HINT:  CALL insta_id\.create_shards_in_batches\(0, 8191/ms,
	'stock server: create_shards(0, 8191) is refused up front (54000) with a hint');
is($big->safe_psql('big', 'SELECT count(*) FROM insta_id.shards()'), 0, 'stock server: and made nothing');

# The procedure, cancelled once a thousand shards exist.
$creator = call_in_background($big, 'big', q{CALL insta_id.create_shards_in_batches(0, 8191, 'template')});
$big->poll_query_until('big', 'SELECT count(*) >= 1000 FROM insta_id_admin.shard_registry') or die 'no shards made';
$big->safe_psql('big', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'CALL insta_id.create_shards_in_batches%' AND pid <> pg_backend_pid()});
like(bg_until($creator, 'stdout', qr/finished/) . $creator->{stderr}, qr/ERROR:  canceling statement due to user request/, 'cancelled: the CALL ended with the cancel');
$creator->quit;
my $made = $big->safe_psql('big', 'SELECT count(*) FROM insta_id.shards()');
note "cancelled after $made shards";
ok($made >= 1000 && $made < 8192, 'cancelled: at least 1000 shards were committed, and not all');
is($big->safe_psql('big', 'SELECT count(*) FROM insta_id.shards() WHERE tables <> 3'), 0, 'cancelled: every registered shard is complete (3 tables)');
is($big->safe_psql('big', q{SELECT count(*) FROM pg_namespace n WHERE n.nspname ~ '^insta[0-9]+$'
	                         AND NOT EXISTS (SELECT FROM insta_id_admin.shard_registry r WHERE r.schema_name = n.nspname)}),
	0, 'cancelled: no shard schema is left unregistered');
my $started = time;
my ($ret, $out, $notices) = $big->psql('big', q{CALL insta_id.create_shards_in_batches(0, 8191, 'template')});
note sprintf 'resumed: %.1f s', time - $started;
is($ret, 0, 'resumed: the CALL succeeded');
like($notices, qr/shards 0\.\.8191: ${\(8192 - $made)} created, $made existed already/, 'resumed: it made the rest and skipped the shards that existed');
like($notices, qr/done of 0\.\.8191/, 'resumed: it reported progress on the way');
is($big->safe_psql('big', q{SELECT count(*) || ' ' || min(shard_id) || ' ' || max(shard_id) FROM insta_id.shards() WHERE tables = 3}),
	'8192 0 8191', '8192 shards, each with its 3 tables');
is($big->safe_psql('big', q{INSERT INTO insta0.users (name) VALUES ('a') RETURNING insta_id.shard_id(id)}), 0, 'shard 0 mints its own IDs');
is($big->safe_psql('big', q{INSERT INTO insta8191.users (name) VALUES ('b') RETURNING insta_id.shard_id(id)}), 8191, 'shard 8191 mints its own IDs');

# shard_drift at 8192 shards on the stock server, in one call. Tables,
# columns, indexes and constraints are read without locks; a view is
# deparsed under locks on it and on what it reads, a schema at a time, each
# released before the next (0.10.0 held them all to the end: with a view of
# the shard's tables in every shard, several times the stock lock table,
# and 54000). One call over every shard, two views in each: the one view
# changed in shard 8000 is its one difference, and its transaction holds
# no lock on any shard once it returns.
$big->safe_psql('big', q{CREATE OR REPLACE VIEW insta8000.photo_captions AS SELECT p.id, p.user_id, 0 AS caption_length FROM insta8000.photos p});
# (its statements counted for the check of JIT below)
$big->safe_psql('big', q{CREATE EXTENSION pg_stat_statements; SELECT pg_stat_statements_reset()});
$started = time;
is($big->safe_psql('big', q{SET pg_stat_statements.track = 'all'; BEGIN; SELECT string_agg(shard_id || ' ' || object, ', ') FROM insta_id.shard_drift('template');
	SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE l.pid = pg_backend_pid() AND n.nspname ~ '^insta[0-9]+$'; COMMIT}), "8000 view photo_captions\n0",
	'stock server: one call over all 8192 shards of the rich template finds the one view changed, in shard 8000, and holds no lock on any shard once it returns');
note sprintf 'shard_drift, 8192 shards: %.1f s', time - $started;

# No statement of insta_id's is JIT-compiled at 8192 shards, on a server
# with JIT on and its default thresholds: a catalog query's estimate grows
# with the shards while it reads a template's few rows, and compiling one
# cost a second or more a call (_check_template: 1.2 s to make one shard at
# 4000). Every statement the helpers run, nested ones included, for making
# one shard, a call that finds every shard made, a migration, drift (the
# call above, and a range), and the listings of shards and pending
# migrations.
SKIP: {
	skip 'this server has no JIT (built without LLVM)', 1
	  unless $big->safe_psql('big', 'SELECT pg_jit_available()') eq 't';
	$big->safe_psql('big', q{SET client_min_messages = warning; SET pg_stat_statements.track = 'all';
		SELECT insta_id.drop_shard(8191, force => true);
		SELECT insta_id.create_shards(8191, 8191, 'template');
		CALL insta_id.create_shards_in_batches(0, 8191, 'template');
		CALL insta_id.migrate('comment_users', 'template', 'COMMENT ON TABLE users IS ''people''');
		SELECT count(*) FROM insta_id.shard_drift('template', 8000, 8191);
		SELECT count(*) FROM insta_id.shards();
		SELECT count(*) FROM insta_id.pending_migrations()});
	# (dealloc: an entry evicted before this read would go unseen)
	is($big->safe_psql('big', q{SELECT (SELECT i.dealloc FROM pg_stat_statements_info i) || ' '
		|| coalesce(string_agg(left(regexp_replace(s.query, '\s+', ' ', 'g'), 80), '; '), 'none')
		FROM pg_stat_statements s WHERE s.jit_functions > 0}),
		'0 none', 'stock server with JIT: no statement of the helpers at 8192 shards was JIT-compiled');
}
$big->stop;

done_testing();
