# What insta_id's TAP tests add to PostgreSQL's own TAP framework
# (PostgreSQL::Test::Cluster, from Debian's postgresql-server-dev-15, driving
# any supported version through install_path): a node of the version under
# test with insta_id (preloaded or not), a clock moved under a running
# server with libfaketime, SQLSTATEs read from psql, and pgbench in the
# background.
package InstaIdTest;

use strict;
use warnings;
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(sleep);

use Exporter 'import';
our @EXPORT = qw(insta_node insta_standby insta_start clock_offset sqlstate pgbench_start pgbench_wait pgbench_stop same_text psql_file error_of bg_until end_session move_released);

# The installation of $ENV{PG_CONFIG} (tests/tap.sh sets it).
sub install_path
{
	my $pg_config = shift // $ENV{PG_CONFIG};
	return dirname(dirname($pg_config)) if $pg_config =~ m{/bin/pg_config$};
	die "$pg_config is not .../bin/pg_config";
}

# insta_node(NAME, preload => 0|1, faketime => 0|1|'-5', conf => 'lines',
# pg_config => PATH, start => 0|1, streaming => 0|1, archiving => 0|1):
# initialised (data checksums on, 18's default, which pg_upgrade needs on
# both sides) and, unless start => 0, started; CREATE EXTENSION left to the
# test. faketime: a clock libfaketime moves (an offset in seconds to start
# with). pg_config: another installation than the one under test (the old
# side of a pg_upgrade). streaming, archiving: a primary for standbys, with
# a WAL archive.
sub insta_node
{
	my ($name, %o) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name, install_path => install_path($o{pg_config}));
	$node->init(extra => [ '--data-checksums' ], allows_streaming => $o{streaming} // 0,
		has_archiving => $o{archiving} // 0);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = '" . ($o{preload} ? 'insta_id' : '') . "'\n"
		  . "log_statement = none\n" . ($o{conf} // ''));
	_fake_clock($node, $o{faketime}) if $o{faketime};
	insta_start($node) if $o{start} // 1;
	return $node;
}

# libfaketime reads the offset in seconds (+0, -3) from this file, re-read
# at most once per real second; monotonic time stays real.
sub _fake_clock
{
	my ($node, $offset) = @_;
	$node->{insta_clock} = $node->basedir . '/clock';
	_write_clock($node, $offset =~ /^[-+]/ ? $offset : '+0');
}

# insta_standby(PRIMARY, NAME, BACKUP, faketime => OFFSET, standby => 0|1,
# conf => 'lines'): a node made from PRIMARY's backup BACKUP, streaming from
# it (standby => 1, the default) or recovering from its WAL archive only
# (standby => 0: point-in-time recovery, conf naming the target); its clock
# faked from the start. Not started.
sub insta_standby
{
	my ($primary, $name, $backup, %o) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name, install_path => install_path());
	my $streaming = $o{standby} // 1;
	$node->init_from_backup($primary, $backup,
		$streaming ? (has_streaming => 1) : (has_restoring => 1, standby => 0));
	$node->append_conf('postgresql.conf', $o{conf}) if $o{conf};
	_fake_clock($node, $o{faketime}) if $o{faketime};
	return $node;
}

