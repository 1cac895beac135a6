# Several real servers, one logical design (the fleet of make cluster-demo:
# 3 servers, 300 logical shards from one template, scripts/demo/fleet_server.sql
# on each, a PL/Proxy router, scripts/demo/fleet_router.sql, on the first;
# PL/Proxy is packaged for PostgreSQL 15 only):
# - writers on all servers at once, directly and through the router: every
#   ID collected from all servers is unique, decodes to the shard whose table
#   holds it, carries the time it was written, and routed writes land on the
#   server the map names;
# - logical shard 150 moves from server 2 to server 3 (README procedure, the
#   router's map as the lock-out); writes resume there, no ID repeats;
# - a fourth server, and shards 25, 125 and 225 (one from each server) moved
#   onto it online (insta-id move --router) while a client keeps
#   inserting into them through the router, retrying what fails; the third
#   move is killed after the map switch and run again;
# - a streaming standby of server 3 refuses next_id like nextval (25006),
#   and after promotion mints IDs that repeat none of the primary's.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $repo = "$FindBin::RealBin/../../..";
my $load = $ENV{SECONDS_OF_LOAD} || 5;
my $probe = PostgreSQL::Test::Cluster->new('probe', install_path => InstaIdTest::install_path());
plan skip_all => 'PL/Proxy is packaged for PostgreSQL 15 only' unless $probe->pg_version->major == 15;

# A server of the fleet holding shards FIRST..LAST (none without them). A
# moved shard's three tables are copied at once (the default, 2, leaves the
# third waiting), and a table copied under writes is handed over to the
# subscription's stream without a 5 s wait (docs/shards.md).
my @servers;
sub server
{
	my ($n, $first, $last) = @_;
	my $node = insta_node("fleet$n", preload => 1, conf => "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n"
		  . "max_sync_workers_per_subscription = 3\nwal_retrieve_retry_interval = '200ms'\n");
	$node->safe_psql('postgres', 'CREATE DATABASE app');
	$node->safe_psql('app', 'SET client_min_messages = warning; CREATE EXTENSION insta_id');
	psql_file($node, 'app', "$repo/tests/fixtures/shard_template.sql", "$repo/scripts/demo/fleet_server.sql");
	$node->safe_psql('app', "SELECT insta_id.create_shards($first, $last, 'template')") if defined $first;
	$servers[$n] = $node;
	return $node;
}
# Server N's database app, as the router's map and the moves name it.
sub app { my $node = $servers[ $_[0] ]; return sprintf 'host=%s port=%d dbname=app', $node->host, $node->port; }
server($_, ($_ - 1) * 100 + 1, $_ * 100) for 1 .. 3;
my $router = $servers[1];
$router->safe_psql('postgres', 'CREATE DATABASE router');
$router->safe_psql('router', 'SET client_min_messages = warning; CREATE EXTENSION insta_id; CREATE EXTENSION plproxy');
psql_file($router, 'router', "$repo/scripts/demo/fleet_router.sql");
$router->safe_psql('router', join ";\n",
	(map { "INSERT INTO shard_map (shard_id, server, connstr) SELECT s, $_, '" . app($_) . "' FROM generate_series(" . (($_ - 1) * 100 + 1) . ', ' . ($_ * 100) . ') s' } 1 .. 3),
	'SELECT bump_map_version()');

# All users of all servers into collect.users on server 1.
sub collect
{
	$router->safe_psql('postgres', 'SET client_min_messages = warning; DROP DATABASE IF EXISTS collect; CREATE DATABASE collect');
	$router->safe_psql('collect', 'CREATE EXTENSION insta_id; CREATE TABLE users (server int, shard int, id bigint, written_at timestamptz)');
	for my $n (1 .. 3)
	{
		my $rows = $servers[$n]->safe_psql('app', "SELECT $n, shard, id, written_at FROM all_users()");
		$router->safe_psql('collect', "COPY users FROM STDIN (DELIMITER '|');\n$rows\n\\.\n");
	}
}
sub collected { return $router->safe_psql('collect', $_[0]); }

# Writers everywhere at once: 2 clients per server writing 10 rows per
# statement into random shards of that server, and 2 clients writing single
# rows through the router to random logical shards.
my @runs = map { pgbench_start($servers[$_], 'app', 'SELECT write_random(10);', '-c', 2, '-j', 1, '-T', $load) } 1 .. 3;
push @runs, pgbench_start($router, 'router', "\\set s random(1, 300)\nSELECT insert_user(:s, 'routed');", '-c', 2, '-j', 1, '-T', $load);
pgbench_wait($_, 'pgbench ran') for @runs;

