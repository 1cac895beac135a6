# Releases as a chain, checked in full (sql/: a base script and upgrades):
# 1. Every earlier version installs from the base script along the chain
#    (CREATE EXTENSION insta_id VERSION '<old>'), works with this library (a
#    newer package installed under a running server serves every database
#    until each is updated), and after ALTER EXTENSION UPDATE has exactly the
#    objects of a fresh install: tests/fixtures/describe_extension.sql, every
#    function's whole definition, views, tables by column, grants, comments.
# 2. The check cannot miss (PostgreSQL 18+, whose extension_control_path
#    lets a test install a script of its own): an upgrade script that leaves
#    out one function changed in src/ makes it fail, naming that function.
# 3. A move under way across the update (below).
# 4. raise_high_water_mark's bound and its override (last).
# (scripts/dev/release.sh check, run by make check before this, proves the
# released scripts unchanged.)
use strict;
use warnings;
use File::Copy qw(copy);
use File::Path qw(make_path);
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $version  = $ENV{INSTA_ID_VERSION} or die 'INSTA_ID_VERSION is not set';
my $sql      = "$FindBin::RealBin/../../../sql";
my $describe = slurp_file("$FindBin::RealBin/../../fixtures/describe_extension.sql");
my $node     = insta_node('upgrade', preload => 1);
my $extdir   = $node->config_data('--sharedir') . '/extension';
sub describe { return $node->safe_psql($_[0], $describe); }
sub extversion { return $node->safe_psql($_[0], q{SELECT extversion FROM pg_extension WHERE extname = 'insta_id'}); }

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION insta_id');
my $fresh = describe('fresh');
is(extversion('fresh'), $version, "fresh install is version $version");
my ($ret, $out, $err) = $node->psql('fresh', 'ALTER EXTENSION insta_id UPDATE');
like($err, qr/NOTICE:  version "\Q$version\E" of extension "insta_id" is already installed/,
	'ALTER EXTENSION UPDATE on the newest version says so');
same_text(describe('fresh'), $fresh, '... and changes nothing');

# The versions: the base script's and every upgrade script's target.
sub by_version { my @x = split /\./, $a; my @y = split /\./, $b; $x[0] <=> $y[0] || $x[1] <=> $y[1] || $x[2] <=> $y[2] }
my @scripts = map { s{.*/}{}r } glob "$sql/insta_id--*.sql";
my @bases   = grep { !/--.*--/ } @scripts;
my %seen;
my @earlier = sort by_version grep { $_ ne $version && !$seen{$_}++ } map { /--([^-]+)\.sql$/ } @scripts;
is("@bases $earlier[0]", 'insta_id--0.1.0.sql 0.1.0', 'the chain starts at the one base script and has every release since');

for my $old (@earlier)
{
	my $db = 'from_' . ($old =~ tr/./_/r);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION insta_id VERSION '$old'");
	is($node->safe_psql($db, q{CREATE SEQUENCE before_update; SELECT (insta_id.id_parts(insta_id.next_id(9, 'before_update'))).shard_id}),
		9, "$old SQL with the $version library: mints and decodes IDs");
	$node->safe_psql($db, 'ALTER EXTENSION insta_id UPDATE');
	is(extversion($db), $version, "$old -> $version: version after UPDATE");
	same_text(describe($db), $fresh, "$old -> $version: the objects of a fresh install, in full");
	is($node->safe_psql($db, q{CREATE SEQUENCE s; SELECT insta_id.shard_id(insta_id.next_id(7, 's'))}), 7, "$old -> $version: mints IDs");
}

