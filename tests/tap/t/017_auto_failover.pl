# insta_id under pg_auto_failover (issue 57), as users run it: a monitor and
# two data nodes of the version under test (make test: Debian's 15, the one
# pg_auto_failover is packaged for), insta_id not preloaded, the nodes'
# synchronous replication as pg_auto_failover sets it (ANY 1 of the
# standby). Two writers follow the primary through a multi-host connection
# string with target_session_attrs=read-write, each ID whose commit came
# back logged. n2's clock is 20 s behind n1's (libfaketime around its
# pg_autoctl and postgres: far more than a failover takes, here 7 s), so
# that each new primary starts below the IDs already issued and must
# continue above them:
# 1. kill -9 of n1, its pg_autoctl and its postgres (the node lost): the
#    monitor promotes n2;
# 2. n1 back (its pg_autoctl started again, its clock now 12 s behind n2's),
#    rejoining as the standby; then pg_autoctl perform switchover.
# Checked on the last primary: no ID twice; every acknowledged ID there;
# each primary's IDs above the one's before; none more than max_lead ahead
# of its server's clock. The time from each fault to the first ID
# acknowledged from the new primary is printed (issue 57's note).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

BAIL_OUT('pg_autoctl is missing: scripts/dev/setup.sh failover') unless grep { -x "$_/pg_autoctl" } split /:/, $ENV{PATH};
my $install = InstaIdTest::install_path();
my $pgbin = "$install/bin";
my ($sharedir) = PostgreSQL::Test::Utils::run_command([ "$pgbin/pg_config", '--sharedir' ]);
chomp $sharedir;
plan skip_all => "pg_auto_failover is packaged for Debian's 15 only, not for $install"
  unless -e "$sharedir/extension/pgautofailover.control";

my $dir = PostgreSQL::Test::Utils::tempdir_short();
my $user = getpwuid($<);
# pg_autoctl's configuration, state and pid files in the test's directory;
# its connections to the nodes through their socket there.
my %env = (XDG_CONFIG_HOME => "$dir/config", XDG_DATA_HOME => "$dir/share", XDG_RUNTIME_DIR => "$dir/run", PGHOST => $dir);
mkdir "$dir/run", 0700;
my $monitor = { name => 'mon', port => PostgreSQL::Test::Cluster::get_free_port() };
my @nodes = map { { name => "n$_", port => PostgreSQL::Test::Cluster::get_free_port(), clock => "$dir/n$_.clock" } } 1 .. 2;
my %by_port = map { $_->{port} => $_ } @nodes;
my %running;    # name => the IPC::Run harness of its pg_autoctl run

