# A move across a failover (issue 57): both servers of a move have a
# synchronous streaming standby, as a failover manager keeps them; on 17
# and later set up so that logical slots follow a failover
# (synchronized_standby_slots on the primary; sync_replication_slots,
# hot_standby_feedback and a dbname in primary_conninfo on the standby).
# 1. The old server fails over before the cutover: a move killed after its
#    copy, rows written on the old server, its standby promoted, rows
#    written there, the move run again with --from the promoted standby.
#    On 17 and later the move's slot followed: the re-run takes the copy up
#    (no copy again), pointing the subscription at the new primary. On 15
#    and 16 it is gone: the re-run says so, undoes the copy and copies
#    afresh. Either way every row is on the new server once.
# 2. The new server fails over within the rollback window: a move with a
#    window, rows written on the new server, its standby promoted, rows
#    written there, then --rollback against the promoted standby. On 17
#    and later the slot back followed: the shard returns to the old server
#    with every row. On 15 and 16 the old copy stopped following at the
#    failover: the rollback is refused, saying why, nothing changed, and
#    --release drops the old copy; the shard stays, every row there.
# 3. The new server fails over before the cutover: the re-run says so,
#    undoes the copy and copies afresh (what the new server's primary
#    applied, and confirmed to the old server's slot, may be missing on the
#    standby promoted).
# 4. The old server fails over during the cutover (the move killed in its
#    try, the sequences carried, the old server's COMMIT not made): the
#    re-run from the promoted standby finishes, as in 1.
# 5. The new server fails over right after the cutover: the re-run onto its
#    promoted standby raises that server's high-water mark to the old
#    server's and finishes, keeping the old copy until --release.
# 6. The old server fails over within the rollback window: the rollback is
#    refused, saying why; --release drops the old copy.
# 7. (17 and later) The old server fails over before the cutover to a
#    standby that was behind: asynchronous, not named by
#    synchronized_standby_slots, cut off from its primary after the slot
#    was synced to it, while the subscription applied rows it never had.
#    The slot followed, but the re-run sees that the subscription applied
#    past where the old timeline ended on the promoted standby: it does
#    not take the copy up, and copies afresh from the promoted standby.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $major = PostgreSQL::Test::Cluster->new('probe', install_path => InstaIdTest::install_path())->pg_version->major;
my $follows = $major >= 17;
my $fixtures = "$FindBin::RealBin/../../fixtures";

# A primary with database app and insta_id, and its synchronous standby on
# a physical slot of its own (the slots' setup for failover from 17 on).
sub pair
{
	my ($name) = @_;
	my $p = insta_node($name, preload => 1, streaming => 'logical', conf => "max_replication_slots = 20\nmax_wal_senders = 20\n");
	$p->safe_psql('postgres', 'CREATE DATABASE app');
	$p->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
	$p->safe_psql('postgres', "SELECT pg_create_physical_replication_slot('${name}_standby')");
	$p->backup('b');
	my $conninfo = 'host=' . $p->host . ' port=' . $p->port . " dbname=app application_name=${name}_standby";
	my $s = insta_standby($p, "${name}_standby", 'b', conf => "primary_slot_name = '${name}_standby'\nhot_standby_feedback = on\n"
		  . ($follows ? "sync_replication_slots = on\nprimary_conninfo = '$conninfo'\n" : ''));
	insta_start($s);
	$p->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = '${name}_standby'");
	$p->safe_psql('postgres', "ALTER SYSTEM SET synchronized_standby_slots = '${name}_standby'") if $follows;
	$p->safe_psql('postgres', 'SELECT pg_reload_conf()');
	$p->poll_query_until('postgres', "SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = '${name}_standby'")
	  or die "${name}_standby never became synchronous";
	return ($p, $s);
}

# insta-id move SHARD between two nodes, with OPTIONS: its exit status and
# output (through a file: a move killed after a step leaves sessions that
# end on their own).
my $runs = 0;
sub move
{
	my ($shard, $from, $to, @options) = @_;
	push @options, '--rollback-window', 0 unless grep { /^--rollback/ } @options;
	my $log = PostgreSQL::Test::Utils::tempdir() . '/move-' . ++$runs . '.log';
	IPC::Run::run([ 'insta-id', 'move', $shard, '--from', $from->connstr('app'), '--to', $to->connstr('app'),
		'--copy-timeout', 120, '--routing-elsewhere', @options ], '>&', $log, IPC::Run::timeout(600));
	my $st = $?;
	return (($st & 127 ? 128 + ($st & 127) : $st >> 8), slurp_file($log));
}

sub users
{
	my ($node, $shard, $n, $tag) = @_;
	$node->safe_psql('app', "INSERT INTO insta$shard.users (name) SELECT '$tag' || g FROM generate_series(1, $n) g");
}

