# Moves no client notices: the fleet's shards routed by PgBouncer (Debian's
# package, run here on a socket of its own), one entry per logical shard in
# a file pgbouncer.ini includes, and `insta-id move --pgbouncer` pausing the
# moving shard's entry at the cutover, pointing it at the new server and
# resuming it:
# - refusals: an entry PgBouncer does not have, a password in the entry's
#   target, --pgbouncer without its map;
# - ten shards moved one after another, each while pgbench (-M simple, the
#   protocol transaction pooling on 1.18 allows) runs 4 clients on its
#   entry, and one client on a shard that does not move, each move first
#   interrupted by SIGINT or SIGTERM after one of its ten steps, then run
#   again: 0 failed transactions, every committed row on the new server
#   once, the entry pointed at it;
# - a move killed in its cutover (the entry left paused, clients queued) and
#   one killed after it committed, each with pgbench running and run again:
#   the entry of another shard answers meanwhile, a re-run without
#   --pgbouncer (which could not resume it) is refused, and the re-run resumes
#   (onto the old server, then moves afresh) or points and resumes (onto the
#   new one); 0 failed transactions;
# - rollback (insta-id move --rollback) of a move that kept the old copy,
#   under pgbench, as is and killed twice (before and after its commit):
#   0 failed, every row on the old server once, nothing left; a rollback
#   after the window refused and the copy dropped by the next run;
#   --release; refusals (the window's range, a table the replication back
#   does not carry). On 18 and on 15 (make test-move): with 15 the copy
#   follows through the slot's advance, from 16 through origin = none;
# - the cutover's budget: a transaction open through the entry, and a
#   pg_dump of the old server, holding the shard longer than the budget:
#   named, nothing paused (exit 75); SIGTERM during a PAUSE; back-to-back
#   readers: each try that paused says what it held its clients for, and
#   no pgbench client waited longer (its latency log);
# - insta-id rebalance through PgBouncer, killed in its first move and run
#   again: it finishes that move, plans again and goes on;
# - PgBouncer's delay after a failed login (what a PAUSE that cuts a login
#   short leaves): the client queued at the cutover is answered once the
#   move resumes the entry, not server_login_retry later.
# pgbench runs without a time of its own (-T 300 as a bound) and is ended
# with SIGALRM, which is how -T ends it: it prints its summary.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $pgbouncer = (grep { -x } map { "$_/pgbouncer" } split(/:/, $ENV{PATH}), '/usr/sbin')[0]
  or die 'pgbouncer is not installed: scripts/dev/setup.sh pgbouncer';
my $repo     = "$FindBin::RealBin/../../..";
my $fixtures = "$repo/tests/fixtures";
my $logical  = "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n";

my $old = insta_node('old', preload => 1, conf => $logical);
my $new = insta_node('new', preload => 1, conf => $logical);    # (the rebalance moves shards back)
for my $n ($old, $new)
{
	$n->safe_psql('postgres', 'CREATE DATABASE app');
	$n->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
}
my ($from, $to) = map { $_->connstr('app') } $old, $new;
psql_file($old, 'app', "$fixtures/shard_template.sql");
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(1, 14, 'template')});

# insta-id plan --sizes: a fleet described in a file, planned without
# connecting (bench/moves.sh times it on 8192 shards).
my $dir0 = PostgreSQL::Test::Utils::tempdir();
append_to_file("$dir0/fleet.txt", "# server shard bytes\ndb1 1 6000\ndb1 2 3000\ndb1 3 1000\ndb2\n");
IPC::Run::run([ 'insta-id', 'plan', '--sizes', "$dir0/fleet.txt" ], '>', \my $pout, '2>', \my $perr);
# The lowest peak (6000 bytes: shard 1 alone) with the fewest bytes moved:
# shards 3 and 2 (4000), not shard 1 (6000).
is(($? >> 8) . '|' . join('|', grep { /^(moves|  shard)/ } split /\n/, $pout),
	'0|moves: 2 (4000 bytes); a dry run, nothing is moved|  shard 3 (insta3, 1000 bytes): db1 -> db2|  shard 2 (insta2, 3000 bytes): db1 -> db2',
	'insta-id plan --sizes: the plan of the fleet the file describes, without a server: the least bytes for the lowest peak');
append_to_file("$dir0/fleet.txt", "db2 1 5\n");
IPC::Run::run([ 'insta-id', 'plan', '--sizes', "$dir0/fleet.txt" ], '>', \$pout, '2>', \$perr);
is(($? >> 8) . "|$perr", "1|insta-id: line 6: shard 1 is listed twice\n", 'insta-id plan --sizes: a shard listed twice is refused');

