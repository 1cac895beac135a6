# A write of the high-water mark whose fsync fails is never trusted: the
# server PANICs before the ID the mark would cover is returned, as
# PostgreSQL does for its own WAL and data files (data_sync_retry = off).
# An LD_PRELOAD shim (tests/tap/shim/fail_sync.c) makes the first fsync or
# fdatasync after it is armed fail with EIO:
# - 0.9.0's mark, a sequence whose WAL record next_id flushes itself: the
#   WAL's fdatasync fails, PostgreSQL PANICs;
# - 0.8.0's mark, the data directory's file (still used by a database whose
#   SQL predates 0.9.0): insta_id PANICs.
# Either way the call returns no ID, the server restarts by itself, and
# next_id works again.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $lib = "$PostgreSQL::Test::Utils::tmp_check/fail_sync.so";
system('cc', '-shared', '-fPIC', '-O2', '-o', $lib, "$FindBin::RealBin/../shim/fail_sync.c", '-ldl') == 0
  or BAIL_OUT('cannot build the fsync shim');

for my $case ([ '0.9.0, the mark in the WAL', undef, qr/\] 011_fsync\.pl PANIC:  could not (?:fsync|fdatasync) file "[^"]*": Input\/output error/ ],
	[ "0.8.0's SQL, the mark in a file", '0.8.0', qr/\] 011_fsync\.pl PANIC:  could not fsync insta_id's file "insta_id.mark" in the data directory: Input\/output error/ ])
{
	my ($name, $version, $panic) = @$case;
	my $node = insta_node('fsync_' . ($version ? 'file' : 'wal'), preload => 1, start => 0,
		# fsync on (the framework turns it off); nothing else syncs between
		# arming the shim and the call.
		conf => "fsync = on\nrestart_after_crash = on\nautovacuum = off\nwal_writer_delay = '10s'\ncheckpoint_timeout = '1h'\n");
	$node->{insta_shim} = { lib => $lib, trigger => $node->basedir . '/fail_sync' };
	InstaIdTest::insta_start($node);
	$node->safe_psql('postgres', 'CREATE DATABASE f');
	$node->safe_psql('f', 'SET client_min_messages = error; CREATE EXTENSION insta_id'
		  . ($version ? " VERSION '$version'" : '') . '; CREATE SEQUENCE s; SELECT insta_id.next_id(1, \'s\')');
	# The mark is reserved 200 ms ahead: past that, the next ID needs a new one.
	select undef, undef, undef, 0.5;
	my $offset = -s $node->logfile;
	append_to_file($node->{insta_shim}{trigger}, '');
	my ($out, $err);
	$node->psql('f', q{SELECT insta_id.next_id(1, 's')}, stdout => \$out, stderr => \$err);
	ok(!-e $node->{insta_shim}{trigger}, "$name: the next ID's mark met the failing fsync");
	is($out, '', "$name: no ID returned");
	# Until the server answers again after its crash restart. Each try is
	# in an eval: the framework's psql reads its query on stdin, and a psql
	# refused during the restart can exit before it is written, which
	# breaks the pipe and dies (seen once in make test).
	my $back = 0;
	for (my $t = 0; $t < 1800 && !$back; $t++)
	{
		$back = eval { $node->safe_psql('f', 'SELECT true') eq 't' };
		select undef, undef, undef, 0.1 unless $back;
	}
	$back or die 'the server did not come back';
	like(slurp_file($node->logfile, $offset), $panic, "$name: the calling backend PANICked");
	like($node->safe_psql('f', q{SELECT insta_id.next_id(1, 's') > 0 AND insta_id.high_water_mark() > now()}),
		qr/^t$/, "$name: after the crash restart, IDs and the mark again");
	$node->stop;
}

done_testing();