# The shard's users: count, distinct IDs, and a digest of the rows.
sub digest
{
	my ($node, $shard) = @_;
	return $node->safe_psql('app', "SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || md5(string_agg(id || name, ',' ORDER BY id)) FROM insta$shard.users");
}

# Shard SHARD made on NODE from the template (made first if NODE lacks
# it), with 1,000 users.
sub shard_with_users
{
	my ($node, $shard) = @_;
	psql_file($node, 'app', "$fixtures/shard_template.sql")
	  if $node->safe_psql('app', q{SELECT to_regnamespace('template') IS NULL}) eq 't';
	$node->safe_psql('app', "SET client_min_messages = warning; SELECT insta_id.create_shards($shard, $shard, 'template')");
	users($node, $shard, 1000, 'before');
}

# The move of SHARD killed after STEP (INSTA_ID_MOVE_STOP_AFTER): its exit
# status and output.
sub move_killed_after
{
	my ($step, @move) = @_;
	local $ENV{INSTA_ID_MOVE_STOP_AFTER} = $step;
	return move(@move);
}

# Until NODE, a standby, has the slot its primary's SLOT synced (17+).
sub synced
{
	my ($node, $slot) = @_;
	$node->poll_query_until('app', "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = '$slot' AND synced AND NOT temporary)")
	  or die "slot $slot was never synced to " . $node->name;
}

