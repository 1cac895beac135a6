# How far IDs may run ahead of the clock (insta_id.max_lead, default 1 s),
# on a real server with its clock moved by libfaketime, preloaded and not.
# An unprivileged role (mallory, its own database) mints in a loop from
# sequences of every shape, including those that repeat one residue
# (INCREMENT BY 1024, a CYCLE of 4 values) and so borrow a millisecond on
# every call once IDs are ahead of the clock:
#   1. after a superuser raised the mark 2 s ahead (as a shard move does);
#   2. right after a restart that followed its own loop, from two sessions
#      at once (both start ahead of the clock: their milliseconds ahead of
#      it must not overlap);
#   3. with the clock stepped back 3 s under the running server.
# Each time: no ID is more than max_lead past its session's clock (read in
# the same row, right after), the durable mark never more than max_lead plus
# its 200 ms reservation past the clock, and no sequence repeats an ID.
# After the restart, another role in another database stays within the
# bound too. (0.8.0: 24 minutes ahead after 2 s of such a loop.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $lead_ms    = 1000;    # insta_id.max_lead's default: the server does not set it
my $reserve_ms = 200;     # mark::STEP_MS

sub setup
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
		SET client_min_messages = error;
		CREATE EXTENSION insta_id;
		CREATE ROLE mallory LOGIN;
		CREATE ROLE alice LOGIN;
		CREATE DATABASE mdb OWNER mallory;
		CREATE DATABASE adb OWNER alice;
	});
	$node->safe_psql($_, 'SET client_min_messages = error; CREATE EXTENSION insta_id') for qw(mdb adb);
	$node->safe_psql('mdb', q{
		SET ROLE mallory;
		-- Every shape of sequence next_id accepts.
		CREATE SEQUENCE s_plain;
		CREATE SEQUENCE s_by1024 INCREMENT BY 1024;
		CREATE SEQUENCE s_cycle MINVALUE 0 MAXVALUE 3 CYCLE;
		CREATE SEQUENCE s_desc INCREMENT BY -1 MINVALUE 0 MAXVALUE 1000000 START 1000000;
		CREATE SEQUENCE s_cached CACHE 50;
		CREATE SEQUENCE s_by7 INCREMENT BY 7;
		-- at: the session's clock read right after next_id returned (the
		-- subquery is evaluated before the outer select list).
		CREATE TABLE minted (scenario text, seq text, id bigint, at timestamptz);
		CREATE FUNCTION mint(scenario text, n int) RETURNS void LANGUAGE sql AS $$
		  INSERT INTO minted
		  SELECT scenario, seq, id, clock_timestamp()
		  FROM (SELECT seq, insta_id.next_id(0, seq::regclass) AS id
		        FROM generate_series(1, n), unnest(ARRAY['s_plain', 's_by1024', 's_cycle', 's_desc', 's_cached', 's_by7']) seq
		        OFFSET 0) x
		$$;
	});
	$node->safe_psql('adb', 'SET ROLE alice; CREATE SEQUENCE a; CREATE TABLE minted (id bigint, at timestamptz)');
}

# What mallory's session runs: as mallory, not as the superuser.
sub as_mallory
{
	my ($node, $sql) = @_;
	return $node->safe_psql('mdb', $sql, extra_params => [ '-U', 'mallory' ]);
}

sub checks
{
	my ($node, $label, $scenario) = @_;
	# The mark of the database the IDs were made in (each has its own; one
	# with no ID has none).
	my $mark = $node->safe_psql('mdb',
		'SELECT round(extract(epoch FROM insta_id.high_water_mark() - clock_timestamp()) * 1000)');
	like($mark, qr/^-?\d+$/, "$label: the database has a mark");
	note "$label: "
	  . as_mallory($node, "SELECT count(*) || ' IDs, at most ' || round(extract(epoch FROM max(insta_id.created_at(id) - at)) * 1000) || ' ms ahead of their clock' FROM minted WHERE scenario = '$scenario'")
	  . "; mark $mark ms ahead";
	is(as_mallory($node, "SELECT count(*) FROM minted WHERE scenario = '$scenario' AND insta_id.created_at(id) > at + interval '$lead_ms ms'"),
		0, "$label: no ID more than max_lead ($lead_ms ms) ahead of its session's clock");
	cmp_ok($mark, '<=', $lead_ms + $reserve_ms, "$label: the mark is at most max_lead + $reserve_ms ms ahead of the clock");
	is(as_mallory($node, "SELECT count(*) FROM (SELECT seq, id FROM minted WHERE scenario <> 'restarted' GROUP BY seq, id HAVING count(*) > 1) d"),
		0, "$label: no sequence repeats an ID (of those minted one session at a time)");
}

