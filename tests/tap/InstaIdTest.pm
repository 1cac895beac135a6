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
our @EXPORT = qw(insta_node insta_standby insta_start clock_offset sqlstate pgbench_start pgbench_wait pgbench_stop same_text psql_file error_of bg_until end_session move_released
  faketime_lib write_clock kill_tree daemon_start daemons_stop failover_table failover_insert failover_writer_start failover_writer_rows failover_writer_stop acked_from psql_at acked_checks pump_running);

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
		push @preload, faketime_lib();
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

# The path of libfaketime (Debian's package).
sub faketime_lib
{
	my ($lib) = grep { -e } map { glob } '/usr/lib/*/faketime/libfaketime.so.1', '/usr/lib/faketime/libfaketime.so.1';
	BAIL_OUT('libfaketime is missing: scripts/dev/setup.sh faults') unless $lib;
	return $lib;
}

sub _write_clock
{
	my ($node, $offset) = @_;
	write_clock($node->{insta_clock}, $offset);
}

# write_clock(FILE, OFFSET): libfaketime's clock file (an offset in seconds,
# +0 or -3), for a server the framework did not start (a failover
# manager's); its processes read it again at most once a real second.
sub write_clock
{
	my ($f, $offset) = @_;
	$offset = sprintf('%+d', $offset) unless $offset =~ /^[-+]/;
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

# kill_tree(PID...): SIGKILL to the processes and every process under them,
# at once: a node lost. (kill -9 of a postmaster alone left, on a busy
# machine, a backend it had just forked, mid-connection, alive after it and
# attached to its shared memory, which kept Patroni from restarting the
# node for good.)
sub kill_tree
{
	my @pids = @_;
	for (my $i = 0; $i < @pids; $i++)
	{
		my $f = "/proc/$pids[$i]/task/$pids[$i]/children";
		push @pids, split ' ', PostgreSQL::Test::Utils::slurp_file($f) if -e $f;
	}
	kill 'KILL', @pids;
	return;
}

# daemon_start(LOG, {ENV}, COMMAND...): a server of another project (etcd, a
# failover manager) in the background, its output appended to LOG; for
# daemons_stop. Each leads a process group of its own, as under a shell or
# systemd: pg_autoctl, when its services are slow to stop, signals its
# whole process group, taking itself for the leader; in the test's group
# that signal ended the test itself (prove killed by SIGTERM at the END
# block's stop, every test passed, on a busy machine).
sub daemon_start
{
	my ($log, $env, @cmd) = @_;
	local %ENV = (%ENV, %$env);
	return IPC::Run::start(\@cmd, '<', \undef, '>>', $log, '2>&1', init => sub { setpgrp(0, 0) or die "setpgrp: $!" });
}

# pump_running(HARNESS...): reads what each harness still running has
# written. One may end between IPC::Run's pumpable and its pump_nb, which
# then dies ("process ended prematurely"): an end, not an error, here (a
# busy machine met it when a writer stopped as asked).
sub pump_running
{
	eval { $_->pump_nb } for grep { $_->pumpable } @_;
	return;
}

# daemons_stop(PG_CTL, [DAEMON...], [DATA_DIR...]): ends every daemon however
# the test went: SIGTERM to all (a failover manager stops its PostgreSQL),
# up to 30 s for them to end, then SIGKILL; then any server still running
# in the DATA_DIRs (its manager killed) is stopped at once. For an END block.
sub daemons_stop
{
	my ($pg_ctl, $daemons, $data_dirs) = @_;
	my @running = grep { $_->pumpable } @$daemons;
	$_->signal('TERM') for @running;
	my $until = time + 30;
	while ((@running = grep { $_->pumpable } @running) && time <= $until)
	{
		pump_running(@running);
		sleep 0.2;
	}
	for my $d (@$daemons)
	{
		$d->kill_kill if $d->pumpable;
		eval { $d->finish };
	}
	for my $dir (grep { -e "$_/postmaster.pid" } @$data_dirs)
	{
		IPC::Run::run([ $pg_ctl, '-D', $dir, '-m', 'immediate', 'stop' ], '>', \my $out, '2>&1');
	}
	return;
}

# The table of the failover tests and their writers' INSERT: each ID with
# the port and timeline of the server that made it (a node that leads
# twice, on two timelines, is two leaders) and that server's clock. A new
# primary's clock there is far behind (more than any failover takes, on a
# busy machine too): its writers may wait for it up to a minute.
sub failover_table
{
	return q{CREATE EXTENSION insta_id;
		DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET insta_id.max_clock_wait = %L', current_database(), '60s'); END$$;
		CREATE SEQUENCE s;
		CREATE TABLE ids (id bigint NOT NULL, port int NOT NULL, timeline int NOT NULL,
		                  at timestamptz NOT NULL DEFAULT clock_timestamp())};
}

sub failover_insert
{
	# (the timeline the server writes WAL on: the first 8 hex digits of
	# its current WAL file's name)
	return q{INSERT INTO ids (id, port, timeline)
		SELECT insta_id.next_id(1, 's'), inet_server_port(),
		       ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int
		FROM generate_series(1, 100) RETURNING id, port};
}

my @writers;    # (every failover_writer_start's, for the END below)

# failover_writer_start(CONNINFO, SQL, FILE): a client in the background that
# follows the primary through a failover, as applications do: psql runs SQL
# (an INSERT ... RETURNING) on CONNINFO (several hosts,
# target_session_attrs=read-write) again and again, a new connection each
# time, until failover_writer_stop. What a run returned, once psql exited 0 (its
# COMMIT acknowledged: psql prints a result only once the server said the
# command completed, which is after the commit), goes to FILE with the
# client's time at the end of each line; a run that failed (no primary,
# the connection lost) is tried again 50 ms later, its errors in FILE.err.
sub failover_writer_start
{
	my ($conninfo, $sql, $file) = @_;
	my $loop = q{
		while [ ! -e "$4" ]; do
		  if rows=$(psql "$1" -qAtX -v ON_ERROR_STOP=1 -c "$2" 2>>"$3.err"); then
		    [ -z "$rows" ] || printf '%s\n' "$rows" | sed "s/\$/|$(date +%s.%N)/" >>"$3"
		  else
		    sleep 0.05
		  fi
		done};
	my %w = (file => $file, stop => "$file.stop");
	$w{run} = IPC::Run::start([ 'bash', '-c', $loop, 'writer', $conninfo, $sql, $file, $w{stop} ]);
	push @writers, \%w;
	return \%w;
}

# Every writer started, stopped however the test ends (a BAIL_OUT, a die):
# IPC::Run does not end a harness's processes when it goes, and a writer's
# loop would run on, its stop file gone with the test's directory.
END
{
	my $status = $?;
	for my $w (grep { $_->{run}->pumpable } @writers)
	{
		$w->{run}->kill_kill;
		eval { $w->{run}->finish };
	}
	$? = $status;
}

# failover_writer_rows(WRITER): the lines the writer has written so far, split on |.
sub failover_writer_rows
{
	my ($w) = @_;
	open my $fh, '<', $w->{file} or return ();
	my @rows = map { chomp; [ split /\|/ ] } <$fh>;
	return @rows;
}

# acked_from([WRITER...], PORT, N, WHAT[, SINCE]): waits until the writers
# have N IDs acknowledged from the server on PORT (WHAT names it), since
# the time SINCE if given, at most 2 minutes; returns the client's time of
# the first.
sub acked_from
{
	my ($writers, $port, $n, $what, $since) = @_;
	my $until = time + 120;
	while (1)
	{
		my @rows = grep { $_->[1] == $port && $_->[2] >= ($since // 0) } map { failover_writer_rows($_) } @$writers;
		if (@rows >= $n)
		{
			my ($first) = sort { $a <=> $b } map { $_->[2] } @rows;
			return $first;
		}
		BAIL_OUT("never $n IDs acknowledged from $what") if time > $until;
		pump_running(map { $_->{run} } @$writers);
		sleep 0.1;
	}
}

# failover_writer_stop(WRITER): ends the writer after its current run; one whose run
# does not end within the framework's timeout (a commit waiting for a
# synchronous standby that never comes) is killed.
sub failover_writer_stop
{
	my ($w) = @_;
	PostgreSQL::Test::Utils::append_to_file($w->{stop}, '');
	my $until = time + $PostgreSQL::Test::Utils::timeout_default;
	while ($w->{run}->pumpable && time <= $until) { pump_running($w->{run}); sleep 0.1; }
	$w->{run}->kill_kill if $w->{run}->pumpable;
	$w->{run}->finish;
	return;
}

# psql_at(CONNINFO, SQL...): psql's output (unaligned, tuples only), for a
# server the framework did not make (a failover manager's), each SQL a
# transaction of its own; dies on error.
sub psql_at
{
	my ($conninfo, @sql) = @_;
	my ($out, $err);
	IPC::Run::run([ 'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $conninfo, map { ('-c', $_) } @sql ],
		'>', \$out, '2>', \$err)
	  or die "psql on $conninfo: $err";
	chomp $out;
	return $out;
}

# acked_checks(CONNINFO, NAME, sync => 0|1, leaders => [PORT...], files =>
# [FILE...]): after failovers, on the primary (CONNINFO), whose table ids
# (failover_table) the writers' FILEs acknowledged (lines id|port|...):
# - no ID twice in the table, nor among the acknowledged;
# - with synchronous replication (sync), every acknowledged ID still there;
# - each leader's IDs (by the port and timeline that made them, LEADERS
#   the ports in the order they led) all above the one's before it, and made by a clock behind
#   them (the first ID of each new leader made when its clock was behind
#   the last of the leader before: else the test could not fail);
# - no ID more than a second (max_lead) ahead of its server's own clock.
sub acked_checks
{
	my ($conninfo, $name, %o) = @_;
	my $acked = PostgreSQL::Test::Utils::tempdir() . '/acked';
	PostgreSQL::Test::Utils::append_to_file($acked, join '', map { PostgreSQL::Test::Utils::slurp_file($_) } @{ $o{files} });
	my ($n_acked, $n_rows, $twice, $twice_acked, $lost, $order, $ahead, $behind) = split /\|/, psql_at($conninfo, qq{
		CREATE TEMP TABLE acked (id bigint, port int, at numeric);
		COPY acked FROM '$acked' WITH (DELIMITER '|');
		CREATE TEMP VIEW leaders AS
		  SELECT port, timeline, min(id) lo, max(id) hi, min(at) first_at, max(insta_id.created_at(id)) last
		  FROM ids GROUP BY port, timeline;
		SELECT (SELECT count(*) FROM acked), (SELECT count(*) FROM ids),
		       (SELECT count(*) - count(DISTINCT id) FROM ids),
		       (SELECT count(*) - count(DISTINCT id) FROM acked),
		       (SELECT count(*) FROM acked a WHERE NOT EXISTS (SELECT FROM ids i WHERE i.id = a.id)),
		       (SELECT string_agg(port::text, ' ' ORDER BY lo) FROM leaders)
		         || CASE WHEN EXISTS (SELECT FROM leaders a JOIN leaders b
		                                ON (a.port, a.timeline) <> (b.port, b.timeline) AND a.lo <= b.hi AND b.lo <= a.hi)
		                 THEN ' (overlapping)' ELSE '' END,
		       (SELECT count(*) FROM ids WHERE insta_id.created_at(id) > at + interval '1 s'),
		       (SELECT string_agg(CASE WHEN first_at < prev_last THEN 'behind' ELSE 'ahead' END, ' ' ORDER BY lo)
		        FROM (SELECT lo, first_at, lag(last) OVER (ORDER BY lo) prev_last FROM leaders) l
		        WHERE prev_last IS NOT NULL)});
	ok($n_acked > 1000 && $n_rows >= $n_acked * ($o{sync} ? 1 : 0.9), "$name: $n_acked IDs acknowledged, $n_rows in the table");
	is($twice, 0, "$name: no ID twice in the table");
	is($twice_acked, 0, "$name: no ID acknowledged twice");
	is($lost, 0, "$name: every acknowledged ID is there (synchronous replication)") if $o{sync};
	is($order, join(' ', @{ $o{leaders} }), "$name: each leader's IDs above the one's before it (ports by their lowest ID)");
	is($ahead, 0, "$name: no ID more than max_lead ahead of its server's clock");
	is($behind, join(' ', ('behind') x (@{ $o{leaders} } - 1)),
		"$name: each new leader's clock was behind the IDs of the leader before when it made its first ID");
	return;
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
