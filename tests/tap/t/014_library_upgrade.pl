# A package installed under a running server (issue 42): sessions of an
# older release's library and sessions of this one's, on one sequence.
# The older libraries are built from their commits in sql/RELEASES (make
# test-library-upgrade: scripts/dev/build.sh release-library). In a copy of
# the installation under test the older library is insta_id.so when the
# server starts; this one's is renamed over it while two sessions of the
# older one burst on a sequence, as dpkg does, and two new sessions then
# burst on the same sequence:
# - preloaded, 0.8.0 and 0.9.0: every session runs the postmaster's library:
#   both pairs mint, 0 repeated IDs;
# - not preloaded, 0.9.0 (the same guard layout, shared): both mint, 0
#   repeats;
# - not preloaded, 0.8.0 (another layout): the new sessions refuse next_id
#   (55000, naming the restart) and mint nothing: 0 repeats; and, the other
#   way round, sessions of 0.8.0 started after this library's refuse with
#   their own 55000;
# after a restart every session runs this library and mints.
# (On 15 and 16 the guard of 0.9.0 and earlier is per session: there this
# library refuses in a database where such sessions minted in the run; not
# tested here, where the bursts are on 17 and 18.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $repo  = "$FindBin::RealBin/../../..";
my $major = PostgreSQL::Test::Cluster->new('probe', install_path => InstaIdTest::install_path())->pg_version->major;
my %old   = map { $_ => "$repo/target/previous/$_/pg$major/ci/insta_id.so" } qw(0.8.0 0.9.0);
plan skip_all => "the older libraries are not built (make test-library-upgrade builds them): @{[ values %old ]}"
  unless (grep { -f } values %old) == 2;

# A copy of the installation under test, whose insta_id.so tests swap.
my $install = PostgreSQL::Test::Utils::tempdir_short() . '/install';
my $source  = InstaIdTest::install_path();
mkdir $install or die $!;
system('cp', '-a', "$source/bin", "$source/lib", "$source/share", "$install/") == 0 or die 'cp failed';
my $pkglib = `$install/bin/pg_config --pkglibdir`;
chomp $pkglib;
my $current = "$pkglib/insta_id.so.current";
system('cp', "$source/lib/insta_id.so", $current) == 0 or die 'cp failed';

# Puts LIBRARY in place as insta_id.so by a rename, as a package does.
sub install_library
{
	my ($library) = @_;
	system('cp', $library, "$pkglib/insta_id.so.new") == 0 or die 'cp failed';
	rename("$pkglib/insta_id.so.new", "$pkglib/insta_id.so") or die $!;
}

my $burst = "INSERT INTO ids SELECT insta_id.next_id(1, 's'), :gen FROM generate_series(1, 2000);";

# Two sessions of the library in place (generation 1), then LIBRARY renamed
# over it and two new sessions (generation 2), on one sequence. Returns
# pgbench's stderr of generation 2.
sub two_generations
{
	my ($node, $library) = @_;
	$node->safe_psql('postgres', 'TRUNCATE ids');
	my $first = pgbench_start($node, 'postgres', $burst, '-c', 2, '-j', 2, '-T', 6, '-D', 'gen=1');
	$node->poll_query_until('postgres', 'SELECT count(DISTINCT id >> 23) > 2 FROM ids') or die 'generation 1 did not mint';
	install_library($library);
	my $second = pgbench_start($node, 'postgres', $burst, '-c', 2, '-j', 2, '-T', 3, '-D', 'gen=2');
	pgbench_wait($second);
	pgbench_wait($first);
	return $second->{err};
}

# Per generation, the IDs it minted, and the repeats among all.
sub minted
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE gen = 1) > 0, count(*) FILTER (WHERE gen = 2) > 0, count(*) - count(DISTINCT id) FROM ids});
}

sub case
{
	my ($old, $preload) = @_;
	my $l = "${old}'s library, then this one's, " . ($preload ? 'preloaded' : 'not preloaded');
	install_library($old{$old});
	my $node = insta_node('lib_' . ($old =~ tr/./_/r) . ($preload ? '_preloaded' : ''), preload => $preload,
		pg_config => "$install/bin/pg_config");
	$node->safe_psql('postgres', qq{SET client_min_messages = warning; CREATE EXTENSION insta_id VERSION '$old';
		CREATE SEQUENCE s; CREATE UNLOGGED TABLE ids (id bigint, gen int)});
	my $err = two_generations($node, $current);
	note "$l: " . $node->safe_psql('postgres', q{SELECT string_agg(n || ' IDs of generation ' || gen, ', ' ORDER BY gen) FROM (SELECT gen, count(*) n FROM ids GROUP BY gen) g});
	if ($preload || $old eq '0.9.0')
	{
		is(minted($node), 't|t|0', "$l: the sessions of both libraries minted, no ID repeated")
		  or diag $err;
	}
	else
	{
		like($err, qr/the duplicate guard of this server's sessions was made by another release of insta_id/,
			"$l: the new sessions refuse next_id, naming the other release's guard");
		like($err, qr/HINT:  Restart the server, so that every session loads the library now installed/, "$l: ... and say to restart");
		is(minted($node), 't|f|0', "$l: only the old sessions minted, no ID repeated");
		# The other way round: this library's sessions first, then 0.8.0's.
		$node->restart;
		$err = two_generations($node, $old{$old});
		like($err, qr/the duplicate guard's shared memory "insta_id duplicate guard, layout 3" exists with another size/,
			"this library's sessions, then ${old}'s, not preloaded: ${old}'s sessions refuse next_id");
		is(minted($node), 't|f|0', "this library's sessions, then ${old}'s: only this library's minted, no ID repeated");
		install_library($current);
	}
	$node->restart;
	is($node->safe_psql('postgres', q{SELECT insta_id.next_id(1, 's') > 0}), 't', "$l: after a restart, every session mints");
	$node->stop;
}

for my $old ('0.8.0', '0.9.0')
{
	case($old, 1);
	case($old, 0);
}

done_testing();