# PgBouncer: transaction pooling, trust on its own socket, the map of
# shards 1 to 13 in a file of its own (14 has no entry).
my $dir  = PostgreSQL::Test::Utils::tempdir_short();
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $user = getpwuid($<);
my $map  = "$dir/shards.ini";
append_to_file($map, join '', map { "shard$_ = host=" . $old->host . ' port=' . $old->port . " dbname=app\n" } 1 .. 13);
append_to_file("$dir/userlist.txt", qq{"$user" ""\n"watcher" ""\n});
append_to_file("$dir/pgbouncer.ini", qq{[databases]
%include $map
[pgbouncer]
listen_addr =
listen_port = $port
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = $user
stats_users = watcher
pool_mode = transaction
default_pool_size = 4
max_client_conn = 100
logfile = $dir/pgbouncer.log
});
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', "$dir/stdout", '2>', "$dir/stderr");
my $second;    # (a second PgBouncer, below)
END { $_->kill_kill for grep { defined } $bouncer, $second; }
my $admin = "host=$dir port=$port dbname=pgbouncer user=$user";
my $through = "host=$dir port=$port user=$user";    # an application's connection, dbname=shard<N>
# psql through PgBouncer (simple protocol: -c), its output or undef.
sub via
{
	my ($conninfo, $sql, $flags) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', $flags // '-XqtA', '-d', $conninfo, '-c', $sql ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(60)) or return undef;
	chomp $out;
	return $out;
}
sub last_line { return (split /\n/, $_[0])[-1] // ''; }

# PgBouncer's entry of a shard, by column (SHOW DATABASES), on the first
# PgBouncer or the console given.
sub entry
{
	my ($shard, $console) = @_;
	my ($head, @rows) = split /\n/, via($console // $admin, 'SHOW DATABASES', '-XA') // '';
	my @names = split /\|/, $head // '';
	for my $r (@rows)
	{
		my %e;
		@e{@names} = split /\|/, $r, -1;
		return \%e if ($e{name} // '') eq "shard$shard";
	}
	return {};
}
for (my $t = 0; !defined via($admin, 'SHOW VERSION'); $t++)
{
	die 'PgBouncer did not start: ' . slurp_file("$dir/stderr") if $t > 100;
	sleep 0.1;
}
is(via("$through dbname=shard3", 'SELECT count(*) FROM insta3.users'), 0, 'PgBouncer routes shard 3 to the old server');

# move(SHARD[, TARGET[, OPTIONS...]]): insta-id move with PgBouncer, its
# exit status and output (stdout and stderr, in order), through a file (a
# killed move's sessions end on their own). Without a rollback window
# unless OPTIONS give one: the old copy dropped at the cutover.
my $moves = 0;
sub move
{
	my ($shard, $target, @options) = @_;
	$target //= 'host=' . $new->host . ' port=' . $new->port . ' dbname=app';
	@options = ('--rollback-window', 0) unless @options;
	my $log = "$dir/move-" . ++$moves . '.log';
	IPC::Run::run(
		[ 'insta-id', 'move', $shard, '--from', $from, '--to', $to, '--copy-timeout', 120,
		  '--pgbouncer', $admin, '--pgbouncer-map', $map, '--pgbouncer-target', $target, @options ],
		'>&', $log);
	my $rc = $? & 127 ? 128 + ($? & 127) : $? >> 8;
	return ($rc, slurp_file($log));
}
my ($rc, $out) = move(14);
is("$rc|" . (split /\n/, $out)[-1], "1|insta-id: PgBouncer has no entry shard14 (its [databases] in $map, included by pgbouncer.ini)",
	'refused: a shard PgBouncer has no entry for');
is($old->safe_psql('app', 'SELECT count(*) FROM pg_publication') . '|' . $new->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta14'}),
	'0|0', '... before anything is made');
($rc, $out) = move(1, 'host=h dbname=app password=x');
is("$rc|$out", "2|insta-id: a connection string must not hold a password: put it in the password file (~/.pgpass, or PGPASSFILE) or a service file\n",
	"refused: a password in the entry's target (PgBouncer's map is a file others read)");
IPC::Run::run([ 'insta-id', 'move', 1, '--from', $from, '--to', $to, '--pgbouncer', $admin ], '>&', \$out);
like($out, qr/required arguments were not provided:\n  --pgbouncer-map <FILE>\n  --pgbouncer-target <CONNSTR>/, 'refused: --pgbouncer without its map and target');
# The console's user must be one of admin_users: one of stats_users may
# SHOW, not PAUSE, RELOAD or RESUME, which 0.9.0 found out at the cutover.
IPC::Run::run([ 'insta-id', 'move', 1, '--from', $from, '--to', $to, '--rollback-window', 0, '--copy-timeout', 120,
	'--pgbouncer', "host=$dir port=$port dbname=pgbouncer user=watcher", '--pgbouncer-map', $map,
	'--pgbouncer-target', 'host=' . $new->host . ' port=' . $new->port . ' dbname=app' ], '>&', \$out);
is(($? >> 8) . '|' . last_line($out) . '|' . $old->safe_psql('app', 'SELECT count(*) FROM pg_publication'),
	"1|insta-id: PgBouncer's console ($dir:$port/pgbouncer): its user watcher is not one of PgBouncer's admin_users, and a move needs PAUSE, RELOAD and RESUME: add it to admin_users, or give --pgbouncer a user that is|0",
	'refused before anything is made: a console user of stats_users only');

# pgbench (-M simple) through PgBouncer on a shard's entry, inserting users
# named 'pgbench', with a per-transaction log.
sub bench_start
{
	my ($shard, $clients, $via, $tag) = @_;
	my $script = "$dir/insert$shard.sql";
	append_to_file($script, "INSERT INTO insta$shard.users (name) VALUES ('pgbench');\n") unless -e $script;
	my %b = (out => '', err => '', shard => $shard);
	$b{run} = IPC::Run::start(
		[ 'pgbench', '-n', '-M', 'simple', '-c', $clients, '-j', 1, '-T', 300, '-R', 200, '-f', $script,
		  '-l', "--log-prefix=$dir/pgbench$shard" . ($tag // ''), ($via // $through) . " dbname=shard$shard" ],
		'>', \$b{out}, '2>', \$b{err});
	return \%b;
}
# Ends a pgbench run as -T would (SIGALRM): its transactions processed and
# failed, and its exit status.
sub bench_stop
{
	my ($b) = @_;
	$b->{run}->signal('ALRM');
	$b->{run}->finish;
	my ($done)   = $b->{out} =~ /^number of transactions actually processed: (\d+)/m;
	my ($failed) = $b->{out} =~ /^number of failed transactions: (\d+)/m;
	return ($done // -1, $failed // -1, $b->{run}->result(0), "$b->{out}$b->{err}");
}
# pgbench's rows of a shard on a server; -1 without the shard there.
sub rows_on
{
	my ($node, $shard) = @_;
	return -1 unless $node->safe_psql('app', "SELECT to_regclass('insta$shard.users') IS NOT NULL") eq 't';
	return $node->safe_psql('app', "SELECT count(*) FROM insta$shard.users WHERE name = 'pgbench'");
}
# Until pgbench has committed rows on NODE (bounded).
sub until_rows
{
	my ($node, $shard, $above) = @_;
	for (my $t = 0; $t < 600; $t++)
	{
		return 1 if rows_on($node, $shard) > $above;
		sleep 0.05;
	}
	return 0;
}

my $steady = bench_start(13, 1);    # a shard that stays where it is
until_rows($old, 13, 0) or die 'pgbench on shard 13 wrote nothing';
my @paused;
# Each of the ten moves is first interrupted by SIGINT or SIGTERM after one
# of its steps, as an operator would: the run ends (130, 143) with the entry
# not paused, and the same command run again finishes the move.
my @interrupted = qw(slot:INT copy:TERM verified:INT blocked:TERM sequences:INT
  cutover:TERM adopted:INT map:TERM unsubscribed:INT moved:TERM);
for my $shard (1 .. 10)
{
	my $b = bench_start($shard, 4);
	until_rows($old, $shard, 0) or die "pgbench on shard $shard wrote nothing";
	my ($at, $sig) = split /:/, $interrupted[ $shard - 1 ];
	my ($src, $sout);
	{
		local $ENV{INSTA_ID_MOVE_STOP_AFTER} = "$at:$sig";
		($src, $sout) = move($shard);
	}
	my $name = $sig eq 'INT' ? 'SIGINT' : 'SIGTERM';
	my $expected = $sig eq 'INT' ? 130 : 143;
	# In a try (the entry paused): resumed before the exit. Past the
	# cutover's commit: once the entry is pointed and resumed.
	my $said = $at =~ /^(blocked|sequences)$/
	  ? "PgBouncer's entry shard$shard resumed; the shard is where it was: run the move again to go on"
	  : 'stopped; run it again to go on';
	move_released($_, $shard) for $old, $new;
	is("$src|" . (entry($shard)->{paused} // 'no entry') . '|'
		  . ($sout =~ /^   \(signalled after step '\Q$at\E'[^\n]*\n(?:.*\n)*insta-id: $name: \Q$said\E$/m ? 'said' : 'not said'),
		"$expected|0|said", "shard $shard: $name after step '$at' ended the run, the entry not paused")
	  or diag $sout;
	($rc, $out) = move($shard);
	# pgbench goes on through the entry, on the new server, then stops.
	my $moved = rows_on($new, $shard);
	until_rows($new, $shard, $moved);
	my ($done, $failed, $brc, $bout) = bench_stop($b);
	push @paused, $out =~ /shard$shard paused for ([0-9.]+) s/ ? $1 : 'none';
	my $left = join ' ', map {
		$_->safe_psql('app', qq{SELECT coalesce(string_agg(x, ','), 'none') FROM (
			SELECT 'publication ' || pubname FROM pg_publication WHERE pubname IN ('insta_move_$shard', 'insta_back_$shard')
			UNION ALL SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE slot_name IN ('insta_move_$shard', 'insta_back_$shard')
			UNION ALL SELECT 'subscription ' || subname FROM pg_subscription WHERE subname IN ('insta_move_$shard', 'insta_back_$shard')
			UNION ALL SELECT 'record ' || side || ' ' || step FROM insta_id_admin.moves WHERE shard_id = $shard
			UNION ALL SELECT 'fence ' || tgrelid::regclass FROM pg_trigger WHERE tgname = 'insta_id_move_fence') l(x)})
	} $old, $new;
	is("$rc|$brc|$failed|" . rows_on($new, $shard) . '|' . rows_on($old, $shard) . "|$left",
		"0|0|0|$done|-1|none none", "shard $shard moved under pgbench through PgBouncer, its run interrupted first: 0 failed, its $done rows on the new server once, nothing of the move left")
	  or diag "$sout\n$out\n$bout";
}
note 'pauses (s): ' . join(' ', @paused);
is(join('|', @{ entry(7) }{qw(host port database paused)}), $new->host . '|' . $new->port . '|app|0',
	"PgBouncer's entry of a moved shard names the new server, not paused");
is(slurp_file($map) =~ /^shard7 = host=\Q${\ $new->host }\E port=${\ $new->port } dbname=app$/m
	  && slurp_file($map) =~ /^shard13 = host=\Q${\ $old->host }\E port=${\ $old->port } dbname=app$/m ? 'ok' : slurp_file($map),
	'ok', 'the map file says so; the entries of shards not moved are as they were');

# Killed in the cutover (its locks held, the entry paused): clients queue in
# PgBouncer; another shard's entry answers; the re-run resumes the entry
# (the old server still holds the shard), takes the copy up and cuts over.
# Then killed once the cutover committed: the re-run points the entry at the
# new server and resumes it.
for my $case ([ 11, 'blocked' ], [ 12, 'cutover' ])
{
	my ($shard, $at) = @$case;
	my $b = bench_start($shard, 4);
	until_rows($old, $shard, 0) or die "pgbench on shard $shard wrote nothing";
	my ($krc, $kout);
	{
		local $ENV{INSTA_ID_MOVE_STOP_AFTER} = $at;
		($krc, $kout) = move($shard);
	}
	move_released($_, $shard) for $old, $new;
	my $paused = entry($shard)->{paused} ? 'paused' : 'not paused';
	my $other = via("$through dbname=shard13", 'SELECT count(*) > 0 FROM insta13.users');
	# insta-id status warns that the shard's clients are held now.
	IPC::Run::run([ 'insta-id', 'status', '--server', $from, '--server', $to ], '>&', \my $held);
	like($held, qr/^  shard $shard: arriving from [^\n]*; no mover on the servers given, and the move PAUSED the shard's PgBouncer entry \(shard$shard\) without resuming it\n    WARNING: PgBouncer holds the shard's clients now; they fail after its query_wait_timeout\. Resume them: run the move again with --pgbouncer, --pgbouncer-map and --pgbouncer-target \(it resumes the entry first\), or RESUME shard$shard on each PgBouncer's console$/m,
		"killed after '$at': insta-id status warns that PgBouncer holds the shard's clients, and says how to resume them") or diag $held;
	# A re-run that could not resume the entry is refused.
	IPC::Run::run([ 'insta-id', 'move', $shard, '--from', $from, '--to', $to, '--rollback-window', 0, '--routing-elsewhere' ], '>&', \$out);
	my $refused = ($? >> 8) . '|' . last_line($out);
	($rc, $out) = move($shard);
	my $moved = rows_on($new, $shard);
	until_rows($new, $shard, $moved);
	my ($done, $failed, $brc, $bout) = bench_stop($b);
	is("$krc|$paused|$other|$refused|$rc|$brc|$failed|" . rows_on($new, $shard) . '|' . rows_on($old, $shard),
		"137|paused|t|1|insta-id: this move of shard $shard paused its PgBouncer entry (shard$shard) at the cutover and did not resume it: run it again with --pgbouncer, --pgbouncer-map and --pgbouncer-target, which resume it|0|0|0|$done|-1",
		"killed after '$at' with its entry paused, another entry answering; a re-run without --pgbouncer (routing said to be elsewhere) refused; the re-run resumed and moved it: 0 failed, $done rows on the new server")
	  or diag "$kout\n$out\n$bout";
}
my ($done, $failed, $brc, $bout) = bench_stop($steady);
is("$brc|$failed|" . rows_on($old, 13), "0|0|$done", "pgbench on a shard not moved: 0 failed through every move ($done rows)")
  or diag $bout;

# The cutover's budget. Shards 16 and 17 get entries.
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(16, 17, 'template')});
append_to_file($map, join '', map { "shard$_ = host=" . $old->host . ' port=' . $old->port . " dbname=app\n" } 16, 17);
via($admin, 'RELOAD');
# An open transaction through the entry, longer than the budget (an
# analytics query through the application's pool): the PAUSE would wait for
# it with every client stalled behind. Each try pauses nothing and names it;
# after --cutover-attempts 2 the move exits 75, pgbench going on through
# the entry all along. Once it has ended, the re-run takes the copy up.
# (With HOLDING, it reads the shard's table too, which its lock then holds.)
sub open_through
{
	my ($shard, $holding) = @_;
	my $read = $holding ? ", (SELECT count(*) FROM insta$shard.users)" : '';
	my %h = (in => "BEGIN;\nSELECT 'open', pg_backend_pid()$read;\n", out => '');
	$h{run} = IPC::Run::start([ 'psql', '-XqtA', '-d', "$through dbname=shard$shard" ], '<', \$h{in}, '>', \$h{out}, IPC::Run::timeout(120));
	$h{run}->pump until $h{out} =~ /open\|(\d+)/;
	$h{pid} = $1;
	return \%h;
}
sub close_through { my ($h) = @_; $h->{in} .= "COMMIT;\n"; $h->{run}->finish; return; }
{
	my $b = bench_start(16, 4);
	until_rows($old, 16, 0) or die 'pgbench on shard 16 wrote nothing';
	my $long = open_through(16, 'holding');
	my ($grc, $gout) = move(16, undef, '--rollback-window', 0, '--cutover-attempts', 2, '--cutover-retry', 1);
	my $paused = entry(16)->{paused};
	my $meanwhile = rows_on($old, 16);
	until_rows($old, 16, $meanwhile);
	close_through($long);
	move_released($_, 16) for $old, $new;
	($rc, $out) = move(16);
	my $moved = rows_on($new, 16);
	until_rows($new, 16, $moved);
	my ($done, $failed, $brc, $bout) = bench_stop($b);
	like($gout, qr/^insta-id: the cutover of shard 16 was given up at each of its 2 tries, each within its budget of 500 ms \(--pause-budget, --cutover-attempts\); the last: sessions have held the shard longer than the budget \(500 ms\), so nothing was paused:\n\s+process $long->{pid} \([^\n]*idle in transaction, transaction open since [^\n]*; holds AccessShareLock on users\): SELECT 'open', pg_backend_pid\(\), \(SELECT count\(\*\) FROM insta16\.users\);?$/m,
		'a transaction open through the entry longer than the budget: named, nothing paused');
	my ($named) = $gout =~ /so nothing was paused:\n((?:  .*\n?)*)/;
	is(scalar(() = ($named // '') =~ /process $long->{pid} \(/g), 1,
		'a session open through the entry and holding the shard: listed once, with its lock');
	is("$grc|$paused|$rc|" . ($out =~ /^== the copy of shard 16 by an interrupted move is complete and streaming/m ? 'taken up' : 'made again') . "|$brc|$failed|" . rows_on($new, 16) . '|' . rows_on($old, 16),
		"75|0|0|taken up|0|0|$done|-1", "given up (exit 75), the entry never paused; pgbench went on; the re-run took the copy up: 0 failed, $done rows on the new server")
	  or diag "$gout\n$out\n$bout";
}
# A pg_dump backup of the old server holds every table it dumps for the
# whole dump (ACCESS SHARE, from its start): its output read slowly here, it
# holds shard 19 for as long as the test says. The cutover pauses nothing
# behind it and names it; the backup completes; the re-run moves the shard.
{
	$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(19, 19, 'template');
		INSERT INTO insta19.users (name) SELECT repeat('x', 200) FROM generate_series(1, 5000)});
	append_to_file($map, 'shard19 = host=' . $old->host . ' port=' . $old->port . " dbname=app\n");
	via($admin, 'RELOAD');
	my $b = bench_start(19, 4);
	until_rows($old, 19, 0) or die 'pgbench on shard 19 wrote nothing';
	my $go = "$dir/dump19.go";
	# (As a backup names itself: the TAP framework's PGAPPNAME would. The
	# slow reader gives up after 180 s, should the test die first.)
	my $dump = IPC::Run::start([ 'bash', '-c',
		'PGAPPNAME=pg_dump pg_dump -d "$1" -n insta19 | { for i in $(seq 1800); do [ -e "$2" ] && break; sleep 0.1; done; wc -c; }', 'dump', $from, $go ],
		'>', \my $dumped, '2>', \my $dump_err, IPC::Run::timeout(180));
	$old->poll_query_until('app', q{SELECT count(*) > 0 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE a.application_name = 'pg_dump' AND l.relation = 'insta19.users'::regclass AND l.granted
		  AND a.xact_start < clock_timestamp() - interval '1 s'})
	  or die 'pg_dump did not hold shard 19';
	my ($grc, $gout) = move(19, undef, '--rollback-window', 0, '--cutover-attempts', 1);
	my $paused = entry(19)->{paused};
	append_to_file($go, '');
	$dump->finish;
	move_released($_, 19) for $old, $new;
	($rc, $out) = move(19);
	my $moved = rows_on($new, 19);
	until_rows($new, 19, $moved);
	my ($done, $failed, $brc, $bout) = bench_stop($b);
	like($gout, qr/^insta-id: the cutover of shard 19 was given up at each of its 1 tries, each within its budget of 500 ms \(--pause-budget, --cutover-attempts\); the last: sessions have held the shard longer than the budget \(500 ms\), so nothing was paused:\n\s+process \d+ \([^\n]*application 'pg_dump'[^\n]*holds AccessShareLock on [^\n]*users[^\n]*\): /m,
		'a pg_dump of the old server holding the shard: named, nothing paused');
	is("$grc|$paused|" . ($dump->result(0) == 0 && $dumped =~ /^\s*(\d+)/ && $1 > 100_000 ? 'the dump completed' : "the dump failed: $dump_err")
		  . "|$rc|$brc|$failed|" . rows_on($new, 19) . '|' . rows_on($old, 19),
		"75|0|the dump completed|0|0|0|$done|-1",
		"given up (exit 75), the entry never paused, the backup completed; pgbench went on; the re-run moved the shard: 0 failed, $done rows on the new server")
	  or diag "$gout\n$out\n$bout";
}
# SIGTERM while the cutover's PAUSE waits for a transaction through the
# entry (a budget of a minute: the PAUSE waits): the tool resumes the entry
# before it exits (143); the shard stays the old server's, and a client
# queued at the PAUSE is answered there.
{
	my $open = open_through(17);
	my $log  = "$dir/move-term.log";
	my $mover = IPC::Run::start(
		[ 'insta-id', 'move', 17, '--from', $from, '--to', $to, '--copy-timeout', 120, '--rollback-window', 0, '--pause-budget', 60000,
		  '--pgbouncer', $admin, '--pgbouncer-map', $map, '--pgbouncer-target', 'host=' . $new->host . ' port=' . $new->port . ' dbname=app' ],
		'>&', $log);
	until_true('the PAUSE of shard17', sub { (entry(17)->{paused} // '') eq '1' });
	my ($qout, $qerr) = ('', '');
	my $queued = IPC::Run::start([ 'psql', '-XqtA', '-d', "$through dbname=shard17", '-c', 'SELECT count(*) FROM insta17.users' ],
		'>', \$qout, '2>', \$qerr, IPC::Run::timeout(60));
	until_true('the query queued on shard17', sub { (via($admin, 'SHOW POOLS', '-XtA') // '') =~ /^shard17\|[^|]*\|\d+\|[1-9]/m });
	$mover->signal('TERM');
	$mover->finish;
	my $st  = $mover->full_result(0);
	my $mrc = $st & 127 ? 128 + ($st & 127) : $st >> 8;
	my $paused = entry(17)->{paused};
	close_through($open);
	$queued->finish;
	my $said = slurp_file($log);
	is("$mrc|$paused|" . ($qout =~ s/\s+$//r) . '|' . $old->safe_psql('app', 'SELECT count(*) FROM insta_id.shards() WHERE shard_id = 17')
		  . '|' . ($said =~ /^insta-id: SIGTERM: PgBouncer's entry shard17 resumed; the shard is where it was: run the move again to go on$/m ? 'said' : 'not said'),
		'143|0|0|1|said', 'SIGTERM during the PAUSE: the entry resumed before the tool exited (143), the queued query answered on the old server')
	  or diag "$said\n$qerr";
	move_released($_, 17) for $old, $new;
	($rc, $out) = move(17);
	is("$rc|" . join('|', @{ entry(17) }{qw(port paused)}), '0|' . $new->port . '|0', 'run again, the move finished') or diag $out;
}

# The budget covers giving up: back-to-back readers of a
# second on the old server, each holding shard 20's table (ACCESS SHARE,
# which the cutover's lock waits for), and a budget of 500 ms. A try that
# finds a reader younger than the budget pauses the entry, and its lock
# waits for that reader past the budget: the try's watchdog ends it at its
# deadline and resumes the entry; the other tries pause nothing. Every try
# that paused says what it held its clients for; every client is served,
# none failed. How long the clients waited (pgbench's latency log: a
# transaction's time less its schedule lag) against those holds and the
# budget is timing: noted here, measured by make bench-moves. (A client's
# wait also holds its own transaction, on a server connection PgBouncer
# opens anew after the RESUME, and its own scheduling: a busy machine made
# it 3.5 ms longer than the hold plus the longest transaction before.)
{
	$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(20, 20, 'template')});
	append_to_file($map, 'shard20 = host=' . $old->host . ' port=' . $old->port . " dbname=app\n");
	via($admin, 'RELOAD');
	my $bench = bench_start(20, 4);
	until_rows($old, 20, 400) or die 'pgbench on shard 20 wrote too little';
	my $began = Time::HiRes::time();
	# (From a file: psql reads its standard input only as the harness pumps it.)
	append_to_file("$dir/readers.sql", "SELECT count(*), pg_sleep(1) FROM insta20.users;\n" x 120);
	my $readers = IPC::Run::start([ 'psql', '-XqtA', '-d', $from, '-f', "$dir/readers.sql" ],
		'>', \my $read_out, '2>', \my $read_err, IPC::Run::timeout(180));
	$old->poll_query_until('app', q{SELECT EXISTS (SELECT FROM pg_locks l WHERE l.relation = 'insta20.users'::regclass AND l.granted
		AND l.pid <> pg_backend_pid())}) or die 'the readers did not hold shard 20';
	my (@held, $said);
	for my $run (1 .. 3)
	{
		my ($grc, $gout) = move(20, undef, '--rollback-window', 0, '--pause-budget', 500, '--cutover-attempts', 8, '--cutover-retry', 1);
		$said .= $gout;
		push @held, $gout =~ /this try held the shard's clients (\d+) ms of its budget of 500 ms/g;
		last if @held || $grc == 0;
		move_released($_, 20) for $old, $new;
	}
	$readers->kill_kill;
	move_released($_, 20) for $old, $new;
	($rc, $out) = move(20);
	my ($done, $failed, $brc, $bout) = bench_stop($bench);
	my ($before, $worst) = (0, 0);
	for my $log (glob "$dir/pgbench20.*")
	{
		for (split /\n/, slurp_file($log))
		{
			# client, transaction, time (µs), script, end (s, µs), schedule lag (µs)
			my (undef, undef, $time, undef, $end_s, $end_us, $lag) = split / /;
			my $wait = ($time - ($lag // 0)) / 1000;
			$worst = $wait if $wait > $worst;
			$before = $wait if $wait > $before && $end_s + $end_us / 1e6 < $began;
		}
	}
	note "shard 20: tries that paused held their clients @held ms; the longest client wait $worst ms, before the move $before ms";
	like($said, qr/^\s+\(this try held the shard's clients \d+ ms of its budget of 500 ms, \d+ ms of it kept back for giving up: at its deadline its backend ended \d+, the entry resumed \d+, its locks gone \d+, its clients served \d+ ms\)$/m,
		"back-to-back readers: tries paused and were given up, each saying what it held its clients for and where the watchdog's time went: @held ms") or diag $said;
	is("$rc|$brc|$failed|" . rows_on($new, 20), "0|0|0|$done", "the readers gone, the move finished: 0 failed, $done rows on the new server")
	  or diag "$out\n$bout";
}

# Two PgBouncers in front of the fleet (for capacity, or a pair for
# availability), sharing the map file: the move pauses the shard's entry on
# both, then points and resumes it on both; pgbench through each, 0 failed.
{
	my $port2 = PostgreSQL::Test::Cluster::get_free_port();
	my $dir2  = PostgreSQL::Test::Utils::tempdir_short();
	my $ini2  = slurp_file("$dir/pgbouncer.ini");
	$ini2 =~ s/^listen_port = \d+$/listen_port = $port2/m;
	$ini2 =~ s/^unix_socket_dir = .*$/unix_socket_dir = $dir2/m;
	$ini2 =~ s/^logfile = .*$/logfile = $dir2\/pgbouncer.log/m;
	append_to_file("$dir2/pgbouncer.ini", $ini2);
	$second = IPC::Run::start([ $pgbouncer, "$dir2/pgbouncer.ini" ], '>', "$dir2/stdout", '2>', "$dir2/stderr");
	my $admin2 = "host=$dir2 port=$port2 dbname=pgbouncer user=$user";
	for (my $t = 0; !defined via($admin2, 'SHOW VERSION'); $t++)
	{
		die 'the second PgBouncer did not start: ' . slurp_file("$dir2/stderr") if $t > 100;
		sleep 0.1;
	}
	$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(18, 18, 'template')});
	append_to_file($map, 'shard18 = host=' . $old->host . ' port=' . $old->port . " dbname=app\n");
	via($_, 'RELOAD') for $admin, $admin2;
	my @b = (bench_start(18, 2), bench_start(18, 2, "host=$dir2 port=$port2 user=$user", 'b'));
	until_rows($old, 18, 0) or die 'pgbench on shard 18 wrote nothing';
	($rc, $out) = move(18, undef, '--rollback-window', 0, '--pgbouncer', $admin2);
	my $moved = rows_on($new, 18);
	until_rows($new, 18, $moved);
	my @stopped = map { [ bench_stop($_) ] } @b;
	is(join('|', $rc, map({ $_->[1] . '/' . $_->[2] } @stopped), map({ my $e = entry(18, $_); "$e->{port}:$e->{paused}" } $admin, $admin2),
			rows_on($new, 18) == $stopped[0][0] + $stopped[1][0] ? 'every row once' : 'rows differ'),
		join('|', 0, '0/0', '0/0', ($new->port . ':0') x 2, 'every row once'),
		'two PgBouncers: the entry paused, pointed and resumed on both; pgbench through each, 0 failed')
	  or diag "$out\n" . join("\n", map { $_->[3] } @stopped);
	$second->signal('INT');
	$second->finish;
	undef $second;
	# One of the two stopped: the next move stops before anything is made,
	# the entry on the other neither paused nor repointed.
	($rc, $out) = move(13, undef, '--rollback-window', 0, '--pgbouncer', $admin2);
	is(join('|', $rc, $out =~ /^insta-id: PgBouncer's console \(\Q$dir2\E:$port2\/pgbouncer\): connection to server on socket "\Q$dir2\E\/\.s\.PGSQL\.$port2" failed: /m ? 'console named' : $out,
			$old->safe_psql('app', 'SELECT count(*) FROM pg_publication'), @{ entry(13) }{qw(port paused)}),
		join('|', 1, 'console named', 0, $old->port, 0),
		'two PgBouncers, one stopped before the move: refused before anything is made, the other entry untouched');
}

# Rollback. Shard 13 moved with the default window (15 minutes) under
# pgbench: the old server keeps its copy, unregistered, fenced, following
# the new one; pgbench goes on through the entry, on the new server. Then
# `insta-id move --rollback`, under pgbench too, returns the shard with
# every write acknowledged on the new server: 0 failed, every row on the old
# server once, nothing of either direction's replication left. Once as is,
# once killed in the rollback's cutover (its locks held on the new server,
# the entry paused: the re-run resumes it, then rolls back), once killed
# after it committed (the shard fenced on the new server, the entry
# paused: the re-run finishes), each run again.
my $old_target = 'host=' . $old->host . ' port=' . $old->port . ' dbname=app';
# What the moves of shard 13 leave on a server: publications, subscriptions,
# slots, fence triggers, records, the schema unless it holds the shard.
sub left_of
{
	my ($node) = @_;
	return $node->safe_psql('app', q{SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_subscription)
	  + (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_trigger WHERE tgname = 'insta_id_move_fence')
	  + (SELECT count(*) FROM insta_id_admin.moves)
	  + (SELECT count(*) FROM pg_namespace WHERE nspname = 'insta13' AND NOT EXISTS (SELECT FROM insta_id_admin.shard_registry WHERE shard_id = 13))});
}
for my $kill (undef, 'back-blocked', 'rolled-back')
{
	my $before = rows_on($old, 13);
	my $b = bench_start(13, 4);
	until_rows($old, 13, $before) or die 'pgbench on shard 13 wrote nothing';
	($rc, $out) = move(13, undef, '--rollback-window', '15 min');
	my $at_cutover = rows_on($new, 13);
	# The old copy follows the new server's writes.
	my $follows = until_rows($new, 13, $at_cutover) && until_rows($old, 13, $at_cutover);
	my $kept = $old->safe_psql('app', q{SELECT step || '|' || (reserve_until > now() + interval '14 minutes')
	  || '|' || NOT EXISTS (SELECT FROM insta_id_admin.shard_registry WHERE shard_id = 13) FROM insta_id_admin.moves WHERE shard_id = 13});
	my ($frc, undef, $ferr) = $old->psql('app', q{INSERT INTO insta13.users (name) VALUES ('direct')});
	IPC::Run::run([ 'insta-id', 'status', '--server', $from, '--server', $to ], '>&', \my $status);
	my ($rrc, $rout) = move(13, undef, '--rollback-window', '15 min');
	is(join('|', $rc, $follows, $kept, $frc, $ferr =~ /shard 13 is not registered on this server/ ? 'fenced' : $ferr, $rrc, last_line($rout)),
		"0|1|reserved|true|true|3|fenced|0|== shard 13 is on the new server; the old server keeps its copy for a rollback until "
		  . ($rout =~ /until (\S+ \S+ UTC)/ ? $1 : 'a time') . ': nothing to do (--rollback returns the shard, --release drops the copy now)',
		'moved with a window: the old copy kept (unregistered, fenced, following the new server); a re-run in the window changes nothing')
	  or diag "$out\n$rout";
	like($status, qr/shard 13: leaving to \S+, step reserved .*kept for a rollback until[^\n]*; finished: the old copy is kept for a rollback until its window ends/,
		'insta-id status: the old copy kept, and until when; a finished move, not an interrupted one');
	my ($krc, $kout, $paused) = (0, '', 'not paused');
	if ($kill)
	{
		{
			local $ENV{INSTA_ID_MOVE_STOP_AFTER} = $kill;
			($krc, $kout) = move(13, $old_target, '--rollback');
		}
		move_released($_, 13) for $old, $new;
		$paused = entry(13)->{paused} ? 'paused' : 'not paused';
		if ($kill eq 'rolled-back')
		{
			# Only --rollback finishes it: the move's own command line
			# would point the entry at the server that dropped the shard.
			my ($prc, $pout) = move(13, undef, '--rollback-window', '15 min');
			is("$prc|" . last_line($pout),
				"1|insta-id: a rollback of shard 13 committed (the shard left the new server): finish it with --rollback, and with --pgbouncer-target naming the old server",
				'a rollback past its commit is not finished by a run of the move');
		}
	}
	($rc, $out) = move(13, $old_target, '--rollback');
	note 'rollback' . ($kill ? " (re-run after '$kill')" : '') . ': shard13 paused for ' . ($out =~ /shard13 paused for ([0-9.]+) s/ ? $1 : 'none') . ' s';
	my $back = rows_on($old, 13);
	until_rows($old, 13, $back);
	($done, $failed, $brc, $bout) = bench_stop($b);
	is(join('|', $krc, $paused, $rc, $brc, $failed, rows_on($old, 13) - $before, rows_on($new, 13), left_of($old), left_of($new)),
		join('|', $kill ? (137, 'paused') : (0, 'not paused'), 0, 0, 0, $done, -1, 0, 0),
		'rolled back under pgbench' . ($kill ? ", killed after '$kill' and run again" : '')
		  . ": 0 failed, its $done rows on the old server once, nothing of either replication left")
	  or diag "$kout\n$out\n$bout";
	is(join('|', @{ entry(13) }{qw(host port paused)}), $old->host . '|' . $old->port . '|0', "PgBouncer's entry names the old server again");
}
# A window that passes: a rollback after it is refused; the next run of the
# move drops the old copy and the replication back. The window is ended in
# its record, not waited out: a window of seconds can pass before the move
# itself finishes, on a busy machine, and the move then drops the copy at
# once (seen: no record left to wait on).
($rc, $out) = move(13, undef, '--rollback-window', '15 min');
$old->safe_psql('app', q{UPDATE insta_id_admin.moves SET reserve_until = clock_timestamp() - interval '1 second'
  WHERE shard_id = 13 AND side = 'leaving' AND step = 'reserved'});
my ($lrc, $lout) = move(13, $old_target, '--rollback');
my ($erc, $eout) = move(13, undef, '--rollback-window', '15 min');
is(join('|', $rc, $lrc, last_line($lout) =~ s/closed at .* UTC/closed at T/r, $erc, left_of($old), left_of($new), rows_on($new, 13) > 0 ? 'on new' : 'lost'),
	"0|1|insta-id: the rollback window of shard 13's move closed at T: the shard stays on the new server (--release drops the old copy)|0|0|0|on new",
	'after its window: the rollback refused; the next run dropped the old copy and the replication back, nothing left on either server')
  or diag "$out\n$lout\n$eout";
# The shard returns to the old server by a move of its own (the copy there
# is gone). Then: a window out of range is refused before anything is
# made; a table made on both servers in the window, whose rows written on
# the new server the subscription back does not carry, makes the rollback
# refuse (nothing changed, the entry resumed on the new server); --release
# drops the copy and the replication back at once, the table's row on the
# new server.
my @back = ('insta-id', 'move', 13, '--from', $to, '--to', $from, '--copy-timeout', 120, '--rollback-window', 0,
	'--pgbouncer', $admin, '--pgbouncer-map', $map, '--pgbouncer-target', $old_target);
IPC::Run::run(\@back, '>&', \my $bkout);
is(join('|', $? >> 8, rows_on($old, 13) > 0 ? 'on old' : 'lost', left_of($old), left_of($new)), '0|on old|0|0',
	'the shard moved back to the old server by a move of its own')
  or diag $bkout;
my ($wrc, $wout) = move(13, undef, '--rollback-window', '8 days');
my $made = $new->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta13'});
($rc, $out) = move(13, undef, '--rollback-window', '15 min');
$_->safe_psql('app', 'CREATE TABLE insta13.late (id bigint PRIMARY KEY)') for $old, $new;
$new->safe_psql('app', 'INSERT INTO insta13.late VALUES (1)');
my ($trc, $tout) = move(13, $old_target, '--rollback');
is(join('|', $wrc, last_line($wout), $made, $rc, $trc, last_line($tout), rows_on($new, 13) > 0 ? 'on new' : 'lost', entry(13)->{paused}, entry(13)->{port}),
	join('|', 2, 'insta-id: --rollback-window must be 0 or between 1 second and 7 days, not 8 days', 0, 0, 1,
		'insta-id: tables of shard 13 that the subscription back does not carry (made after the move): late; nothing was changed, the shard stays on the new server',
		'on new', 0, $new->port),
	'refused: a window of 8 days, nothing made; a rollback that would lose the rows of a table made in the window')
  or diag "$out\n$tout";
# The subscription back dropped by hand: a rollback says how to make it
# again; --release needs none.
$old->safe_psql('app', 'ALTER SUBSCRIPTION insta_back_13 DISABLE; ALTER SUBSCRIPTION insta_back_13 SET (slot_name = NONE); DROP SUBSCRIPTION insta_back_13');
my ($nrc, $nout) = move(13, $old_target, '--rollback');
my ($src, $sout) = move(13, undef, '--release');
is(join('|', $nrc, last_line($nout), $src, left_of($old), left_of($new), $new->safe_psql('app', 'SELECT count(*) FROM insta13.late')),
	"1|insta-id: the old server's copy of shard 13 does not follow the new server (no subscription insta_back_13 there): run the move once without --rollback, which subscribes it again, then roll back|0|0|0|1",
	'--release dropped the old copy and the replication back at once (its subscription dropped by hand before), nothing left on either server')
  or diag "$nout\n$sout";
# A release killed between the two servers: shard 13 moved back to the old
# server with a window (its copy kept on the new one), then --release
# killed once the copy is dropped: the slot and publication back are left
# on the old server, with its record at 'reserved'. The rebalance below
# finishes that first.
my @back_kept = ('insta-id', 'move', 13, '--from', $to, '--to', $from, '--copy-timeout', 120,
	'--pgbouncer', $admin, '--pgbouncer-map', $map, '--pgbouncer-target', $old_target);
IPC::Run::run(\@back_kept, '>&', \my $bkept);
my $kept_rc = $? >> 8;
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'released-old';
	IPC::Run::run([ @back_kept, '--release' ], '>&', \my $rkill);
}
move_released($_, 13) for $old, $new;
is(join('|', $kept_rc, $old->safe_psql('app', q{SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'insta_back_13'}),
		$old->safe_psql('app', 'SELECT step FROM insta_id_admin.moves WHERE shard_id = 13'),
		$new->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta13'})),
	'0|1|reserved|0', 'a release killed half-way: the copy dropped, the slot back and the record left')
  or diag $bkept;
# insta-id rebalance: the old server holds 2 of the 14 shards; the plan
# moves some back, through PgBouncer. Killed during its first move, then run
# again: it finishes that move first, plans again, and goes on.
append_to_file($map, 'shard14 = host=' . $old->host . ' port=' . $old->port . " dbname=app\n");
via($admin, 'RELOAD');
# How many rows pgbench wrote into shard 13 depends on the machine's speed
# (thousands in a slow rollback, which made its two shards weigh as much as
# the other twelve and the plan empty): emptied, the old server is the light
# side of the plan on every machine.
$old->safe_psql('app', 'TRUNCATE insta13.users CASCADE');
my @rebalance = ('insta-id', 'rebalance', '--server', $from, '--server', $to, '--pgbouncer', $admin, '--pgbouncer-map', $map, '--copy-timeout', 120);
{
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = 'copy';
	IPC::Run::run(\@rebalance, '>&', \$out);
}
my $krc = $? & 127 ? 128 + ($? & 127) : $? >> 8;
my ($first) = $out =~ /^== rebalance: move 1 of \d+: shard (\d+) /m;
my $release_finished = $out =~ /^== rebalance: the interrupted move of shard 13 \(/m ? 'finished first' : 'not finished';
move_released($_, $first // 0) for $old, $new;
note $out;
IPC::Run::run(\@rebalance, '>&', \$out);
$rc = $? >> 8;
note $out;
my %holder;
for my $n ($old, $new)
{
	$holder{$_} = $n for split /\n/, $n->safe_psql('app', 'SELECT shard_id FROM insta_id.shards() ORDER BY 1');
}
my @misrouted = grep { my $e = entry($_); !$holder{$_} || ($e->{host} // '') ne $holder{$_}->host || ($e->{port} // '') ne $holder{$_}->port } 1 .. 14, 16 .. 20;
is(join('|', $krc, $out =~ /^== rebalance: the interrupted move of shard (\d+) \(/m ? $1 : 'none', $rc, scalar(keys %holder), "@misrouted"),
	join('|', 137, $first // 'a first move', 0, 19, ''),
	'insta-id rebalance, killed in its first move and run again: that move finished first, every shard on one server, its PgBouncer entry pointing there');
like($out, qr/^== rebalanced: \d+ moves, /m, 'and it said it was done');
is("$release_finished|" . left_of($old) . '|' . left_of($new), 'finished first|0|0',
	'the release killed half-way was finished by the rebalance first; nothing of any move is left on either server');

# PgBouncer's delay after a failed login. A PAUSE closes the server
# connections PgBouncer is still logging in, and PgBouncer takes that for a
# failed login: for server_login_retry (15 s by default) it opens no server
# connection for that pool, its queued clients waiting (make bench saw it
# in one move of ten). A login refused by the server leaves the pool in the
# same state, and that one a test can make on demand: the role newcomer
# exists on the new server only. Its refused login, then a transaction open
# through shard 15's entry holds the move's PAUSE while newcomer's query
# queues behind it. server_login_retry is an hour (in pgbouncer.ini: a
# RELOAD, as every move does, sets back what SET changed), so only the
# move's RESUME can have that query answered within the minute it is given
# (without it, 15 s after the RESUME in this test's first run).
$old->safe_psql('app', q{SET client_min_messages = warning; SELECT insta_id.create_shards(15, 15, 'template')});
append_to_file($map, 'shard15 = host=' . $old->host . ' port=' . $old->port . " dbname=app\n");
append_to_file("$dir/userlist.txt", qq{"newcomer" ""\n});
$new->safe_psql('app', 'CREATE ROLE newcomer LOGIN');
append_to_file("$dir/pgbouncer.ini", "server_login_retry = 3600\n");
via($admin, 'RELOAD');
my $newcomer = "host=$dir port=$port user=newcomer dbname=shard15";
my $refused_first = defined(via($newcomer, 'SELECT 1')) ? 'answered' : 'refused';
my ($hin, $hout) = ("BEGIN;\nSELECT 'open';\n", '');
my $holder = IPC::Run::start([ 'psql', '-XqtA', '-d', "$through dbname=shard15" ], '<', \$hin, '>', \$hout, IPC::Run::timeout(120));
$holder->pump until $hout =~ /open/;
my $mover = IPC::Run::start(
	[ 'insta-id', 'move', 15, '--from', $from, '--to', $to, '--copy-timeout', 120, '--rollback-window', 0, '--pause-budget', 60000,
	  '--pgbouncer', $admin, '--pgbouncer-map', $map, '--pgbouncer-target', 'host=' . $new->host . ' port=' . $new->port . ' dbname=app' ],
	'>&', "$dir/move-newcomer.log");
# Until the entry is paused, then until newcomer's query waits in its pool.
sub until_true
{
	my ($what, $cond) = @_;
	for (my $t = 0; $t < 1200; $t++)
	{
		return if $cond->();
		sleep 0.05;
	}
	die "waited a minute for $what";
}
until_true('the PAUSE of shard15', sub { (entry(15)->{paused} // '') eq '1' });
my ($qout, $qerr) = ('', '');
my $queued = IPC::Run::start([ 'psql', '-XqtA', '-d', $newcomer, '-c', 'SELECT 42' ], '>', \$qout, '2>', \$qerr, IPC::Run::timeout(60));
until_true("newcomer's query queued", sub { (via($admin, 'SHOW POOLS', '-XtA') // '') =~ /^shard15\|newcomer\|\d+\|[1-9]/m });
$hin .= "COMMIT;\n";
$holder->finish;
# The queued query first: its minute runs from its start.
my $answer = eval { $queued->finish; $qout =~ s/\s+$//r } // do { $queued->kill_kill; 'still waiting after a minute' };
$mover->finish;
my $mrc = $mover->result(0);
my ($retry) = (via($admin, 'SHOW CONFIG', '-XtA') // '') =~ /^server_login_retry\|([^|]*)\|/m;
is(join('|', $refused_first, $mrc, $answer, via($newcomer, 'SELECT 7') // 'refused', $retry // 'none'), 'refused|0|42|7|3600',
	"a pool PgBouncer held back after a failed login: its query queued at the cutover answered on the new server once the move resumed the entry, and the next at once; server_login_retry as it was")
  or diag slurp_file("$dir/move-newcomer.log") . "\n$qerr";

# The moves' and checks' probes of the console (is its user an admin?)
# are SHOWs: none left an ERROR in PgBouncer's log, which trips alerts.
my @errors = grep { /\bERROR\b/ && !/\bC-/ } split /\n/, slurp_file("$dir/pgbouncer.log");
is(join("\n", grep { /no such database|admin access needed/ } @errors), '',
	"no move or check left an error on PgBouncer's console in its log");

$bouncer->signal('INT');
$bouncer->finish;
undef $bouncer;
$new->stop;
$old->stop;
done_testing();
