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
# - on 15 and 16 (0.9.0 guards per session there, 0.8.0 is not tried: it
#   left no trace to see), not preloaded: the new sessions refuse, having
#   seen 0.9.0's sessions' record of this run; the other way round, this
#   library's sessions refuse once 0.9.0's begin to mint (at their next
#   renewal of the mark);
# after a restart every session runs this library and mints.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(dirname);

my $repo  = "$FindBin::RealBin/../../..";
my $major = PostgreSQL::Test::Cluster->new('probe', install_path => InstaIdTest::install_path())->pg_version->major;
my @olds  = $major >= 17 ? qw(0.8.0 0.9.0) : qw(0.9.0);
my %old   = map { $_ => "$repo/target/previous/$_/pg$major/ci/insta_id.so" } @olds;
plan skip_all => "the older libraries are not built (make test-library-upgrade builds them): @{[ values %old ]}"
  unless (grep { -f } values %old) == @olds;

# A copy of the installation under test, whose insta_id.so tests swap: its
# binaries, libraries and share directory under a new root, in their
# relative places (from which PostgreSQL finds them).
my $root = PostgreSQL::Test::Utils::tempdir_short() . '/install';
my %dir;
for my $d (qw(bindir pkglibdir sharedir))
{
	$dir{$d} = `$ENV{PG_CONFIG} --$d`;
	chomp $dir{$d};
	system('mkdir', '-p', $root . dirname($dir{$d})) == 0 or die 'mkdir failed';
	system('cp', '-a', $dir{$d}, $root . $dir{$d}) == 0 or die 'cp failed';
}
my $pg_config = "$root$dir{bindir}/pg_config";
my $pkglib    = "$root$dir{pkglibdir}";
my $current   = "$pkglib/insta_id.so.current";
system('cp', "$dir{pkglibdir}/insta_id.so", $current) == 0 or die 'cp failed';

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
# pgbench's stderr of generation 2, then of generation 1.
sub two_generations
{
	my ($node, $library) = @_;
	$node->safe_psql('postgres', 'TRUNCATE ids');
	# Generation 1 runs until generation 2 has ended, however slow the machine.
	my $first = pgbench_start($node, 'postgres', $burst, '-c', 2, '-j', 2, '-T', 600, '-D', 'gen=1');
	$node->poll_query_until('postgres', 'SELECT count(DISTINCT id >> 23) > 2 FROM ids') or die 'generation 1 did not mint';
	install_library($library);
	my $second = pgbench_start($node, 'postgres', $burst, '-c', 2, '-j', 2, '-T', 3, '-D', 'gen=2');
	pgbench_wait($second);
	pgbench_stop($first);
	return ($second->{err}, $first->{err});
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
		pg_config => $pg_config);
	$node->safe_psql('postgres', qq{SET client_min_messages = warning; CREATE EXTENSION insta_id VERSION '$old';
		CREATE SEQUENCE s; CREATE UNLOGGED TABLE ids (id bigint, gen int)});
	my ($err) = two_generations($node, $current);
	note "$l: " . $node->safe_psql('postgres', q{SELECT string_agg(n || ' IDs of generation ' || gen, ', ' ORDER BY gen) FROM (SELECT gen, count(*) n FROM ids GROUP BY gen) g});
	if ($preload || ($old eq '0.9.0' && $major >= 17))
	{
		is(minted($node), 't|t|0', "$l: the sessions of both libraries minted, no ID repeated")
		  or diag $err;
	}
	elsif ($major < 17)
	{
		like($err, qr/sessions of an earlier release of insta_id mint IDs in this database with a guard of their own/,
			"$l: the new sessions refuse next_id, naming the older sessions' guard");
		like($err, qr/HINT:  Restart the server, so that every session loads the library now installed/, "$l: ... and say to restart");
		# (The two old sessions may repeat each other's IDs: 0.9.0's own
		# per-session guard, the defect this release fixes.)
		like(minted($node), qr/^t\|f\|/, "$l: only the old sessions minted");
		note "$l: IDs the two old sessions repeated between them: " . (split /\|/, minted($node))[2];
		# The other way round: this library's sessions first, then 0.9.0's,
		# which this library's see at their next renewal of the mark.
		$node->restart;
		my ($second, $first) = two_generations($node, $old{$old});
		like($first, qr/sessions of an earlier release of insta_id mint IDs in this database with a guard of their own/,
			"this library's sessions, then ${old}'s, not preloaded: this library's sessions refuse once ${old}'s mint");
		install_library($current);
	}
	else
	{
		like($err, qr/the duplicate guard of this server's sessions was made by another release of insta_id/,
			"$l: the new sessions refuse next_id, naming the other release's guard");
		like($err, qr/HINT:  Restart the server, so that every session loads the library now installed/, "$l: ... and say to restart");
		is(minted($node), 't|f|0', "$l: only the old sessions minted, no ID repeated");
		# The other way round: this library's sessions first, then 0.8.0's.
		$node->restart;
		($err) = two_generations($node, $old{$old});
		like($err, qr/the duplicate guard's shared memory "insta_id duplicate guard, layout 3" exists with another size/,
			"this library's sessions, then ${old}'s, not preloaded: ${old}'s sessions refuse next_id");
		is(minted($node), 't|f|0', "this library's sessions, then ${old}'s: only this library's minted, no ID repeated");
		install_library($current);
	}
	$node->restart;
	is($node->safe_psql('postgres', q{SELECT insta_id.next_id(1, 's') > 0}), 't', "$l: after a restart, every session mints");
	$node->stop;
}

for my $old (@olds)
{
	case($old, 1);
	case($old, 0);
}

done_testing();