# 3. From 0.9.0 with a move under way (0.10.0 fences a copy's sequences):
#    0.9.0's one-argument raise_high_water_mark on this library takes the
#    default slack (it must not read an argument that is not there), and
#    the update fences the copies the database has: the one kept for a
#    rollback and the one arriving.
if (grep { $_ eq '0.9.0' } @earlier)
{
	$node->safe_psql('postgres', 'CREATE DATABASE copies');
	$node->safe_psql('copies', "SET client_min_messages = warning; CREATE EXTENSION insta_id VERSION '0.9.0'");
	is($node->safe_psql('copies', q{SELECT insta_id.raise_high_water_mark(clock_timestamp()) IS NOT NULL}), 't',
		"0.9.0 SQL with the $version library: raise_high_water_mark(at) works");
	like(error_of($node, 'copies', q{SELECT insta_id.raise_high_water_mark(clock_timestamp() + interval '2 minutes')}),
		qr/^ERROR:  22023: the high-water mark may be raised to at most \d+ ms ahead of this server's clock \(insta_id.max_lead \d+ ms \+ slack 60000 ms\)$/m,
		'... and refuses a mark beyond max_lead and the default slack (22023)');
	$node->safe_psql('copies', q{
		CREATE SCHEMA kept; CREATE SEQUENCE kept.t_id_seq; SELECT nextval('kept.t_id_seq');
		CREATE SCHEMA arriving; CREATE SEQUENCE arriving.t_id_seq;
		INSERT INTO insta_id_admin.moves (shard_id, side, schema_name, peer, step, started_at, steps, reserve_until)
		VALUES (5, 'leaving', 'kept', 'new:5432/app', 'reserved', now(), '[]', now() + interval '1 hour'),
		       (6, 'arriving', 'arriving', 'old:5432/app', 'copied', now(), '[]', NULL)});
	is($node->safe_psql('copies', q{SELECT nextval('kept.t_id_seq')}), 2, 'a copy kept by 0.9.0 mints');
	$node->safe_psql('copies', 'ALTER EXTENSION insta_id UPDATE');
	my $refused = join '', map { error_of($node, 'copies', $_) }
	  q{SELECT insta_id.next_id(5, 'kept.t_id_seq')}, q{SELECT nextval('kept.t_id_seq')},
	  q{SELECT insta_id.next_id(6, 'arriving.t_id_seq')}, q{SELECT nextval('arriving.t_id_seq')};
	like($refused, qr/^ERROR:  55006: sequence kept\.t_id_seq belongs to a copy of shard 5 that this server does not hold\n.*^HINT:  Shard 5 is on new:5432\/app: .*^ERROR:  2200H: .*^ERROR:  55006: sequence arriving\.t_id_seq belongs to a copy of shard 6 .*^HINT:  Shard 6 is on old:5432\/app: .*^ERROR:  2200H: /ms,
		'0.9.0 -> 0.10.0 fences the copies under way: next_id refuses (55006) naming the holder, nextval fails (2200H)')
	  or diag $refused;
}

SKIP:
{
	skip 'the stale-script proof needs extension_control_path (PostgreSQL 18+)', 1 if $node->pg_version < 18;
	# A stale upgrade script: this version's, less the first function of the
	# last release it re-creates (as if that function's body had changed in
	# src/ only), installed with the others in a directory of the test's as
	# an upgrade to '<version>-stale'.
	my $prev = $earlier[-1];
	$node->safe_psql('postgres', 'CREATE DATABASE stale');
	$node->safe_psql('stale', "CREATE EXTENSION insta_id VERSION '$prev'");
	my %of_prev = map { $_ => 1 } split /\n/,
	  $node->safe_psql('stale', q{SELECT oid::regproc::text FROM pg_proc WHERE pronamespace = 'insta_id'::regnamespace});
	my $upgrade = slurp_file("$sql/insta_id--$prev--$version.sql");
	my $left_out;
	while ($upgrade =~ /^CREATE OR REPLACE FUNCTION (insta_id\.\w+)\(.*?^\$\$;\n/msg)
	{
		next unless $of_prev{$1};
		$left_out = $1;
		substr($upgrade, $-[0], $+[0] - $-[0]) = '';
		last;
	}
	die 'the upgrade script re-creates no SQL-bodied function of the last release: give the stale-script test another mutation'
	  unless $left_out;
	my $dir = $node->basedir . '/stale';
	make_path("$dir/extension");
	copy($_, "$dir/extension/") or die "$_: $!" for glob "$extdir/insta_id{.control,--*.sql}";
	append_to_file("$dir/extension/insta_id--$prev--$version-stale.sql", $upgrade);
	$node->safe_psql('stale', "SET extension_control_path = '$dir:\$system'; ALTER EXTENSION insta_id UPDATE TO '$version-stale'");
	my %fresh = map { $_ => 1 } split /\n/, $fresh;
	my %stale = map { $_ => 1 } split /\n/, describe('stale');
	my %differ = map { /^function ([^(]+)\(/ ? ($1 => 1) : () } (grep { !$stale{$_} } keys %fresh), (grep { !$fresh{$_} } keys %stale);
	is(join(' ', sort keys %differ) || 'nothing', $left_out,
		"$prev -> $version with a script stale in $left_out: the check fails, naming $left_out alone");
}
# 4. The bound's explicit override, last (the raise holds every database of
#    this server ahead of its clock until the clock gets there): a mark two
#    minutes ahead is refused by default, accepted with slack, and then
#    every next_id of the server waits for the clock (here, with
#    on_overflow = error, refuses at once: 54000), which is what a
#    mistaken raise costs.
{
	my $ahead = q{clock_timestamp() + interval '2 minutes'};
	like(error_of($node, 'fresh', "SELECT insta_id.raise_high_water_mark($ahead)"), qr/^ERROR:  22023: /m,
		'a mark 2 minutes ahead: refused by default (22023)');
	is($node->safe_psql('fresh', "SELECT insta_id.raise_high_water_mark($ahead, slack => interval '3 minutes') > clock_timestamp() + interval '1 minute'"),
		't', '... accepted with slack => 3 minutes');
	like(error_of($node, 'fresh', q{SET insta_id.on_overflow = error; CREATE SEQUENCE after_raise; SELECT insta_id.next_id(1, 'after_raise')}),
		qr/^ERROR:  54000: /m, '... after which next_id waits for the clock (on_overflow = error: 54000 at once)');
}

$node->stop;

done_testing();