# Start or restart under the node's clock, if it has one: only the server is
# faked, never psql or pgbench.
sub insta_start
{
	my ($node, $how) = @_;
	local %ENV = %ENV;
	my @preload;
	if (my $clock = $node->{insta_clock})
	{
		my ($lib) = grep { -e } map { glob } '/usr/lib/*/faketime/libfaketime.so.1', '/usr/lib/faketime/libfaketime.so.1';
		BAIL_OUT('libfaketime is missing: scripts/dev/setup.sh faults') unless $lib;
		push @preload, $lib;
		$ENV{FAKETIME_TIMESTAMP_FILE}  = $clock;
		$ENV{FAKETIME_CACHE_DURATION}  = 0;
		$ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
		$ENV{NO_FAKE_STAT}             = 1;
	}
	# A fault shim (t/011_fsync.pl) and the file that arms it.
	if (my $shim = $node->{insta_shim})
	{
		push @preload, $shim->{lib};
		$ENV{INSTA_FAIL_SYNC} = $shim->{trigger};
	}
	$ENV{LD_PRELOAD} = join ':', @preload if @preload;
	($how // 'start') eq 'restart' ? $node->restart : $node->start;
}

sub _write_clock
{
	my ($node, $offset) = @_;
	my $f = $node->{insta_clock};
	open my $fh, '>', "$f.new" or die $!;
	print $fh "$offset\n";
	close $fh;
	rename "$f.new", $f or die $!;    # in one rename: never read half-written
}

# clock_offset(NODE, '+0' | '-3'): moves the clock of every process of the
# server, running and new, and waits until each has read it (libfaketime
# re-reads the file at most once per real second).
sub clock_offset
{
	my ($node, $offset) = @_;
	_write_clock($node, $offset);
	sleep 1.2;
}

# sqlstate(NODE, DB, SQL): the SQLSTATE SQL fails with, or '' if it succeeds.
sub sqlstate
{
	my ($node, $db, $sql) = @_;
	my ($stdout, $stderr);
	$node->psql($db, $sql, stdout => \$stdout, stderr => \$stderr,
		extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
	return $stderr =~ /^(?:psql:[^\n]*?)?ERROR:  ([0-9A-Z]{5})$/m ? $1 : '';
}

# pgbench_start(NODE, DB, SCRIPT_SQL, OPTIONS...): pgbench (-n) on the node
# in the background, its one-line script in a file of its own; the handle is
# for pgbench_wait or pgbench_stop.
my $scripts = 0;
sub pgbench_start
{
	my ($node, $db, $sql, @options) = @_;
	my $file = $node->basedir . '/pgbench_' . ++$scripts . '.sql';
	PostgreSQL::Test::Utils::append_to_file($file, "$sql\n");
	local %ENV = $node->_get_env(PGAPPNAME => 'pgbench');    # the framework names every client after the test
	my %b = (out => '', err => '');
	$b{run} = IPC::Run::start([ 'pgbench', '-n', @options, '-f', $file, $db ], '>', \$b{out}, '2>', \$b{err});
	return \%b;
}

# pgbench_wait(HANDLE[, NAME]): with a NAME, a test that pgbench exited 0
# (its output on failure); without, whether it did (a run whose server was
# killed under it).
sub pgbench_wait
{
	my ($b, $name) = @_;
	my $ok = $b->{run}->finish;
	return $ok unless defined $name;
	ok($ok, $name) or diag("$b->{out}$b->{err}");
	return $ok;
}

# pgbench_stop(HANDLE): ends a pgbench run without a time limit.
sub pgbench_stop
{
	my ($b) = @_;
	$b->{run}->signal('TERM');
	$b->{run}->finish;
}

# move_released(NODE, SHARD...): until no session holds those shards' move
# lock on NODE's database app (a killed mover's backend ends once it sees
# its client gone: not at once on a busy machine; a re-run before then is
# refused as a second mover).
sub move_released
{
	my ($node, @shards) = @_;
	for my $shard (@shards)
	{
		$node->poll_query_until('app', "SELECT insta_id._lock_holder(insta_id._move_lock_key(), $shard) IS NULL")
		  or die "the move lock of shard $shard is still held on " . $node->name;
	}
	return;
}

# same_text(GOT, EXPECTED, NAME): is() for long texts, a diff on failure.
sub same_text
{
	my ($got, $expected, $name) = @_;
	return pass($name) if $got eq $expected;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	PostgreSQL::Test::Utils::append_to_file("$dir/expected", "$expected\n");
	PostgreSQL::Test::Utils::append_to_file("$dir/got", "$got\n");
	my ($diff) = PostgreSQL::Test::Utils::run_command([ 'diff', '-u', "$dir/expected", "$dir/got" ]);
	fail($name);
	my @lines = split /\n/, $diff;
	diag(join "\n", @lines[ 0 .. ($#lines < 61 ? $#lines : 61) ]);
	return 0;
}

# psql_file(NODE, DB, FILE...): runs SQL files (fixtures) with psql -f,
# stopping at the first error.
sub psql_file
{
	my ($node, $db, @files) = @_;
	local %ENV = $node->_get_env();
	my ($out, $err);
	IPC::Run::run([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db), map { ('-f', $_) } @files ],
		'>', \$out, '2>', \$err)
	  or BAIL_OUT("psql -f @files: $err");
}

# error_of(NODE, DB, SQL): what SQL printed on stderr, errors with their
# SQLSTATE ("ERROR:  55P03: ..."), '' if it printed nothing.
sub error_of
{
	my ($node, $db, $sql) = @_;
	my ($stdout, $stderr);
	$node->psql($db, $sql, stdout => \$stdout, stderr => \$stderr,
		extra_params => [ '-v', 'VERBOSITY=verbose', '-v', 'SHOW_CONTEXT=never' ]);
	$stderr =~ s/^psql:[^\n]*?: //mg;
	$stderr =~ s/^LOCATION: .*\n?//mg;
	return $stderr;
}

# bg_until(BACKGROUND_PSQL, 'stdout' | 'stderr', REGEX): waits until what a
# background_psql session printed matches (a NOTICE of a running CALL, an
# \echo after it); dies after the framework's timeout.
sub bg_until
{
	my ($bg, $stream, $re) = @_;
	$bg->{timeout}->start;
	PostgreSQL::Test::Utils::pump_until($bg->{run}, $bg->{timeout}, \$bg->{$stream}, $re)
	  or die "timed out waiting for $re on $stream; got: $bg->{$stream}";
	return $bg->{$stream};
}

# end_session(SESSION): ends a background_psql (or interactive_psql) session
# whatever became of it or of its server (up, restarting after a crash,
# stopped): psql idle, in a query, or already exited with its connection
# lost. Not ->quit: its \q, written to a psql that has exited, dies with
# "ack Broken pipe" (IPC::Run; the framework ignores SIGPIPE), and whether
# psql has exited yet is a race. Here psql's input is closed instead, which
# writes nothing (psql -f - ends at end of input); a pty is never closed, so
# an interactive session gets \q. A psql that has not ended within the
# framework's timeout, or whose \q failed, is killed and reaped. Returns
# psql's exit status (2: it had lost its connection).
sub end_session
{
	my ($s) = @_;
	my $run = $s->{run};
	$s->{stdin} = %{ $run->{PTYS} || {} } ? "\\q\n" : '';    # (what was not sent yet never is)
	$s->{timeout}->start;    # the framework's timeout from now, not from the last query
	eval { $run->finish; 1 } or do
	{
		diag("psql did not end: $@");
		$run->kill_kill;
	};
	return $run->result(0);
}

1;