END
{
	my $status = $?;
	daemons_stop("$pgbin/pg_ctl", [ map { $running{ $_->{name} } // () } @nodes ], [ map { "$dir/$_->{name}" } @nodes ]);
	daemons_stop("$pgbin/pg_ctl", [ $running{mon} // () ], ["$dir/mon"]);
	$? = $status;
}

# pg_autoctl COMMAND... with the test's environment (and NODE's clock, if
# it has one: pg_autoctl and the postgres it starts).
sub clocked_env
{
	my ($n) = @_;
	return { %env, $n && $n->{clock} ? (LD_PRELOAD => faketime_lib(), FAKETIME_TIMESTAMP_FILE => $n->{clock},
		FAKETIME_CACHE_DURATION => 0, FAKETIME_DONT_FAKE_MONOTONIC => 1, NO_FAKE_STAT => 1) : () };
}

sub autoctl
{
	my ($n, @args) = @_;
	local %ENV = (%ENV, %{ clocked_env($n) });
	my ($out, $err);
	IPC::Run::run([ 'pg_autoctl', @args ], '>', \$out, '2>', \$err, IPC::Run::timeout(180))
	  or BAIL_OUT("pg_autoctl @args: $out$err");
	return $out;
}

sub run_node
{
	my ($n) = @_;
	$running{ $n->{name} } = daemon_start("$dir/$n->{name}.log", clocked_env($n), 'pg_autoctl', 'run', '--pgdata', "$dir/$n->{name}");
	return;
}

# The monitor's and n1's data directories made here, so that their
# sockets are in the test's directory (pg_autoctl takes an existing one).
for my $n ($monitor, $nodes[0])
{
	PostgreSQL::Test::Utils::system_or_bail("$pgbin/initdb", '-D', "$dir/$n->{name}", '-A', 'trust', '--data-checksums', '-U', $user);
	PostgreSQL::Test::Utils::append_to_file("$dir/$n->{name}/postgresql.conf", "unix_socket_directories = '$dir'\n");
}
my @common = ('--listen', '127.0.0.1', '--hostname', '127.0.0.1', '--auth', 'trust', '--no-ssl', '--pgctl', "$pgbin/pg_ctl");
autoctl(undef, 'create', 'monitor', '--pgdata', "$dir/mon", '--pgport', $monitor->{port}, @common);
run_node($monitor);
# A node seen down after about 2 s, and the primary's demotion waited for
# 3 s instead of 30 (the node is gone, not cut off).
poll_psql("host=$dir port=$monitor->{port} user=$user dbname=pg_auto_failover", 'SELECT true', 't', 'the monitor runs');
psql_at("host=$dir port=$monitor->{port} user=$user dbname=pg_auto_failover",
	(map { "ALTER SYSTEM SET pgautofailover.$_" } 'health_check_period = 1000', 'health_check_timeout = 1000',
		'health_check_max_retries = 1', 'health_check_retry_delay = 500', 'node_considered_unhealthy_timeout = 2000',
		'primary_demote_timeout = 3000'), 'SELECT pg_reload_conf()');
my $monitor_uri = "postgres://autoctl_node\@127.0.0.1:$monitor->{port}/pg_auto_failover?sslmode=disable";

my @clocks = (0, -20);
for my $i (0, 1)
{
	my $n = $nodes[$i];
	write_clock($n->{clock}, $clocks[$i]);
	autoctl($n, 'create', 'postgres', '--pgdata', "$dir/$n->{name}", '--pgport', $n->{port}, '--name', $n->{name},
		'--monitor', $monitor_uri, @common);
	run_node($n);
	wait_for_states($i ? { n1 => 'primary', n2 => 'secondary' } : { n1 => 'single' }, "$n->{name} running");
}

# Until psql SQL on CONNINFO prints EXPECTED, at most 3 minutes.
sub poll_psql
{
	my ($conninfo, $sql, $expected, $what) = @_;
	my $until = time + 180;
	until ((eval { psql_at($conninfo, $sql) } // '') eq $expected)
	{
		BAIL_OUT("never: $what") if time > $until;
		sleep 0.2;
	}
	return;
}

# The nodes' states as the monitor has them: name => state, when it has
# assigned what each reports.
sub states
{
	local %ENV = (%ENV, %env);
	my ($out, $err);
	IPC::Run::run([ 'pg_autoctl', 'show', 'state', '--pgdata', "$dir/mon", '--json' ], '>', \$out, '2>', \$err);
	my $list = eval { decode_json($out) } or return {};
	return { map { $_->{nodename} => $_->{current_group_state} eq $_->{assigned_group_state} ? $_->{current_group_state} : 'moving' } @$list };
}

# Until the nodes are in STATES ({name => state}); BAIL_OUT after 3 minutes.
sub wait_for_states
{
	my ($want, $what) = @_;
	my $until = time + 180;
	while (1)
	{
		my $s = states();
		return if !grep { ($s->{$_} // '') ne $want->{$_} } keys %$want;
		pump_running(values %running);
		BAIL_OUT("never: $what; states: " . encode_json($s)) if time > $until;
		sleep 0.2;
	}
}

sub at { "host=$dir port=$_[0]{port} user=$user dbname=postgres" }
psql_at(at($nodes[0]), failover_table());
my $conninfo = "host=127.0.0.1,127.0.0.1 port=$nodes[0]{port},$nodes[1]{port} user=$user dbname=postgres"
  . ' target_session_attrs=read-write connect_timeout=2';
my @writers = map { failover_writer_start($conninfo, failover_insert(), "$dir/acked$_") } 1 .. 2;
my @led = ($nodes[0]{port});
acked_from(\@writers, $nodes[0]{port}, 20000, 'n1');

# 1. n1 lost: its pg_autoctl, every process under it, and its postgres,
# killed at once.
my ($postmaster) = split /\n/, PostgreSQL::Test::Utils::slurp_file("$dir/n1/postmaster.pid");
my $killed = time;
kill_tree($running{n1}{KIDS}[0]{PID}, $postmaster);
$running{n1}->finish;
delete $running{n1};
wait_for_states({ n2 => 'wait_primary' }, 'n2 promoted');
my $promoted = time - $killed;
my $first = acked_from(\@writers, $nodes[1]{port}, 20000, 'n2') - $killed;
push @led, $nodes[1]{port};
diag(sprintf('kill -9 of n1: the monitor promoted n2 (clock %+d s) %.1f s after; its first ID acknowledged %.1f s after the kill',
	$clocks[1], $promoted, $first));

# 2. n1 back, behind n2's clock, then a switchover to it.
$clocks[0] = $clocks[1] - 12;
write_clock($nodes[0]{clock}, $clocks[0]);
run_node($nodes[0]);
wait_for_states({ n1 => 'secondary', n2 => 'primary' }, 'n1 back as the standby');
my $asked = time;
autoctl(undef, 'perform', 'switchover', '--pgdata', "$dir/mon");
$first = acked_from(\@writers, $nodes[0]{port}, 20000, 'n1 again', $asked) - $asked;
push @led, $nodes[0]{port};
diag(sprintf('switchover to n1 (clock %+d s): its first ID acknowledged %.1f s after it was asked', $clocks[0], $first));

failover_writer_stop($_) for @writers;
for my $n (@nodes)
{
	my @waits = join('', map { PostgreSQL::Test::Utils::slurp_file($_) } glob "$dir/$n->{name}/log/*") =~ /(waited \d+ ms for the clock)/g;
	diag("$n->{name}: next_id @{[ @waits ? join(', ', @waits) : 'never waited a second or more for the clock' ]}");
}
acked_checks(at($nodes[0]), 'pg_auto_failover, kill -9 and switchover', sync => 1, leaders => \@led,
	files => [ map { $_->{file} } @writers ]);

done_testing();
