# insta_id under Patroni (issue 57), as users run it: three nodes of the
# version under test (make test: 18, through Patroni's bin_dir) and etcd,
# insta_id preloaded, synchronous_mode on with both standbys synchronous.
# Two writers follow the primary through a multi-host connection string
# with target_session_attrs=read-write, each ID whose commit came back
# logged. The standbys' clocks are 15 s behind the first leader's
# (libfaketime around postgres only: far more than a failover takes, here
# 3 s), so that each new leader starts below the IDs already issued and
# must continue above them, waiting for its clock:
# 1. kill -9 of the leader's postmaster and its processes, the node's
#    postgres lost (primary_start_timeout 0: Patroni fails over rather than
#    restart it);
# 2. a patronictl switchover to a standby whose clock is 12 s behind the
#    leader's.
# Checked on the last leader: no ID twice; every acknowledged ID there; each
# leader's IDs above the one's before; none more than max_lead ahead of its
# server's clock. The time from each fault to the first ID acknowledged
# from the new leader is printed (issue 57's note).
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

for my $tool (qw(patroni patronictl etcd))
{
	BAIL_OUT("$tool is missing: scripts/dev/setup.sh failover") unless grep { -x "$_/$tool" } split /:/, $ENV{PATH};
}

my $dir = PostgreSQL::Test::Utils::tempdir_short();
my $pgbin = InstaIdTest::install_path() . '/bin';
my $user = getpwuid($<);
my @nodes = map { { name => "p$_", port => PostgreSQL::Test::Cluster::get_free_port(),
	api => PostgreSQL::Test::Cluster::get_free_port() } } 1 .. 3;
my ($etcd_port, $etcd_peer) = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 2;
my @clocks = (0, -15, -15);
my %running;    # name => IPC::Run harness: etcd and each Patroni

# Patroni's bin_dir: the installation's programs, postgres under the
# node's clock (the file named by INSTA_CLOCK, which Patroni's environment
# passes on), so that Patroni and etcd keep the real time.
mkdir "$dir/bin";
symlink $_, "$dir/bin/" . (split m{/}, $_)[-1] or die $! for grep { !m{/postgres$} } glob "$pgbin/*";
my $faketime = faketime_lib();
PostgreSQL::Test::Utils::append_to_file("$dir/bin/postgres", qq{#!/bin/sh
export LD_PRELOAD=$faketime FAKETIME_TIMESTAMP_FILE="\$INSTA_CLOCK" FAKETIME_CACHE_DURATION=0 FAKETIME_DONT_FAKE_MONOTONIC=1 NO_FAKE_STAT=1
exec $pgbin/postgres "\$@"
});
chmod 0755, "$dir/bin/postgres";