# What is left of moves on NODE: publications, logical slots,
# subscriptions, records.
sub left_on
{
	my ($node) = @_;
	return $node->safe_psql('app', q{SELECT (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical')
		+ (SELECT count(*) FROM pg_subscription) + (SELECT count(*) FROM insta_id_admin.moves)});
}

my ($old, $old_standby) = pair('old');
my ($new, $new_standby) = pair('new');
shard_with_users($old, 1);
shard_with_users($old, 2);

# 1. The old server fails over before the cutover.
my ($rc, $out) = move_killed_after('copy', 1, $old, $new);
is($rc, 137, 'the move of shard 1 was killed after its copy') or diag($out);
users($old, 1, 100, 'old');
synced($old_standby, 'insta_move_1') if $follows;
$old->stop('immediate');
$old_standby->promote;
users($old_standby, 1, 100, 'promoted');
my $expected = digest($old_standby, 1);
($rc, $out) = move(1, $old_standby, $new);
is($rc, 0, 'the move run again from the promoted standby finished') or diag($out);
if ($follows)
{
	like($out, qr/^   the old server failed over since the move's slot was made \(timeline 1, now 2\); the slot followed it, and the subscription reads from it now$/m,
		'the slot followed the failover: the subscription reads from the promoted standby');
	unlike($out, qr/undo an interrupted move|waiting for the copy/, 'the copy was taken up, not made again');
}
else
{
	like($out, qr/^   its copy is not taken up: the old server failed over since the move's slot was made \(timeline 1, now 2\), and the slot did not follow it \(PostgreSQL 15 and 16 keep a logical slot on its primary;/m,
		'the slot was lost with the old primary: the re-run says so');
	like($out, qr/undo an interrupted move.*waiting for the copy/s, 'and copies afresh');
}
is(digest($new, 1), $expected, 'every row of shard 1, written before and after the failover, is on the new server once');
like($expected, qr/^1200 1200 /, '(1,200 rows: 1,000 copied, 100 on the old primary, 100 on the promoted standby)');
is(left_on($old_standby) . '|' . left_on($new), '0|0', 'nothing of the move is left on either server');

# 2. The new server fails over within the rollback window.
($rc, $out) = move(2, $old_standby, $new, '--rollback-window', '1h');
is($rc, 0, 'shard 2 moved with a rollback window') or diag($out);
users($new, 2, 100, 'new');
synced($new_standby, 'insta_back_2') if $follows;
$new->stop('immediate');
$new_standby->promote;
users($new_standby, 2, 100, 'promoted');
$expected = digest($new_standby, 2);
($rc, $out) = move(2, $old_standby, $new_standby, '--rollback');
if ($follows)
{
	is($rc, 0, 'the rollback against the promoted standby finished') or diag($out);
	like($out, qr/^   the new server failed over since the move \(timeline 1, now 2\); the slot back followed it, and the old server's subscription back reads from it now$/m,
		'the slot back followed the failover');
	is(digest($old_standby, 2), $expected, 'every row of shard 2, written before and after the failover, is back on the old server once');
}
else
{
	is($rc, 1, 'the rollback against the promoted standby was refused');
	like($out, qr/the new server failed over since the move \(timeline 1, now 2\), and the slot back \(insta_back_2\) did not follow it: the old server's copy stopped following shard 2 then, and a rollback would lose what was written since; nothing was changed/,
		'saying why');
	is(digest($new_standby, 2), $expected, 'nothing changed: the shard is on the promoted standby');
	($rc, $out) = move(2, $old_standby, $new_standby, '--release');
	is($rc, 0, '--release dropped the old copy') or diag($out);
	is($old_standby->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta2'}), 0, 'the old copy is gone');
	is(digest($new_standby, 2), $expected, 'every row of shard 2 stays on the new server');
}
like($expected, qr/^1200 1200 /, '(1,200 rows: 1,000 moved, 100 on the new primary, 100 on its promoted standby)');
is(left_on($old_standby) . '|' . left_on($new_standby), '0|0', 'nothing of the move is left on either server');

# 3. The new server fails over before the cutover: what its primary
# applied and confirmed to the old server's slot may be missing on the
# standby promoted, so the re-run undoes the copy and copies afresh.
my ($third, $third_standby) = pair('third');
shard_with_users($old_standby, 3);
($rc, $out) = move_killed_after('copy', 3, $old_standby, $third);
is($rc, 137, 'the move of shard 3 was killed after its copy') or diag($out);
users($old_standby, 3, 100, 'old');
$third->stop('immediate');
$third_standby->promote;
$expected = digest($old_standby, 3);
($rc, $out) = move(3, $old_standby, $third_standby);
is($rc, 0, 'the move run again onto the promoted standby finished') or diag($out);
like($out, qr/^   its copy is not taken up: the new server failed over since its copy began \(timeline 1, now 2\): rows its earlier primary applied may be missing from the copy/m,
	'the re-run says the new server failed over since its copy began');
like($out, qr/undo an interrupted move.*waiting for the copy/s, 'and copies afresh');
is(digest($third_standby, 3), $expected, 'every row of shard 3 is on the new server once');
is(left_on($old_standby) . '|' . left_on($third_standby), '0|0', 'nothing of the move is left on either server');

# 4. The old server fails over during the cutover: the move killed inside
# its try, after the sequences were carried to the new server and before
# the old server's COMMIT; the old server's standby promoted, rows written
# there; the move run again from it finishes, as in 1.
my ($fourth, $fourth_standby) = pair('fourth');
shard_with_users($fourth, 4);
($rc, $out) = move_killed_after('sequences', 4, $fourth, $third_standby);
is($rc, 137, 'the move of shard 4 was killed in its cutover, its sequences carried') or diag($out);
$fourth->poll_query_until('app', q{SELECT NOT EXISTS (SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'users' AND l.mode = 'AccessExclusiveLock')})
  or die "the killed cutover's locks were never released";
users($fourth, 4, 100, 'old');
synced($fourth_standby, 'insta_move_4') if $follows;
$fourth->stop('immediate');
$fourth_standby->promote;
users($fourth_standby, 4, 100, 'promoted');
$expected = digest($fourth_standby, 4);
($rc, $out) = move(4, $fourth_standby, $third_standby);
is($rc, 0, 'the move run again from the promoted standby finished') or diag($out);
like($out, $follows ? qr/the slot followed it, and the subscription reads from it now/ : qr/and the slot did not follow it/,
	$follows ? 'its slot had followed the failover' : 'its slot was lost: copied afresh');
is(digest($third_standby, 4), $expected, 'every row of shard 4, written before and after the failover, is on the new server once');
like($expected, qr/^1200 1200 /, '(1,200 rows: 1,000 copied, 100 on the old primary, 100 on the promoted standby)');
is(left_on($fourth_standby) . '|' . left_on($third_standby), '0|0', 'nothing of the move is left on either server');

# 5. The new server fails over right after the cutover (the move killed
# once the old server committed it): the re-run onto its promoted standby
# finishes the move, raising that server's high-water mark to the old
# server's (which covers every ID the old server issued), and keeps the old
# copy, saying why, until --release.
my ($fifth, $fifth_standby) = pair('fifth');
shard_with_users($old_standby, 5);
($rc, $out) = move_killed_after('cutover', 5, $old_standby, $fifth);
is($rc, 137, 'the move of shard 5 was killed right after its cutover') or diag($out);
$fifth->stop('immediate');
$fifth_standby->promote;
$expected = digest($old_standby, 5);
my $old_mark = $old_standby->safe_psql('app', 'SELECT insta_id.high_water_mark()');
($rc, $out) = move(5, $old_standby, $fifth_standby);
is($rc, 0, 'the move run again onto the promoted standby finished') or diag($out);
like($out, qr/^   the new server failed over since the move began \(timeline 1, now 2\): its high-water mark raised to the old server's \(\S[^)]*\), so that it issues none of the old server's IDs$/m,
	"the promoted standby's high-water mark raised to the old server's");
is($fifth_standby->safe_psql('app', "SELECT insta_id.high_water_mark() >= '$old_mark'::timestamptz"), 't', '(its mark is at or past the old server\'s)');
like($out, qr/^   WARNING:  the old server's copy of shard 5 is kept: the new server failed over since the move began/m, 'the old copy kept, saying why');
is($old_standby->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta5'}), 1, '(the old copy is there)');
is(digest($fifth_standby, 5), $expected, 'every row of shard 5 is on the new server');
($rc, $out) = move(5, $old_standby, $fifth_standby, '--release');
is($rc, 0, '--release dropped the old copy') or diag($out);
is(left_on($old_standby) . '|' . left_on($fifth_standby) . '|' . $old_standby->safe_psql('app', q{SELECT count(*) FROM pg_namespace WHERE nspname = 'insta5'}),
	'0|0|0', 'nothing of the move is left on either server, nor the old copy');

# 6. The old server fails over within the rollback window: its promoted
# standby's copy may lack rows its primary applied from the new server,
# which the slot back does not send again: the rollback is refused.
my ($sixth, $sixth_standby) = pair('sixth');
shard_with_users($sixth, 7);
($rc, $out) = move(7, $sixth, $third_standby, '--rollback-window', '1h');
is($rc, 0, 'shard 7 moved with a rollback window') or diag($out);
users($third_standby, 7, 100, 'new');
$sixth->stop('immediate');
$sixth_standby->promote;
$expected = digest($third_standby, 7);
($rc, $out) = move(7, $sixth_standby, $third_standby, '--rollback');
is($rc, 1, 'the rollback from the old server\'s promoted standby was refused');
like($out, qr/the old server failed over since the cutover \(timeline 1, now 2\): its copy of shard 7 may lack rows its earlier primary applied from the new server, which the slot back does not send again; a rollback is refused, nothing was changed/,
	'saying why');
is(digest($third_standby, 7), $expected, 'nothing changed: the shard is on the new server');
($rc, $out) = move(7, $sixth_standby, $third_standby, '--release');
is($rc, 0, '--release dropped the old copy') or diag($out);
is(left_on($sixth_standby) . '|' . left_on($third_standby), '0|0', 'nothing of the move is left on either server');

# 7. The old server fails over to a standby that was behind (17 and later).
my @seventh;
if ($follows)
{
	my ($seventh, $seventh_standby) = pair('seventh');
	@seventh = ($seventh_standby);
	shard_with_users($seventh, 8);
	($rc, $out) = move_killed_after('copy', 8, $seventh, $third_standby);
	is($rc, 137, 'the move of shard 8 was killed after its copy') or diag($out);
	synced($seventh_standby, 'insta_move_8');
	# The standby made asynchronous and left behind: its primary waits for
	# it no more (commits, and logical slots' consumers), and it is cut off
	# (no WAL receiver, no slot sync).
	$seventh->safe_psql('postgres', 'ALTER SYSTEM RESET synchronous_standby_names');
	$seventh->safe_psql('postgres', 'ALTER SYSTEM RESET synchronized_standby_slots');
	$seventh->safe_psql('postgres', 'SELECT pg_reload_conf()');
	$seventh_standby->append_conf('postgresql.conf', "primary_conninfo = ''");
	$seventh_standby->reload;
	$seventh->poll_query_until('postgres', q{SELECT NOT EXISTS (SELECT FROM pg_stat_replication WHERE application_name = 'seventh_standby')})
	  or die 'seventh_standby never left its primary';
	users($seventh, 8, 100, 'lost');
	$third_standby->poll_query_until('app', q{SELECT count(*) = 1100 FROM insta8.users})
	  or die 'the subscription never applied the rows the standby lacks';
	$seventh->stop('immediate');
	$seventh_standby->promote;
	users($seventh_standby, 8, 100, 'promoted');
	$expected = digest($seventh_standby, 8);
	($rc, $out) = move(8, $seventh_standby, $third_standby);
	is($rc, 0, 'the move run again from the standby promoted behind finished') or diag($out);
	like($out, qr/^   its copy is not taken up: the old server failed over since the move's slot was made \(timeline 1, now 2\), and its slot followed, but its subscription insta_move_8 applied changes up to \S+, past \S+, where timeline 1 ended on the server promoted: rows that server never had$/m,
		'the slot followed, but the subscription had applied past the promoted standby: the copy is not taken up');
	like($out, qr/undo an interrupted move.*waiting for the copy/s, 'and is made afresh');
	is(digest($third_standby, 8), $expected, 'the new server holds shard 8 as the promoted standby has it, every row once');
	like($expected, qr/^1100 1100 /, '(1,100 rows: 1,000 copied, 100 on the promoted standby; the 100 only its lost primary had are gone with it)');
	is(left_on($seventh_standby) . '|' . left_on($third_standby), '0|0', 'nothing of the move is left on either server');
}

$_->stop for $old_standby, $new_standby, $third_standby, $fourth_standby, $fifth_standby, $sixth_standby, @seventh;
done_testing();