collect();
note collected(q{SELECT count(*) || ' IDs from ' || count(DISTINCT server) || ' servers, ' || count(DISTINCT shard) || ' shards' FROM users});
is(collected('SELECT count(DISTINCT server) = 3 AND bool_and(n > 1000) FROM (SELECT server, count(*) n FROM users GROUP BY server) s'),
	't', 'every server and the router wrote');
is(collected('SELECT count(*) - count(DISTINCT id) FROM users'), 0, 'every ID from all servers is unique');
is(collected('SELECT count(*) FROM users WHERE insta_id.shard_id(id) <> shard'), 0, 'every ID decodes to the shard whose table holds it');
# Time order: the time field of every ID is when its row was written (the ID
# is minted first, written_at a moment later in the same row), so sorting by
# ID sorts by write time to the millisecond (up to a preempted writer's delay).
is(collected(q{SELECT count(*) FROM users WHERE insta_id.created_at(id) > written_at OR insta_id.created_at(id) < written_at - interval '1 second'}),
	0, "every ID's time field is the moment its row was written (within 1 s before written_at)");
is(collected('SELECT count(*) FROM users u WHERE u.server <> (u.shard - 1) / 100 + 1'), 0,
	'routed writes landed on the server the map names (shards 1-100: 1, 101-200: 2, 201-300: 3)');

# Move logical shard 150 from server 2 to server 3.
# 1. Lock writers out: the router's map sends shard 150 nowhere.
$router->safe_psql('router', q{UPDATE shard_map SET connstr = 'host=/nonexistent dbname=shard_150_moving' WHERE shard_id = 150; SELECT bump_map_version()});
like(error_of($router, 'router', q{SELECT insert_user(150, 'x')}), qr/shard_150_moving/, 'during the move, writes to shard 150 fail');
# 2.-4. Dump, restore, adopt.
my $dump = $router->basedir . '/insta150.dump';
{
	local %ENV = $servers[2]->_get_env();
	system_or_bail('pg_dump', '-Fc', '-n', 'insta150', '-f', $dump, '-d', app(2));
	system_or_bail('pg_restore', '-d', app(3), $dump);
}
$servers[3]->safe_psql('app', q{SELECT insta_id.adopt_shard('insta150', 150)});
# 5. Point the map at server 3.
$router->safe_psql('router', q{UPDATE shard_map SET server = 3, connstr = (SELECT connstr FROM shard_map WHERE shard_id = 300) WHERE shard_id = 150;
	SELECT bump_map_version()});
is($router->safe_psql('router', q{SELECT insta_id.shard_id(insert_user(150, 'moved'))}) . '|'
	  . $servers[3]->safe_psql('app', q{SELECT count(*) FROM insta150.users WHERE name = 'moved'}),
	'150|1', 'after the move, routed writes to shard 150 land on server 3');
$router->safe_psql('router', q{SELECT insert_user(150, 'moved') FROM generate_series(1, 200)});
$servers[2]->safe_psql('app', 'SET client_min_messages = warning; SELECT insta_id.drop_shard(150, force => true)');
collect();
is(collected('SELECT count(*) - count(DISTINCT id) FROM users'), 0, 'after the move, still no ID repeats anywhere');
is(collected(q{SELECT string_agg(DISTINCT server::text, ',') || ' ' || (count(*) FILTER (WHERE written_at > now() - interval '1 minute' AND id > 0) >= 201)
	FROM users WHERE shard = 150}),
	'3 true', 'shard 150 lives on server 3 only, with its old rows and 201 new ones');

