# Real concurrent sessions against the duplicate guard (release build).
# - shared guard (preloaded): 4 pgbench clients burst 2000 IDs per statement
#   from ONE sequence for SECONDS_PER_RUN (default 8): zero duplicates, full
#   milliseconds (so the guard was needed), and the newest ID not ahead of
#   the wall clock.
# - not preloaded: the same load and the same checks, through the DSM
#   registry on 17+ and the published segment on 15 and 16 (0.9.0 kept a
#   guard per session there, and repeated millions of IDs across sessions).
#   Each time the guard's statistics count every session's IDs.
# - 1,000,000 rows in one INSERT into a table with a primary key succeed in
#   the default mode; 1,000,000 IDs in legacy mode repeat, like the original.
# - 2000 short sessions (connect, mint one ID, disconnect; two at a time)
#   while two long sessions burst on the same sequence: no ID of either is
#   ahead of its session's clock (read right after next_id), however many
#   sessions came before (0.8.0 without preloading: 160 ms more per session).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = $ENV{SECONDS_PER_RUN} || 8;
my $burst   = "INSERT INTO ids SELECT insta_id.next_id(1, 's'), pg_backend_pid() FROM generate_series(1, 2000);";

# A fresh database conc, 4 clients bursting on one sequence; returns the
# burst's start and end (the server's clock).
sub hammer
{
	my ($node, $label) = @_;
	$node->safe_psql('postgres', 'SET client_min_messages = warning; DROP DATABASE IF EXISTS conc');
	# The checks group millions of IDs (by millisecond, and by (id, pid)
	# when some repeat): PostgreSQL 18's hash aggregate took over 8 minutes
	# on 7M of them, in memory or spilled; a sort takes seconds.
	$node->safe_psql('postgres', q{CREATE DATABASE conc; ALTER DATABASE conc SET work_mem = '512MB'; ALTER DATABASE conc SET enable_hashagg = off});
	$node->safe_psql('conc', 'SET client_min_messages = error; CREATE EXTENSION insta_id; CREATE SEQUENCE s; CREATE UNLOGGED TABLE ids (id bigint, pid int)');
	my $started = $node->safe_psql('conc', 'SELECT clock_timestamp()');
	pgbench_wait(pgbench_start($node, 'conc', $burst, '-c', 4, '-j', 2, '-T', $seconds), "$label: pgbench ran");
	my $ended = $node->safe_psql('conc', 'SELECT clock_timestamp()');
	note "$label: " . $node->safe_psql('conc', qq{
		SELECT count(*) || ' IDs from ' || count(DISTINCT pid) || ' sessions; newest ID '
		       || round(extract(epoch FROM max(insta_id.created_at(id)) - '$ended') * 1000) || ' ms from the clock at the end'
		FROM ids});
	is($node->safe_psql('conc', 'SELECT count(DISTINCT pid) = 4 AND count(*) >= 4 * 2000 FROM ids'),
		't', "$label: IDs were minted by 4 sessions");
	is($node->safe_psql('conc', "SELECT max(insta_id.created_at(id)) <= '$ended'::timestamptz + interval '5 ms' FROM ids"),
		't', "$label: the newest ID is at most 5 ms ahead of the wall clock at the end of the burst");
	is($node->safe_psql('conc', "SELECT min(insta_id.created_at(id)) >= date_trunc('milliseconds', '$started'::timestamptz) FROM ids"),
		't', "$label: no ID is older than the burst");
	return ($started, $ended);
}

# The checks of a server-wide guard on the last burst.
sub exact
{
	my ($node, $label, $started, $ended) = @_;
	my $duplicates = $node->safe_psql('conc', 'SELECT count(*) - count(DISTINCT id) FROM ids');
	is($duplicates, 0, "$label: zero duplicates, across sessions and within each");
	# Which kind, only when there are some: sorting millions of IDs by
	# session as well took 5-6 s a burst.
	diag "$label: of them, IDs a session repeated itself: "
	  . $node->safe_psql('conc', 'SELECT coalesce(sum(c - 1), 0) FROM (SELECT count(*) c FROM ids GROUP BY id, pid HAVING count(*) > 1) d')
	  if $duplicates;
	is($node->safe_psql('conc', q{SELECT (SELECT issued FROM insta_id.guard_stats() WHERE sequence = 's'::regclass) = count(*) FROM ids}),
		't', "$label: the guard's statistics count every session's IDs");
	is($node->safe_psql('conc', 'SELECT max(c) = 1024 FROM (SELECT count(*) c FROM ids GROUP BY id >> 23) m'),
		't', "$label: some milliseconds were full (1024 IDs of the sequence), so the guard was needed");
	is($node->safe_psql('conc', "SELECT count(*) <= 1024 * (extract(epoch FROM '$ended'::timestamptz - '$started') * 1000 + 1) FROM ids"),
		't', "$label: no more IDs than the scheme's ceiling (1024 a ms) allows for the burst's real duration");
}

