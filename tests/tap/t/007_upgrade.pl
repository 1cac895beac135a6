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
$node->stop;

done_testing();