# Online moves: a fourth server, and logical shards 25, 125 and 225 (one from
# each server) moved onto it while a client keeps inserting into them
# through the router, retrying what fails; the third move is killed after
# the router's map switch and run again.
server(4);
my $work = $router->basedir;
my $writer_script = q{
	ok=0; failed=0; until=$((SECONDS + 600))
	while [ ! -e "$STOP" ] && [ $SECONDS -lt $until ]; do
	  for s in 25 125 225; do
	    until psql -X -qtA "$ROUTER" -c "SELECT $s, insert_user($s, 'writer'), clock_timestamp()" >>"$OUT" 2>/dev/null; do
	      failed=$((failed + 1))
	      [ ! -e "$STOP" ] && [ $SECONDS -lt $until ] || break 2
	      sleep 0.01
	    done
	    ok=$((ok + 1))
	  done
	done
	echo "$ok $failed"
};
my %writer = (out => '');
{
	local %ENV = (%ENV, STOP => "$work/stop", OUT => "$work/routed", ROUTER => $router->connstr('router'));
	$writer{run} = IPC::Run::start([ 'bash', '-c', $writer_script ], '>', \$writer{out});
}
$servers[1]->poll_query_until('app', q{SELECT count(*) > 0 FROM insta25.users WHERE name = 'writer'}) or die 'the routed writer did not write';
# insta-id move --router, from the server holding the shard to 4.
sub move
{
	my ($shard, $from, %env) = @_;
	local %ENV = (%ENV, %env);
	my $log = "$work/move-$shard.log";
	IPC::Run::run([ 'insta-id', 'move', $shard, '--from', app($from), '--to', app(4), '--copy-timeout', 120, '--rollback-window', 0,
			'--router', $router->connstr('router'), '--router-target', app(4) ],
		'>>&', $log);
	return $? & 127 ? 128 + ($? & 127) : $? >> 8;    # as a shell says it: 137 for a kill -9
}
my @rcs = (move(25, 1), move(125, 2), move(225, 3, INSTA_ID_MOVE_STOP_AFTER => 'map'));
move_released($_, 225) for $servers[3], $servers[4];
push @rcs, move(225, 3);
append_to_file("$work/stop", '');
$writer{run}->finish;
note slurp_file("$work/move-125.log") . slurp_file("$work/move-225.log");
my ($routed_ok, $routed_failed) = split ' ', $writer{out};
note "routed writer: $routed_ok rows committed, $routed_failed attempts failed and were retried";
is("@rcs", '0 0 137 0', 'the moves succeeded; the one killed after the map switch finished when run again');
is($router->safe_psql('router', 'SELECT string_agg(server::text, \',\' ORDER BY shard_id) FROM shard_map WHERE shard_id IN (25, 125, 225)'),
	'4,4,4', 'the map sends the three shards to server 4');
is($servers[4]->safe_psql('app', q{SELECT sum(n) FROM (SELECT count(*) n FROM insta25.users WHERE name = 'writer' UNION ALL
	SELECT count(*) FROM insta125.users WHERE name = 'writer' UNION ALL SELECT count(*) FROM insta225.users WHERE name = 'writer') x}),
	$routed_ok, 'every row the client committed through the router is on server 4, once');
my @routed = map { [ split /\|/ ] } grep { /\S/ } split /\n/, slurp_file("$work/routed");
my %seen;
is(scalar(grep { $seen{ $_->[1] }++ } @routed) . '|' . scalar(@routed), "0|$routed_ok", 'no ID repeats among them');
is(join(' ', map { $servers[$_]->safe_psql('app', 'SELECT (SELECT count(*) FROM insta_id.shards() WHERE shard_id IN (25, 125, 225))
	+ (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_slots)') } 1 .. 3)
	  . ' ' . $servers[4]->safe_psql('app', 'SELECT count(*) FROM pg_subscription'),
	'0 0 0 0', 'the old servers hold none of them, and no publication, slot or subscription is left');
my $times = join ',', map { "'$_->[2]'::timestamptz" } @routed;
my $gap = $router->safe_psql('router', "SELECT extract(epoch FROM max(t - p)) FROM (SELECT t, lag(t) OVER (ORDER BY t) p FROM unnest(ARRAY[$times]) t) y");
note "longest gap between two routed writes: $gap s";
cmp_ok($gap, '<', 30, 'the longest gap is under 30 s (a bound, not a measurement)');

# A streaming standby of server 3, then a failover.
my $primary = $servers[3];
$primary->backup('base', backup_options => [ '--checkpoint=fast' ]);
my $standby = PostgreSQL::Test::Cluster->new('fleet3_standby', install_path => InstaIdTest::install_path());
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
my $primary_last = $primary->safe_psql('app', 'SELECT max(id) FROM insta150.users');
my $primary_seq  = $primary->safe_psql('app', 'SELECT last_value FROM insta150.users_id_seq');
$primary->wait_for_catchup($standby);
is(sqlstate($standby, 'app', q{SELECT insta_id.next_id(150, 'insta150.users_id_seq')}), '25006', 'on a hot standby, next_id fails like nextval (25006)');
$primary->stop('immediate');
$standby->promote;
my $new = $standby->safe_psql('app', q{INSERT INTO insta150.users (name) SELECT 'after failover' FROM generate_series(1, 100) RETURNING id});
is($standby->safe_psql('app', q{SELECT count(*) FROM insta150.users WHERE name = 'after failover' AND insta_id.shard_id(id) = 150}), 100,
	'after promotion, the new primary mints IDs for shard 150');
is(collected('SELECT count(*) FROM users WHERE id = ANY (ARRAY[' . join(',', split /\n/, $new) . '])'), 0, 'and none repeats an ID of the old primary');
is($standby->safe_psql('app', "SELECT last_value - 99 > $primary_seq FROM insta150.users_id_seq"), 't',
	"the new primary's sequence went on above every value the old one handed out ($primary_seq)");
$standby->stop;
$_->stop for grep { defined && $_ != $primary } @servers;

done_testing();
