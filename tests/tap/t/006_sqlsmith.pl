# Random SQL (sqlsmith, Debian's package) against a database with insta_id,
# two shards and a table of boundary arguments: zero server crashes, and no
# internal error (XX000) from a statement calling insta_id. With
# track_functions = all it shows that insta_id's functions really ran.
#   SMITH_QUERIES (default 2000, make test; make fuzz: 50000), SMITH_SEED (42)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $queries = $ENV{SMITH_QUERIES} || 2000;
my $seed    = $ENV{SMITH_SEED} || 42;
my $node    = insta_node('smith', preload => 1, conf => q{
track_functions = all
log_line_prefix = '%m [%p] %e '
log_min_messages = error
log_min_error_statement = error
max_parallel_workers_per_gather = 0
restart_after_crash = on
});
$node->safe_psql('postgres', 'CREATE DATABASE smith');
psql_file($node, 'smith', "$FindBin::RealBin/../../fixtures/sqlsmith_target.sql");
$node->safe_psql('smith', 'SELECT pg_stat_reset()');

# Runs of a quarter each, seeds SEED, SEED+1, ...: how often sqlsmith reaches
# a function that takes arguments swings by a factor of 100 between seeds (a
# few queries that read the 2000-row argument table dominate; 60 to 4319
# calls over the seeds tried, and the same seeds vary between machines), so
# four draws, and up to four more while those calls stay under 20: the
# fuzzing must have reached them. sqlsmith exits 0 at --max-queries even
# after a crash: the server's log decides. It sets statement_timeout = 1s
# itself; timeout(1) bounds the whole run.
my $all_ran = 1;
sub smith_run
{
	my ($n) = @_;
	my $target = sprintf 'host=%s port=%d dbname=smith user=insta_id_smith', $node->host, $node->port;
	my ($out, $err);
	IPC::Run::run([ 'timeout', '-s', 'INT', 30 + int($queries / 60), 'sqlsmith', "--target=$target", '--exclude-catalog',
			'--seed=' . ($seed + $n), '--max-queries=' . int($queries / 4), '--verbose' ],
		'>', \$out, '2>', \$err)
	  or $all_ran = 0;
	my @tail = (split /\n/, $err)[ -3 .. -1 ];
	note "seed " . ($seed + $n) . ': ' . join ' | ', grep { defined } @tail;
}

# Functions called, calls, calls of functions taking arguments: read once
# sqlsmith's backends have gone (a backend reports its counts as it exits,
# before it leaves pg_stat_activity).
sub function_stats
{
	$node->poll_query_until('smith', q{SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE usename = 'insta_id_smith')})
	  or die 'sqlsmith sessions did not end';
	return split ' ', $node->safe_psql('smith', q{
		SELECT count(*) FILTER (WHERE calls > 0) || ' ' || coalesce(sum(calls), 0) || ' '
		       || coalesce(sum(calls) FILTER (WHERE p.pronargs > 0), 0)
		FROM pg_stat_user_functions f JOIN pg_proc p ON p.oid = f.funcid WHERE schemaname = 'insta_id'});
}

note "sqlsmith: $queries queries in 4 runs, seeds $seed.." . ($seed + 3);
smith_run($_) for 0 .. 3;
my ($nfuncs, $calls, $argcalls) = function_stats();
for my $n (4 .. 7)
{
	last if $argcalls >= 20;
	note "functions taking arguments called $argcalls times: one more run, seed " . ($seed + $n);
	smith_run($n);
	($nfuncs, $calls, $argcalls) = function_stats();
}
ok($all_ran, 'every sqlsmith run ran its queries to the end');
my $log = slurp_file($node->logfile);
my @crashes = $log =~ /^.*(?:terminated by signal|terminated by exception|PANIC:).*$/mg;
is(scalar @crashes, 0, 'no server process crashed') or diag join "\n", @crashes[ 0 .. ($#crashes < 9 ? $#crashes : 9) ];
# An internal error, with the statement that raised it.
my @internal = $log =~ /^.* XX000 (?:ERROR|FATAL|PANIC):.*\n(?:.*\n){0,2}/mg;
my @ours = grep { /STATEMENT:.*insta_id\./ } @internal;
is(scalar @ours, 0, 'no internal error (XX000) from a statement calling insta_id') or diag join '', @ours[ 0 .. ($#ours < 9 ? $#ours : 9) ];
note "internal errors elsewhere: " . scalar @internal if @internal;
note "insta_id functions called: $nfuncs, calls: $calls, of functions taking arguments: $argcalls";
note $node->safe_psql('smith', q{SELECT string_agg(funcname || ' ' || calls, ', ' ORDER BY calls DESC) FROM pg_stat_user_functions WHERE schemaname = 'insta_id'});
ok($nfuncs >= 5 && $calls >= $queries && $argcalls >= 20,
	"sqlsmith called at least 5 of insta_id's functions, $queries times in all, those taking arguments at least 20 times");
$node->stop;

done_testing();
