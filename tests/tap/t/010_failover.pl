# The high-water mark goes where the data goes (docs/guarantees.md): a
# promoted standby and a point-in-time restore continue above every ID the
# old server durably issued, whatever their clocks say.
# 1. Failover. A primary and a streaming standby whose clock is 60 s behind
#    the primary's; a burst of 4 pgbench clients on the primary, stopped
#    immediately in the middle; the standby shows the mark before it is
#    promoted (read-only), is promoted, and bursts:
#    - synchronous standby: no new ID repeats or falls below any ID of the
#      old primary, even those it committed locally only (every ID's mark
#      reached the standby before the ID left next_id);
#    - asynchronous: the same against the IDs whose commits reached the
#      standby (what was not replicated is lost with its rows);
#    - per version: 15 and 18 preloaded, and on each version not preloaded
#      (the DSM registry on 17+, the published segment on 15 and 16).
#    - 0.8.0's SQL (the mark in a file of the data directory) on the same
#      failover repeats IDs: the test can fail.
# 2. Point-in-time recovery from a base backup and the WAL archive to an LSN
#    taken in the middle of a burst, the restored server's clock 60 s behind:
#    no new ID repeats or falls below an ID committed before the target.
# 3. pg_dump and pg_restore into a new server whose clock is 60 s behind: the
#    same (18).
# 4. A cascaded standby (two hops) promoted: the same (18).
# 5. A quorum of synchronous standbys: the mark's wait returns on any
#    member's acknowledgement and holds while none is up (18).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $major = PostgreSQL::Test::Cluster->new('probe', install_path => InstaIdTest::install_path())->pg_version->major;
my $sql = q{INSERT INTO ids (id, gen) SELECT insta_id.next_id(1, 's'), :gen FROM generate_series(1, 1000);};

# A database on PRIMARY with insta_id (VERSION, if given) and the tables.
sub setup_db
{
	my ($node, $version) = @_;
	$node->safe_psql('postgres', q{CREATE DATABASE f; ALTER DATABASE f SET insta_id.max_lead = '1h'});
	$node->safe_psql('f', 'SET client_min_messages = error; CREATE EXTENSION insta_id'
		  . ($version ? " VERSION '$version'" : '') . q{;
		CREATE SEQUENCE s;
		CREATE TABLE ids (id bigint NOT NULL, gen text NOT NULL)});
}

# A burst of 4 clients on NODE for at most SECONDS, rows marked GEN.
sub burst
{
	my ($node, $sql, $gen, $seconds) = @_;
	return pgbench_start($node, 'f', $sql, '-c', '4', '-j', '2', '-T', $seconds, '-D', "gen='$gen'");
}

# Waits until table ids holds N rows while pgbench run B goes on.
sub rows_at_least
{
	my ($node, $b, $n) = @_;
	for (1 .. 1800)
	{
		return if $node->safe_psql('f', "SELECT count(*) >= $n FROM ids") eq 't';
		$b->{run}->pump_nb;
		BAIL_OUT("pgbench ended early: $b->{out}$b->{err}") unless $b->{run}->pumpable;
		select undef, undef, undef, 0.1;
	}
	BAIL_OUT("ids never reached $n rows");
}

# Before the new burst: the clock of NODE is behind the newest ID of table
# OLD (else the test could not fail).
sub clock_behind
{
	my ($node, $old, $name) = @_;
	is($node->safe_psql('f', "SELECT clock_timestamp() < max(insta_id.created_at(id)) FROM $old"), 't',
		"$name: the clock is behind the old IDs");
}

# The checks of new IDs (gen 'new') against the old ones in table OLD.
sub no_repeat
{
	my ($node, $old, $name) = @_;
	my ($n_old, $n_new, $repeated, $above) = split /\|/, $node->safe_psql('f', qq{
		SELECT (SELECT count(*) FROM $old),
		       (SELECT count(*) FROM ids WHERE gen = 'new'),
		       (SELECT count(*) FROM ids n JOIN $old o USING (id) WHERE n.gen = 'new'),
		       (SELECT min(id) FROM ids WHERE gen = 'new') > (SELECT max(id) FROM $old)});
	ok($n_old > 10000 && $n_new > 1000, "$name: bursts on both sides ($n_old old IDs, $n_new new)");
	is($repeated, 0, "$name: no new ID repeats an old one");
	is($above, 't', "$name: every new ID is above every old one");
	return $repeated;
}