for my $config ([ 'preloaded', 1 ], [ 'not preloaded', 0 ])
{
	my ($name, $preload) = @$config;
	my $node = insta_node('lead_' . ($preload ? 'preloaded' : 'not_preloaded'), preload => $preload, faketime => 1);
	setup($node);
	my $mode = $node->safe_psql('postgres', 'SELECT insta_id.guard_mode()');

	my $l = "$name ($mode guard), mark raised 2 s ahead";
	# The requested time (the function returns the mark on disk, 200 ms above).
	# Raised in mallory's database: the mark is each database's own.
	my $raised = $node->safe_psql('mdb',
		"SELECT date_trunc('milliseconds', t) FROM (SELECT clock_timestamp() + interval '2 s' t) x, insta_id.raise_high_water_mark(t)");
	as_mallory($node, "SELECT mint('raised', 1500)");
	is(as_mallory($node, "SELECT min(insta_id.created_at(id)) > '$raised' FROM minted WHERE scenario = 'raised'"),
		't', "$l: every ID is above the raised mark (so each waited for the clock, below)");
	checks($node, $l, 'raised');

	$l = "$name ($mode guard), right after a restart";
	as_mallory($node, "SELECT mint('before restart', 1500)");
	InstaIdTest::insta_start($node, 'restart');
	# Two sessions at once: the second is started before the first is waited for.
	my $other = $node->background_psql('mdb', extra_params => [ '-U', 'mallory' ]);
	$other->query_until(qr/started/, "\\echo started\nSELECT mint('restarted', 1500);\n");
	as_mallory($node, "SELECT mint('restarted', 1500)");
	$other->quit;
	checks($node, $l, 'restarted');
	# IDs issued ahead of their session's clock (the clock read after them is
	# still behind): every one distinct.
	is(as_mallory($node, "SELECT count(*) FROM (SELECT 1 FROM minted WHERE scenario = 'restarted' AND insta_id.created_at(id) > at GROUP BY seq, id HAVING count(*) > 1) d"),
		0, "$l: two sessions at once, no ID ahead of the clock repeated");
	is(as_mallory($node, "SELECT count(*) FROM minted WHERE scenario = 'restarted'"),
		2 * 1500 * 6, "$l: both sessions minted all their IDs");
	note "$l: " . as_mallory($node, "SELECT count(*) FROM minted WHERE scenario = 'restarted' AND insta_id.created_at(id) > at") . " IDs ahead of their clock";
	$node->safe_psql('adb', "INSERT INTO minted SELECT id, clock_timestamp() FROM (SELECT insta_id.next_id(5, 'a') id FROM generate_series(1, 2000) OFFSET 0) x",
		extra_params => [ '-U', 'alice' ]);
	is($node->safe_psql('adb', "SELECT count(*) FROM minted WHERE insta_id.created_at(id) > at + interval '$lead_ms ms'"),
		0, "$l: another role's IDs in another database stay within max_lead too");
	is($node->safe_psql('adb', 'SELECT count(*) - count(DISTINCT id) FROM minted'), 0, "$l: ... and are distinct");

	$l = "$name ($mode guard), clock stepped back 3 s";
	clock_offset($node, '-3');
	as_mallory($node, "SELECT mint('stepped back', 1500)");
	checks($node, $l, 'stepped back');
	is(as_mallory($node, "SELECT (SELECT min(id >> 23) FROM minted WHERE scenario = 'stepped back' AND seq = 's_plain')
	                          >= (SELECT max(id >> 23) FROM minted WHERE scenario <> 'stepped back' AND seq = 's_plain')"),
		't', "$l: no ID went back in time with the clock");
	clock_offset($node, '+0');
	$node->stop;
}

done_testing();
