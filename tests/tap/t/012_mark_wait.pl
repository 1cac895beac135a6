# A next_id that must wait for the high-water mark's lock can be ended like
# any statement: by statement_timeout and pg_cancel_backend (57014), by
# pg_terminate_backend (57P01), and then returns no ID. The lock is:
# - 0.9.0: an ordinary lock of the mark's sequence (a writer's
#   ShareUpdateExclusiveLock; here COMMENT ON holds one);
# - a database whose SQL predates 0.9.0: the flock of the data directory's
#   file insta_id.mark (here this test holds it), which next_id tries again
#   on its latch every millisecond instead of blocking in flock.
# Either way the wait shows in pg_stat_activity, and once the lock is free
# the next ID comes at once.
use strict;
use warnings;
use Fcntl qw(:flock);
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = insta_node('mark_wait', preload => 1);
for my $db ([ 'w', '' ], [ 'f', " VERSION '0.8.0'" ])
{
	$node->safe_psql('postgres', "CREATE DATABASE $db->[0]");
	$node->safe_psql($db->[0], "SET client_min_messages = error; CREATE EXTENSION insta_id$db->[1]; CREATE SEQUENCE s; SELECT insta_id.next_id(1, 's')");
}

# A psql session minting one ID in the background (application_name
# minter), with what it printed; one that never ends fails the test after
# the framework's timeout (a blocking flock heard no cancel).
sub start_mint
{
	my ($db, $sql) = @_;
	local %ENV = $node->_get_env(PGAPPNAME => 'minter');
	my %m = (out => '', err => '');
	$m{run} = IPC::Run::start(
		[ 'psql', '-X', '-q', '-A', '-t', '-v', 'VERBOSITY=verbose', '-v', 'SHOW_CONTEXT=never', '-d', $node->connstr($db), '-c', $sql ],
		'>', \$m{out}, '2>', \$m{err}, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return \%m;
}

sub waits
{
	my ($name, $db, $lock, $wait) = @_;
	# The mark is reserved 200 ms ahead: once the clock is past it, the next
	# ID needs a new one, hence the lock.
	$node->poll_query_until($db, 'SELECT insta_id.high_water_mark() < clock_timestamp()')
	  or die 'the mark stayed ahead of the clock';
	my $release = $lock->();

	my $m = start_mint($db, "SET statement_timeout = '300ms'; SELECT insta_id.next_id(1, 's')");
	$m->{run}->finish;
	like($m->{err}, qr/ERROR:  57014: canceling statement due to statement timeout/, "$name: statement_timeout ends the wait (57014)");
	is($m->{out}, '', "$name: ... and no ID");

	for my $end ([ 'pg_cancel_backend', qr/ERROR:  57014: canceling statement due to user request/, '57014' ],
		[ 'pg_terminate_backend', qr/FATAL:  57P01: terminating connection due to administrator command/, '57P01' ])
	{
		my ($how, $error, $state) = @$end;
		$m = start_mint($db, "SELECT insta_id.next_id(1, 's')");
		$node->poll_query_until('postgres', "SELECT wait_event_type || ' ' || wait_event FROM pg_stat_activity WHERE application_name = 'minter'", $wait)
		  or die "the minter never waited on $wait";
		pass("$name: the wait shows in pg_stat_activity as $wait");
		$node->safe_psql('postgres', "SELECT $how(pid) FROM pg_stat_activity WHERE application_name = 'minter'");
		$m->{run}->finish;
		like($m->{err}, $error, "$name: $how ends the wait ($state)");
		is($m->{out}, '', "$name: ... and no ID");
	}

	$release->();
	is($node->safe_psql($db, "SELECT insta_id.next_id(1, 's') > 0, insta_id.high_water_mark() > clock_timestamp()"),
		't|t', "$name: with the lock free, the next ID comes, under a new mark");
}

waits('the mark in the WAL', 'w',
	sub {
		my $holder = $node->background_psql('w');
		$holder->query_safe("BEGIN; COMMENT ON SEQUENCE insta_id_mark.high_water IS 'held by the test'");
		return sub { $holder->query_safe('ROLLBACK'); $holder->quit };
	},
	'Lock relation');

waits("0.8.0's SQL, the mark in a file", 'f',
	sub {
		my $file = $node->data_dir . '/insta_id.mark';
		open(my $fh, '<', $file) or die "open $file: $!";
		flock($fh, LOCK_EX) or die "flock $file: $!";
		return sub { close $fh };
	},
	'Extension Extension');

# A wait for the clock to pass IDs already issued (here the mark raised
# ahead, with insta_id.max_lead 0: as after a failover to a server whose
# clock is behind) is visible where DBAs look: a line in the server log at
# its start and at its end with how long, the session's wait event in
# pg_stat_activity, the wait counted in guard_stats() once done. Past
# insta_id.max_clock_wait the call raises 55000 instead of waiting. (The
# raise and the call in one statement: no scheduling between them makes
# the wait shorter than a second.)
{
	my $raise_and_mint = sub {
		my ($ahead) = @_;
		return "SET insta_id.max_lead = 0; WITH r AS MATERIALIZED (SELECT insta_id.raise_high_water_mark(clock_timestamp() + interval '$ahead'))
		        SELECT insta_id.next_id(1, 's') > 0 FROM r";
	};
	my $stats = q{SELECT waits || ' ' || wait_time FROM insta_id.guard_stats() WHERE sequence = 's'::regclass};
	my ($waits, $wait_time) = split / /, $node->safe_psql('w', $stats);
	my $from = -s $node->logfile;
	my $m = start_mint('w', $raise_and_mint->('3 s'));
	$m->{run}->finish;
	like(slurp_file($node->logfile, $from),
		qr/LOG:  insta_id: next_id of sequence "s" waits \d+ ms for the clock to pass IDs already issued \(millisecond \d+ since 1970-01-01 UTC\)\n.*LOG:  insta_id: next_id of sequence "s" waited \d+ ms for the clock\n/s,
		'a wait for the clock: a line in the server log at its start and its end, with how long')
	  or diag slurp_file($node->logfile, $from);
	is($m->{out} =~ s/\s+$//r, 't', '... and then the ID');
	my ($waits_after, $wait_time_after) = split / /, $node->safe_psql('w', $stats);
	ok($waits_after > $waits && $wait_time_after - $wait_time >= 1000,
		"... counted in guard_stats once done (waits $waits -> $waits_after, wait_time $wait_time -> $wait_time_after ms)");
	# A long one: seen in pg_stat_activity, then cancelled.
	$m = start_mint('w', "SET insta_id.max_clock_wait = '2min'; " . $raise_and_mint->('50 s'));
	$node->poll_query_until('postgres', q{SELECT wait_event_type || ' ' || wait_event FROM pg_stat_activity WHERE application_name = 'minter'},
		'Extension Extension') or die 'the minter never waited';
	$node->safe_psql('postgres', q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'minter'});
	$m->{run}->finish;
	pass('a long wait for the clock shows in pg_stat_activity (Extension Extension) while it lasts');
	my ($ret, $out, $err) = $node->psql('w', 'SET insta_id.max_lead = 0; SET insta_id.max_clock_wait = 100; SELECT insta_id.next_id(1, \'s\')',
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/^psql:<stdin>:1: ERROR:  55000: next_id would wait \d+ ms for the clock, longer than insta_id.max_clock_wait \(100 ms\)\nDETAIL:  Sequence "s" needs millisecond \d+ since 1970-01-01 UTC: this server's clock is behind IDs this database already issued, by more than insta_id.max_lead\.\nHINT:  .*docs\/ha\.md/m,
		'past insta_id.max_clock_wait: 55000, saying why and what to do');
}

done_testing();