# Everything started here is stopped however the test ends.
END
{
	my $status = $?;
	# (etcd last: a Patroni stopping gives its leader key back there)
	daemons_stop("$pgbin/pg_ctl", [ map { $running{ $_->{name} } // () } @nodes ], [ map { "$dir/$_->{name}" } @nodes ]);
	daemons_stop("$pgbin/pg_ctl", [ $running{etcd} // () ], []);
	$? = $status;
}

sub start
{
	my ($name, $env, @cmd) = @_;
	$running{$name} = daemon_start("$dir/$name.log", $env, @cmd);
	return;
}

start('etcd', {}, 'etcd', '--name', 'e1', '--data-dir', "$dir/etcd",
	'--listen-client-urls', "http://127.0.0.1:$etcd_port", '--advertise-client-urls', "http://127.0.0.1:$etcd_port",
	'--listen-peer-urls', "http://127.0.0.1:$etcd_peer", '--initial-advertise-peer-urls', "http://127.0.0.1:$etcd_peer",
	'--initial-cluster', "e1=http://127.0.0.1:$etcd_peer");

for my $i (0 .. 2)
{
	my $n = $nodes[$i];
	$n->{clock} = "$dir/$n->{name}.clock";
	write_clock($n->{clock}, $clocks[$i]);
	# ttl 10 s and loop_wait 1 s: a fault is seen within seconds.
	PostgreSQL::Test::Utils::append_to_file("$dir/$n->{name}.yml", qq{
scope: insta
namespace: /insta/
name: $n->{name}
restapi:
  listen: 127.0.0.1:$n->{api}
  connect_address: 127.0.0.1:$n->{api}
etcd3:
  hosts: 127.0.0.1:$etcd_port
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    primary_start_timeout: 0
    synchronous_mode: true
    synchronous_node_count: 2
    postgresql:
      use_pg_rewind: true
      parameters:
        shared_preload_libraries: insta_id
        wal_keep_size: 256MB
        log_statement: none
  initdb:
    - data-checksums
    - encoding: UTF8
postgresql:
  listen: 127.0.0.1:$n->{port}
  connect_address: 127.0.0.1:$n->{port}
  data_dir: $dir/$n->{name}
  bin_dir: $dir/bin
  pgpass: $dir/$n->{name}.pgpass
  authentication:
    superuser: {username: $user}
    replication: {username: $user}
    rewind: {username: $user}
  parameters:
    unix_socket_directories: $dir
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
});
	start($n->{name}, { INSTA_CLOCK => $n->{clock} }, 'patroni', "$dir/$n->{name}.yml");
	# The first leader is p1: the others start once it leads.
	wait_for_cluster(sub { ($_[0]{p1}{role} // '') eq 'leader' }, 'p1 leads') if $i == 0;
}

# The members as Patroni lists them: name => {role, state, lag}.
sub members
{
	my ($out, $err);
	IPC::Run::run([ 'patronictl', '-c', "$dir/p1.yml", 'list', '-f', 'json' ], '>', \$out, '2>', \$err);
	my $list = eval { decode_json($out) } or return {};
	return { map { $_->{Member} => { role => lc $_->{Role}, state => $_->{State} } } @$list };
}

# Until the members satisfy CHECK; BAIL_OUT after 3 minutes.
sub wait_for_cluster
{
	my ($check, $what) = @_;
	my $until = time + 180;
	until ($check->(members()))
	{
		pump_running(values %running);
		BAIL_OUT("never: $what; members: " . encode_json(members())) if time > $until;
		sleep 0.2;
	}
	return;
}

my $synchronous = sub
{
	my ($m) = @_;
	return (grep { ($m->{$_}{role} // '') eq 'sync standby' && $m->{$_}{state} =~ /^(running|streaming)$/ } keys %$m) == 2;
};
wait_for_cluster($synchronous, 'a leader and two synchronous standbys');

# A node's database, through the socket.
sub at { "host=$dir port=$_[0]{port} user=$user dbname=postgres" }

psql_at(at($nodes[0]), failover_table());

my $conninfo = 'host=' . join(',', ('127.0.0.1') x 3) . ' port=' . join(',', map { $_->{port} } @nodes)
  . " user=$user dbname=postgres target_session_attrs=read-write connect_timeout=2";
my @writers = map { failover_writer_start($conninfo, failover_insert(), "$dir/acked$_") } 1 .. 2;

my %by_name = map { $_->{name} => $_ } @nodes;
my @led = ($nodes[0]{port});
acked_from(\@writers, $nodes[0]{port}, 20000, 'p1');

# 1. kill -9 of the leader's postmaster.
my ($pid) = split /\n/, PostgreSQL::Test::Utils::slurp_file("$dir/p1/postmaster.pid");
my $killed = time;
kill_tree($pid);
my $new;
wait_for_cluster(sub { ($new) = grep { $_[0]{$_}{role} eq 'leader' && $_ ne 'p1' } keys %{ $_[0] }; $new }, 'a new leader');
my $named = time - $killed;
my $first = acked_from(\@writers, $by_name{$new}{port}, 20000, "the new leader $new") - $killed;
push @led, $by_name{$new}{port};
diag(sprintf('kill -9 of p1: Patroni named %s (clock %+d s) after %.1f s; its first ID acknowledged %.1f s after the kill',
	$new, $clocks[ substr($new, 1) - 1 ], $named, $first));

# 2. A switchover to the other standby (not the old leader), its clock
# moved 12 s behind the leader's first, once the old leader is back as a
# synchronous standby.
wait_for_cluster($synchronous, 'p1 back as a synchronous standby');
my $to = $new eq 'p3' ? 'p2' : 'p3';
$clocks[ substr($to, 1) - 1 ] = $clocks[ substr($new, 1) - 1 ] - 12;
write_clock($by_name{$to}{clock}, $clocks[ substr($to, 1) - 1 ]);
sleep 1.2;    # (libfaketime reads the file again at most once a second)
my $asked = time;
my ($out, $err);
IPC::Run::run([ 'patronictl', '-c', "$dir/p1.yml", 'switchover', '--leader', $new, '--candidate', $to, '--force' ],
	'>', \$out, '2>', \$err)
  or BAIL_OUT("patronictl switchover: $out$err");
$first = acked_from(\@writers, $by_name{$to}{port}, 20000, "the switchover's leader $to") - $asked;
push @led, $by_name{$to}{port};
diag(sprintf('switchover from %s to %s (clock %+d s): its first ID acknowledged %.1f s after it was asked',
	$new, $to, $clocks[ substr($to, 1) - 1 ], $first));

failover_writer_stop($_) for @writers;
# What the new leaders' logs say of their waits (issue 57's note).
for my $n (grep { $_->{port} != $nodes[0]{port} } map { $by_name{$_} } $new, $to)
{
	my @waits = PostgreSQL::Test::Utils::slurp_file("$dir/$n->{name}.log") =~ /(waited \d+ ms for the clock)/g;
	diag("$n->{name}: next_id @{[ @waits ? join(', ', @waits) : 'never waited a second or more for the clock' ]}");
}
acked_checks(at($by_name{$to}), 'Patroni, kill -9 and switchover', sync => 1, leaders => \@led,
	files => [ map { $_->{file} } @writers ]);

done_testing();
