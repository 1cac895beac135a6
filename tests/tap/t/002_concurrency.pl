# Real concurrent sessions against the duplicate guard (release build).
# - shared guard (preloaded): 4 pgbench clients burst 2000 IDs per statement
#   from ONE sequence for SECONDS_PER_RUN (default 8): zero duplicates, full
#   milliseconds (so the guard was needed), and the newest ID not ahead of
#   the wall clock.
# - not preloaded: the same load. On PostgreSQL 17+ (the DSM registry) the
#   same checks. On 15 and 16 (a guard per session) no session repeats its
#   own IDs; across sessions duplicates are possible (README, "Guarantees"):
#   their count is reported, not asserted.
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
	# The checks group millions of IDs by (id, pid): PostgreSQL 18's hash
	# aggregate took over 8 minutes on 7M of them, in memory or spilled; a
	# sort takes seconds.
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
	is($node->safe_psql('conc', 'SELECT count(*) FROM (SELECT 1 FROM ids GROUP BY id, pid HAVING count(*) > 1) d'),
		0, "$label: no session repeats its own IDs");
	return ($started, $ended);
}

# The checks of a server-wide guard on the last burst.
sub exact
{
	my ($node, $label, $started, $ended) = @_;
	is($node->safe_psql('conc', 'SELECT count(*) - count(DISTINCT id) FROM ids'), 0, "$label: zero duplicates across sessions");
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
if ($node->pg_version >= 17)    # the DSM-registry guard
{
	is($stderr, '', "$l: CREATE EXTENSION says nothing (PostgreSQL 17+)");
	is($node->safe_psql('postgres', 'SELECT insta_id.guard_mode()'), 'shared', "$l: guard_mode() says shared (the DSM registry)");
	exact($node, $l, hammer($node, $l));
	is(short_sessions($node, $l), 0, "$l, short sessions: zero duplicates");
}
else
{
	like($stderr, qr/^(?:psql:\S+ )?WARNING:  insta_id is not in shared_preload_libraries: each session guards only its own IDs against duplicates$/m,
		"$l: CREATE EXTENSION warns that the guard is per session");
	is($node->safe_psql('postgres', 'SELECT insta_id.guard_mode()'), 'session', "$l: guard_mode() says session");
	hammer($node, $l);
	note "$l: duplicates across sessions (allowed with a per-session guard): "
	  . $node->safe_psql('conc', 'SELECT count(*) - count(DISTINCT id) FROM ids');
	note "$l, short sessions: duplicates across sessions (allowed with a per-session guard): " . short_sessions($node, $l);
}
$node->stop;

done_testing();