sub failover
{
	my (%c) = @_;
	my $tag = join '_', $c{preload} ? 'preloaded' : 'not_preloaded', $c{sync} ? 'sync' : 'async',
	  $c{version} ? 'v' . ($c{version} =~ tr/./_/r) : ();
	my $name = "PostgreSQL $major, " . ($c{preload} ? 'preloaded' : 'not preloaded')
	  . ($c{sync} ? ', synchronous' : ', asynchronous') . ($c{version} ? ", SQL $c{version}" : '');
	my $primary = insta_node("primary_$tag", preload => $c{preload}, faketime => '+0', streaming => 1);
	setup_db($primary, $c{version});
	$primary->backup('b');
	# Behind the old IDs by far more than the failover takes, however slow
	# the machine (max_lead is an hour). Where repeats are the point, the
	# clock is put back into the old burst once the standby is promoted.
	my $standby = insta_standby($primary, "standby_$tag", 'b', faketime => '-60');
	insta_start($standby);
	if ($c{sync})
	{
		$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'standby_$tag'; SELECT pg_reload_conf()");
		$primary->poll_query_until('postgres',
			"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby_$tag'")
		  or die 'the standby never became synchronous';
	}
	my $b = burst($primary, $sql, 'old', 30);
	rows_at_least($primary, $b, 40000);
	# An asynchronous standby can lag far behind on a busy machine (one
	# had replayed none of the primary's 40000 rows, and received 2000,
	# when the primary died): the old burst is the part it replayed, the
	# 10000 rows the checks need and more, before the primary dies.
	rows_at_least($standby, $b, 12000);
	$primary->stop('immediate');
	pgbench_wait($b);

	my ($mark_ok) = $standby->safe_psql('f', q{
		SELECT insta_id.high_water_mark() >= max(insta_id.created_at(id)) FROM ids});
	is($mark_ok, 't', "$name: the standby shows a high-water mark above every replicated ID before promotion")
	  unless $c{version};
	$standby->promote;
	$standby->safe_psql('f', q{CREATE TABLE replicated AS SELECT id FROM ids});
	if ($c{expect_repeats})
	{
		# The new burst's clock runs through the old burst's milliseconds:
		# it starts half a second before them. (It aimed a quarter into them:
		# on a busy machine the check below came later than that point, for
		# an old burst of a second or two, and found the clock past them.)
		# The offset is from the real clock, 60 s ahead of this one, and the
		# burst starts once the clock file has settled (1.2 s).
		my $offset = $standby->safe_psql('f', q{
			SELECT round(extract(epoch FROM min(c) - interval '0.5 s' - clock_timestamp()) - 61.2, 1)
			FROM (SELECT insta_id.created_at(id) c FROM ids) x});
		clock_offset($standby, $offset);
	}
	clock_behind($standby, 'replicated', $name);
	pgbench_wait(burst($standby, $sql, 'new', 3), "$name: a burst on the promoted standby");

	my $old = 'replicated';
	if ($c{sync})
	{
		# Every ID the old primary committed, replicated or not.
		insta_start($primary);
		my $file = $primary->basedir . '/old_ids';
		$primary->safe_psql('f', "COPY (SELECT id FROM ids) TO '$file'");
		$standby->safe_psql('f', "CREATE TABLE old_ids (id bigint); COPY old_ids FROM '$file'");
		$old = 'old_ids';
		$primary->stop;
	}
	my $repeated = $c{expect_repeats}
	  ? $standby->safe_psql('f', "SELECT count(*) FROM ids n JOIN $old o USING (id) WHERE n.gen = 'new'")
	  : no_repeat($standby, $old, $name);
	$standby->stop;
	return $repeated;
}