# 2000 sessions of one ID each, beside two bursting ones; returns the
# duplicates among all their IDs.
sub short_sessions
{
	my ($node, $label) = @_;
	$node->safe_psql('conc', 'CREATE UNLOGGED TABLE lead (id bigint, at timestamptz, pid int, short bool)');
	# at: the clock right after next_id (the subquery is evaluated first).
	my $long = pgbench_start($node, 'conc',
		"INSERT INTO lead SELECT id, clock_timestamp(), pg_backend_pid(), false FROM (SELECT insta_id.next_id(1, 's') id FROM generate_series(1, 500) OFFSET 0) x;",
		'-c', 2, '-j', 1, '-T', 600);
	pgbench_wait(pgbench_start($node, 'conc',
		"INSERT INTO lead SELECT id, clock_timestamp(), pg_backend_pid(), true FROM (SELECT insta_id.next_id(1, 's') id OFFSET 0) x;",
		'-C', '-c', 2, '-j', 1, '-t', 1000), "$label: pgbench ran 2000 short sessions");
	pgbench_stop($long);
	note "$label: " . $node->safe_psql('conc', q{
		SELECT count(DISTINCT pid) FILTER (WHERE short) || ' short sessions, ' || count(*) FILTER (WHERE NOT short)
		       || ' IDs of long ones; newest ID at most ' || round(extract(epoch FROM max(insta_id.created_at(id) - at)) * 1000) || ' ms ahead of its clock'
		FROM lead});
	is($node->safe_psql('conc', 'SELECT count(DISTINCT pid) FILTER (WHERE short) = 2000 AND count(DISTINCT pid) FILTER (WHERE NOT short) >= 2 FROM lead'),
		't', "$label: 2000 short sessions minted beside 2 bursting ones");
	is($node->safe_psql('conc', 'SELECT count(*) FROM lead WHERE insta_id.created_at(id) > at'),
		0, "$label: no ID, of a short session or a long one, is ahead of its session's clock");
	return $node->safe_psql('conc', 'SELECT count(*) - count(DISTINCT id) FROM lead');
}

# The record of the guard's segment in NODE's data directory (15 and 16, not
# preloaded): run (postmaster start, DSM control handle), handle, layout,
# size, token.
sub record_of
{
	my ($node) = @_;
	my $bytes = slurp_file($node->data_dir . '/insta_id.guard');
	return undef unless length($bytes) == 56;
	my %r;
	(my $magic, @r{qw(started shmem handle layout size token)}) = unpack('a8 q< Q< V V Q< Q<', $bytes);
	return $magic eq 'INSTAIDG' ? \%r : undef;
}

sub issued { my ($node, $db) = @_; return $node->safe_psql($db, 'SELECT issued FROM insta_id.guard_stats_total()'); }

# 15 and 16 without preloading: the segment's handle, published in the data
# directory, is trusted by this run only. After a crash restart, a clean
# restart, and in another cluster given this one's file, the first session
# makes a new segment (the guard's counts start again), and the record names
# it; the IDs of both clusters' sessions stay apart.
sub published_segment
{
	my ($node) = @_;
	my $l = 'published segment';
	$node->safe_psql('conc', 'SELECT insta_id.next_id(1, \'s\')');
	my $first = record_of($node);
	ok($first && $first->{layout} == 5, "$l: the data directory names this run's segment, of layout 5");
	ok(issued($node, 'conc') > 1000, "$l: a new session attaches it (the counts of every session's IDs)");

	# A crash restart: the file still names the segment of the run that
	# crashed (gone with it).
	$node->append_conf('postgresql.conf', "restart_after_crash = on\n");
	$node->reload;
	my $victim = $node->background_psql('conc');
	my $pid = $victim->query_safe('SELECT pg_backend_pid()');
	my $log = -s $node->logfile;
	kill 'KILL', $pid;
	# Until the postmaster has reinitialised and accepts connections again (a
	# connection made before it noticed the dead backend would still be of
	# the crashed run; one refused during recovery can break the pipe of the
	# framework's psql).
	$node->wait_for_log(qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s, $log);
	$node->poll_query_until('conc', 'SELECT true') or die 'the server did not come back';
	end_session($victim);
	is_deeply(record_of($node), $first, "$l, crash restart: the file still holds the crashed run's record");
	is($node->safe_psql('conc', 'SELECT insta_id.next_id(1, \'s\') > 0'), 't', "$l, crash restart: next_id mints");
	my $after_crash = record_of($node);
	ok($after_crash->{started} == $first->{started} && $after_crash->{shmem} != $first->{shmem} && $after_crash->{token} != $first->{token},
		"$l, crash restart: the stale record was not trusted: a new segment, of the new run (same start, new shared memory)");
	is(issued($node, 'conc'), 1, "$l, crash restart: the guard starts empty, as preloaded shared memory does");

	# A clean restart.
	$node->restart;
	is($node->safe_psql('conc', 'SELECT insta_id.next_id(1, \'s\') > 0'), 't', "$l, restart: next_id mints");
	my $after_restart = record_of($node);
	ok($after_restart->{started} != $after_crash->{started} && $after_restart->{token} != $after_crash->{token},
		"$l, restart: a new segment, of the new run");

	# Another cluster on the machine, given this one's file while this one
	# runs with its segment in use.
	my $other = insta_node('conc_other');
	open(my $out, '>', $other->data_dir . '/insta_id.guard') or die $!;
	binmode $out;
	print $out slurp_file($node->data_dir . '/insta_id.guard');
	close $out;
	$other->safe_psql('postgres', 'SET client_min_messages = warning; CREATE EXTENSION insta_id; CREATE SEQUENCE s');
	$other->safe_psql('postgres', 'SELECT insta_id.next_id(1, \'s\') FROM generate_series(1, 5000)');
	my $theirs = record_of($other);
	ok($theirs->{token} != $after_restart->{token} && $theirs->{shmem} != $after_restart->{shmem},
		"$l, another cluster given this one's file: it made its own segment");
	is(issued($other, 'postgres') . '|' . issued($node, 'conc'), '5000|1',
		"$l, another cluster: each cluster's guard counts its own IDs only");
	$other->stop;
}

my $node = insta_node('conc', preload => 1);
my $l = 'preloaded';
exact($node, $l, hammer($node, $l));
is(short_sessions($node, $l), 0, "$l, short sessions: zero duplicates");
$node->safe_psql('conc', q{CREATE SEQUENCE s1; CREATE TABLE big (id bigint PRIMARY KEY DEFAULT insta_id.next_id(1, 's1'), v int)});
is($node->safe_psql('conc', 'INSERT INTO big (v) SELECT g FROM generate_series(1, 1000000) g; SELECT count(DISTINCT id) FROM big'),
	1000000, 'wait: INSERT of 1,000,000 rows into one shard table with a primary key');
is($node->safe_psql('conc', q{SELECT max(insta_id.created_at(id)) <= clock_timestamp() + interval '5 ms' FROM big}),
	't', 'wait: the newest of them is at most 5 ms ahead of the wall clock');
is($node->safe_psql('conc', q{
		CREATE SEQUENCE s2; SET insta_id.on_overflow = legacy;
		SELECT count(*) > count(DISTINCT id) FROM (SELECT insta_id.next_id(1, 's2') AS id FROM generate_series(1, 1000000)) x}),
	't', 'legacy: 1,000,000 IDs of one sequence in one statement repeat, like the original');
is($node->safe_psql('conc', q{
		CREATE SEQUENCE s3;
		SELECT count(DISTINCT id) FROM (SELECT insta_id.next_id(1, 's3') AS id FROM generate_series(1, 1000000)) x}),
	1000000, 'wait: the same 1,000,000 IDs do not');
$node->stop;

$node = insta_node('conc_not_preloaded');
$l = 'not preloaded';
my ($stdout, $stderr);
$node->psql('postgres', 'CREATE EXTENSION insta_id', stdout => \$stdout, stderr => \$stderr);
is($stderr, '', "$l: CREATE EXTENSION says nothing");
is($node->safe_psql('postgres', 'SELECT insta_id.guard_mode()'), 'shared',
	$node->pg_version >= 17 ? "$l: guard_mode() says shared (the DSM registry)" : "$l: guard_mode() says shared (the published segment)");
exact($node, $l, hammer($node, $l));
is(short_sessions($node, $l), 0, "$l, short sessions: zero duplicates");
published_segment($node) if $node->pg_version < 17;
$node->stop;

done_testing();