sub pitr
{
	my (%c) = @_;
	my $name = "PostgreSQL $major, point-in-time recovery" . ($c{preload} ? ', preloaded' : '');
	my $primary = insta_node('archiving', preload => $c{preload}, faketime => '+0', archiving => 1, streaming => 1);
	setup_db($primary);
	$primary->backup('b');
	my $b = burst($primary, $sql, 'old', 30);
	rows_at_least($primary, $b, 20000);
	my $target = $primary->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	rows_at_least($primary, $b, 40000);
	pgbench_stop($b);
	# Everything up to the target in the archive: the segment the switch
	# completes, named from the switch's own end (pg_walfile_name puts a
	# segment's end in that segment). Asked for afterwards, the insert
	# position can already be past a record another process wrote (autovacuum
	# after the burst): a segment no archiver sees before it fills.
	my $last = $primary->safe_psql('postgres', 'SELECT pg_walfile_name(pg_switch_wal())');
	$primary->poll_query_until('postgres', "SELECT last_archived_wal >= '$last' FROM pg_stat_archiver")
	  or die 'WAL not archived';
	$primary->stop;

	my $restored = insta_standby($primary, 'restored', 'b', standby => 0, faketime => '-60',
		conf => "recovery_target_lsn = '$target'\nrecovery_target_action = 'promote'\n");
	insta_start($restored);
	$restored->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') or die 'recovery never ended';
	$restored->safe_psql('f', q{CREATE TABLE committed AS SELECT id FROM ids});
	clock_behind($restored, 'committed', $name);
	pgbench_wait(burst($restored, $sql, 'new', 3), "$name: a burst after the restore");
	no_repeat($restored, 'committed', $name);
	$restored->stop;
}

# pg_dump of the database, pg_restore into a new server whose clock is
# behind: the dump carries the mark (extension configuration).
sub restore
{
	my $from = insta_node('dumped', preload => 1, faketime => '+0');
	setup_db($from);
	my $b = burst($from, $sql, 'old', 30);
	rows_at_least($from, $b, 40000);
	pgbench_stop($b);
	my $dump = $from->basedir . '/f.dump';
	$from->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $from->connstr('f') ], 'pg_dump of the database');
	$from->stop;
	my $to = insta_node('restored_dump', preload => 1, faketime => '-60');
	$to->command_ok([ 'pg_restore', '-C', '-d', $to->connstr('postgres'), $dump ], 'pg_restore into a new server');
	$to->safe_psql('f', q{CREATE TABLE dumped AS SELECT id FROM ids});
	clock_behind($to, 'dumped', "PostgreSQL $major, restored from pg_dump");
	pgbench_wait(burst($to, $sql, 'new', 3), "PostgreSQL $major, restored from pg_dump: a burst");
	no_repeat($to, 'dumped', "PostgreSQL $major, restored from pg_dump, clock 60 s behind");
	$to->stop;
}

# A cancel (here statement_timeout) of next_id's wait for the synchronous
# standby gives 57014 and no ID, where a commit would only warn; the wait
# happens whatever the session's synchronous_commit.
sub cancelled_wait
{
	my $primary = insta_node('lonely', preload => 1, streaming => 1);
	setup_db($primary);
	$primary->backup('b');
	my $standby = insta_standby($primary, 'lonely_standby', 'b');
	insta_start($standby);
	$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'lonely_standby'; SELECT pg_reload_conf()");
	$primary->poll_query_until('postgres', "SELECT sync_state = 'sync' FROM pg_stat_replication")
	  or die 'the standby never became synchronous';
	$primary->safe_psql('f', q{SELECT insta_id.next_id(1, 's')});
	$standby->stop;
	# The mark is reserved 200 ms ahead: past that, the next ID needs a new one.
	select undef, undef, undef, 0.5;
	my ($out, $err);
	$primary->psql('f', q{SET statement_timeout = '1s'; SELECT insta_id.next_id(1, 's')},
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
		"PostgreSQL $major: a statement timeout in the wait for the synchronous standby gives 57014");
	is($out, '', "PostgreSQL $major: and no ID");
	# A session that asks for no synchronous commit waits all the same: the
	# mark it writes covers every session's IDs.
	$primary->psql('f', q{SET synchronous_commit = off; SET statement_timeout = '1s'; SELECT pg_sleep(0.3); SELECT insta_id.next_id(1, 's')},
		stdout => \$out, stderr => \$err, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
		"PostgreSQL $major: with synchronous_commit = off the mark still waits for the standby");
	$primary->stop('immediate');
}

# Cascaded standbys: A streams to B, B to C, C's clock 60 s behind. A
# stops in the middle of a burst; C, two hops from it, is promoted: no new
# ID repeats one C received, and every new ID is above them all.
sub cascade
{
	my $name = "PostgreSQL $major, a cascaded standby promoted";
	my $a = insta_node('cascade_a', preload => 1, streaming => 1);
	setup_db($a);
	$a->backup('b');
	my $b = insta_standby($a, 'cascade_b', 'b');
	insta_start($b);
	$b->backup('bc');
	my $c = insta_standby($b, 'cascade_c', 'bc', faketime => '-60');
	insta_start($c);
	my $load = burst($a, $sql, 'old', 30);
	rows_at_least($a, $load, 40000);
	# C, two asynchronous hops away, can lag far behind on a busy machine
	# (one had received 0.3 MB of WAL, far from 10000 rows, when A died,
	# and never got more): the rows the checks need are on it before A dies.
	rows_at_least($c, $load, 12000);
	$a->stop('immediate');
	pgbench_wait($load);
	is($c->safe_psql('f', q{SELECT insta_id.high_water_mark() >= max(insta_id.created_at(id)) FROM ids}), 't',
		"$name: two hops from the primary, it shows a mark above every ID it received");
	$c->promote;
	$c->safe_psql('f', q{CREATE TABLE replicated AS SELECT id FROM ids});
	clock_behind($c, 'replicated', $name);
	pgbench_wait(burst($c, $sql, 'new', 3), "$name: a burst on it");
	no_repeat($c, 'replicated', $name);
	$c->stop;
	$b->stop;
}

# A quorum of synchronous standbys (synchronous_standby_names = 'ANY 1
# (q1, q2)'): the mark's wait for them returns when any member
# acknowledges, and holds while none can: with both stopped a next_id
# waits (SyncRep in pg_stat_activity), and the first member started again
# releases it with its ID.
sub quorum
{
	my $name = "PostgreSQL $major, a quorum of synchronous standbys";
	my $primary = insta_node('quorum', preload => 1, streaming => 1);
	setup_db($primary);
	$primary->backup('b');
	my @members = map { my $m = insta_standby($primary, $_, 'b'); insta_start($m); $m } qw(q1 q2);
	$primary->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (q1, q2)'; SELECT pg_reload_conf()");
	$primary->poll_query_until('postgres', q{SELECT count(*) = 2 FROM pg_stat_replication WHERE sync_state = 'quorum'})
	  or die 'the standbys never became quorum members';
	$primary->safe_psql('f', q{SELECT insta_id.next_id(1, 's')});
	$members[0]->stop;
	# The mark is reserved 200 ms ahead: past that, the next ID needs a new one.
	select undef, undef, undef, 0.5;
	is($primary->safe_psql('f', q{SELECT insta_id.next_id(1, 's') > 0}), 't', "$name: one member stopped, the other acknowledges the mark");
	$members[1]->stop;
	select undef, undef, undef, 0.5;
	my ($out, $err) = ('', '');
	my $mint = do {
		local %ENV = $primary->_get_env(PGAPPNAME => 'quorum_minter');
		IPC::Run::start([ 'psql', '-XAtq', '-d', $primary->connstr('f'), '-c', q{SELECT insta_id.next_id(1, 's') > 0} ],
			'>', \$out, '2>', \$err, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	};
	ok($primary->poll_query_until('postgres', q{SELECT wait_event FROM pg_stat_activity WHERE application_name = 'quorum_minter'}, 'SyncRep'),
		"$name: no member up, next_id waits for one (SyncRep)");
	insta_start($members[0]);
	$mint->finish;
	is("$out|$err", "t\n|", "$name: the first member back acknowledges the mark, and the ID comes");
	$_->stop for @members;
	$primary->stop;
}

cancelled_wait() if $major == 15 || $major == 18;
if ($major == 15 || $major == 18)
{
	failover(preload => 1, sync => 1);
	failover(preload => 1, sync => 0);
}
failover(preload => 0, sync => 1);
if ($major == 18)
{
	my $repeats = failover(preload => 1, sync => 1, version => '0.8.0', expect_repeats => 1);
	ok($repeats > 0, "0.8.0 (the mark in the data directory): the promoted standby repeats IDs ($repeats)");
	pitr(preload => 1);
	restore();
	cascade();
	quorum();
}
pitr(preload => 0) if $major == 15;

done_testing();
