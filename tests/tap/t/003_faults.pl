# Faults on real servers, with the clock moved under them by libfaketime. For
# each configuration (preloaded; not preloaded: the DSM registry on 17+, the
# published segment on 15 and 16; make test runs it on 18):
# 1. A concurrent burst (4 pgbench clients, one sequence) while the clock
#    steps back 200 ms, back 2 s, forward 3 s and back 1 s:
#    - wait: zero duplicates; per session the time field never decreases;
#      full milliseconds (1024 IDs) around every step; once the clock has
#      settled after a step, no ID is further ahead of its session's clock
#      than the step plus one ms per 1024 IDs issued since (README); IDs are
#      on the clock again at the end;
#    - error: 54000 instead of borrowing: not even that one ms per 1024 IDs;
#    - legacy: IDs follow the clock back, like the original.
# 2. Crashes: kill -9 of a backend, and an immediate shutdown, in a burst
#    whose clock was just set back 8 s (IDs ahead of it): every committed row
#    is intact, and a burst after the restart repeats none of them.
# 3. Restarts with the clock 8 s behind the IDs already issued, after a clean
#    and after an immediate shutdown: no ID repeats, thanks to the durable
#    high-water mark; with the mark erased (a setval of its sequence) the same restart repeats
#    IDs (so the test can fail).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $burst = "INSERT INTO ids (id, pid, at) SELECT insta_id.next_id(1, 's'), pg_backend_pid(), clock_timestamp() FROM generate_series(1, 2000);";
my $refusing = 'SELECT burst_refusing(500);';
my $node;

sub fq { return $node->safe_psql('faults', $_[0]); }

sub setup_db
{
	my ($mode) = @_;
	$node->safe_psql('postgres', 'SET client_min_messages = warning; DROP DATABASE IF EXISTS faults');
	# The steps here (up to 8 s) test borrowing past the default bound on the
	# lead (1 s, which t/001_lead.pl tests): allow 10 s. The checks group
	# millions of IDs.
	$node->safe_psql('postgres', qq{
		CREATE DATABASE faults;
		ALTER DATABASE faults SET insta_id.on_overflow = '$mode';
		ALTER DATABASE faults SET insta_id.max_lead = '10s';
		ALTER DATABASE faults SET work_mem = '512MB'});
	fq(q{
		SET client_min_messages = error;
		CREATE EXTENSION insta_id;
		CREATE SEQUENCE s;
		-- n: the order rows were written in, across sessions; at: the session's
		-- clock right after next_id returned (same row, evaluated after it).
		CREATE TABLE ids (n bigint GENERATED ALWAYS AS IDENTITY, id bigint NOT NULL, pid int NOT NULL, at timestamptz NOT NULL);
		CREATE TABLE steps (k int, label text, back_ms int, n_written bigint, n_settled bigint);
		CREATE TABLE refusals (pid int, refused int);
		-- One ID per statement, 54000 caught: what an application in error mode sees.
		CREATE FUNCTION burst_refusing(k int) RETURNS void LANGUAGE plpgsql AS $$
		DECLARE refused int := 0; v bigint;
		BEGIN
		  FOR i IN 1..k LOOP
		    BEGIN
		      v := insta_id.next_id(1, 's');
		      INSERT INTO ids (id, pid, at) VALUES (v, pg_backend_pid(), clock_timestamp());
		    EXCEPTION WHEN program_limit_exceeded THEN refused := refused + 1;
		    END;
		  END LOOP;
		  INSERT INTO refusals VALUES (pg_backend_pid(), refused);
		END $$;
	});
}

sub n_now { return fq('SELECT last_value FROM ids_n_seq'); }
sub dups  { return fq('SELECT count(*) - count(DISTINCT id) FROM ids'); }

# 4 clients for SECONDS, in the background.
sub burst
{
	my ($sql, $seconds, @options) = @_;
	return pgbench_start($node, 'faults', $sql, '-c', 4, '-j', 2, '-T', $seconds, @options);
}

# Moves the clock, notes where in the rows it happened.
sub step
{
	my ($k, $label, $offset, $back_ms) = @_;
	my $before = n_now();
	clock_offset($node, $offset);
	fq("INSERT INTO steps VALUES ($k, '$label', $back_ms, $before, " . n_now() . ')');
}

# Per settled step, in table regime: the rows written after every process
# saw the new clock and before the next step, with how far each ID is ahead
# of its own session's clock (read right after next_id, in the same row) and
# how many IDs were written since the step. steps.lead_ms: how far the newest
# ID was ahead of the clock just after the step (the step back, plus any lead
# not yet caught up before it). The README's bound: that lead plus one ms per
# 1024 IDs since, plus 2 ms for the clock read after next_id.
sub settle
{
	fq(q{
		CREATE INDEX ON ids (n);
		-- min_id(at) >> 23: the session's clock in ms since the epoch, like id >> 23.
		CREATE TABLE regime AS
		WITH b AS (SELECT k, n_written, n_settled,
		                  coalesce(lead(n_written) OVER (ORDER BY k), (SELECT max(n) + 1 FROM ids)) AS n_next FROM steps)
		SELECT b.k, i.n - b.n_written AS since, (i.id >> 23) AS ms, insta_id.min_id(i.at) >> 23 AS clock_ms
		FROM b JOIN ids i ON i.n > b.n_settled AND i.n < b.n_next;
		ALTER TABLE steps ADD lead_ms bigint;
		UPDATE steps SET lead_ms = back_ms + (
		  SELECT greatest(0, max(id >> 23) - (insta_id.min_id(max(at)) >> 23)) FROM ids WHERE n <= steps.n_written);
	});
}

# Four steps during one 10 s burst: back 200 ms, back 2 s, forward 3 s, back 1 s.
sub stepped_burst
{
	my ($label, $sql) = @_;
	clock_offset($node, '+0');
	my $b = burst($sql, 10);
	sleep 1.5;
	step(1, 'back 200 ms', '-0.2', 200);
	step(2, 'back 2 s',    '-2.2', 2000);
	step(3, 'forward 3 s', '+0.8', 0);
	step(4, 'back 1 s',    '-0.2', 1000);
	pgbench_wait($b, "$label: pgbench ran");
	settle();
	note "$label: " . fq(q{SELECT count(*) || ' IDs from ' || count(DISTINCT pid) || ' sessions' FROM ids});
}

# Rows of settled regimes further ahead of their clock than lead + EXTRA.
sub ahead_over
{
	my ($extra) = @_;
	return fq("SELECT count(*) FROM regime r JOIN steps s USING (k) WHERE r.ms - r.clock_ms > s.lead_ms + $extra");
}

sub check_common
{
	my ($l) = @_;
	is(dups(), 0, "$l: zero duplicate IDs");
	is(fq('SELECT count(*) FROM (SELECT id >> 23 AS ms, lag(id >> 23) OVER (PARTITION BY pid ORDER BY n) AS prev FROM ids) x WHERE ms < prev'),
		0, "$l: per session, the time field never decreases");
	is(fq('SELECT max(c) <= 1024 FROM (SELECT count(*) c FROM ids GROUP BY id >> 23) m'), 't', "$l: at most 1024 IDs in any millisecond");
}

# IDs are on the clock again: an ID minted once the clock has passed every
# issued ms carries the clock's ms.
sub check_back_on_clock
{
	my ($l) = @_;
	$node->poll_query_until('faults', q{SELECT clock_timestamp() > (SELECT insta_id.created_at(max(id)) FROM ids) + interval '2 ms'})
	  or die 'the clock never passed the newest ID';
	is(fq(q{SELECT date_trunc('milliseconds', t0) <= insta_id.created_at(id) AND insta_id.created_at(id) <= t1
	     FROM (SELECT clock_timestamp() t0, insta_id.next_id(1, 's') id, clock_timestamp() t1) x}),
		't', "$l: IDs are back on the clock once it has passed the newest ID");
}

sub clock_steps
{
	my ($config) = @_;
	my $l = "$config, clock steps, wait";
	setup_db('wait');
	stepped_burst($l, $burst);
	check_common($l);
	is(fq(q{WITH f AS (SELECT id >> 23 AS ms FROM ids GROUP BY 1 HAVING count(*) = 1024)
	     SELECT string_agg(label, ', ' ORDER BY k) FROM steps s
	     WHERE NOT EXISTS (SELECT FROM ids i JOIN f ON (i.id >> 23) = f.ms WHERE i.n BETWEEN s.n_written AND s.n_settled)}),
		'', "$l: full milliseconds (1024 IDs) around every step, so the guard was needed there");
	note "$l: $_" for split /\n/, fq(q{
		SELECT label || ': lead ' || lead_ms || ' ms; IDs at most ' || max(r.ms - r.clock_ms) || ' ms ahead of their clock, bound ' || max(lead_ms + 2 + since / 1024)
		FROM regime r JOIN steps s USING (k) GROUP BY k, label, lead_ms ORDER BY k});
	is(ahead_over('2 + r.since / 1024'), 0,
		"$l: once settled after a step, no ID is further ahead of its session's clock than the step's lead + 1 ms per 1024 IDs since (+2)");
	is(fq('SELECT max(ms - clock_ms) >= 1000 FROM regime WHERE k = 2'), 't', "$l: after the 2 s step back, IDs ran ahead of the clock");
	is(fq(q{SELECT issued = (SELECT count(*) FROM ids) AND waits > 0 AND borrowed_ms > 0 AND refused = 0
	     FROM insta_id.guard_stats() WHERE database = current_database() AND sequence = 's'::regclass}),
		't', "$l: insta_id.guard_stats() counted every ID, the waits and the borrowed milliseconds");
	check_back_on_clock($l);

	$l = "$config, clock steps, error";
	setup_db('error');
	stepped_burst($l, $refusing);
	check_common($l);
	is(fq('SELECT sum(refused) > 0 FROM refusals'), 't', "$l: 54000 was raised (and caught) while the clock was behind");
	note "$l: " . fq('SELECT sum(refused) FROM refusals') . ' calls refused with 54000';
	is(fq(q{SELECT g.refused = (SELECT sum(refused) FROM refusals) AND g.borrowed_ms = 0
	     FROM insta_id.guard_stats() g WHERE database = current_database() AND sequence = 's'::regclass}),
		't', "$l: insta_id.guard_stats() counted each refusal, and no borrowed millisecond");
	is(ahead_over(2), 0, "$l: no millisecond was borrowed: no ID further ahead of its session's clock than the step's lead (+2)");
	check_back_on_clock($l);

	$l = "$config, clock steps, legacy";
	setup_db('legacy');
	stepped_burst($l, $burst);
	is(fq('SELECT min(ms - prev) < -1500 FROM (SELECT id >> 23 AS ms, lag(id >> 23) OVER (PARTITION BY pid ORDER BY n) AS prev FROM ids) x'),
		't', "$l: IDs follow the clock back (a session's time field went back over 1.5 s)");
	is(fq('SELECT count(*) FROM regime WHERE ms > clock_ms'), 0, "$l: once settled, no ID is ahead of its session's clock");
}

# Every ID written after row N is in a later millisecond than every ID up to
# it (the IDs of a restart against those before).
sub check_above
{
	my ($l, $n) = @_;
	is(fq("SELECT count(*) FROM ids WHERE n > $n AND (id >> 23) <= (SELECT max(id >> 23) FROM ids WHERE n <= $n)"),
		0, "$l: every ID after the restart is above every ID before it");
}

# Rows of finished transactions according to pgbench's per-transaction logs
# (third field: the latency, or "failed").
sub logged_rows
{
	my ($prefix) = @_;
	my $rows = 0;
	for my $f (glob "$prefix.*")
	{
		$rows += 2000 * grep { (split ' ')[2] =~ /^\d+$/ } split /\n/, slurp_file($f);
	}
	return $rows;
}

sub crash_and_restart
{
	my ($config, $how) = @_;
	my $l = "$config, $how during a burst with the clock set back";
	setup_db('wait');
	clock_offset($node, '+0');
	my $prefix = $node->basedir . "/log-$how";
	unlink glob "$prefix.*";
	my $b = burst($burst, 6, '-l', "--log-prefix=$prefix");
	sleep 2;
	clock_offset($node, '-8');    # IDs now run ahead of the clock (by more than recovery takes)
	my $log = -s $node->logfile;
	if ($how eq 'kill-backend')
	{
		kill 'KILL', fq(q{SELECT pid FROM pg_stat_activity WHERE datname = 'faults' AND application_name = 'pgbench' LIMIT 1});
	}
	else
	{
		$node->stop('immediate');
	}
	pgbench_wait($b);    # pgbench loses its connections
	InstaIdTest::insta_start($node) if $how eq 'immediate';
	# After the kill, until the postmaster has reinitialised and accepts
	# connections again (pgbench can end before it noticed the crash; a
	# connection then would reach the crashed run).
	$node->wait_for_log(qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s, $log)
	  if $how eq 'kill-backend';
	$node->poll_query_until('faults', 'SELECT true') or die 'the server did not come back';
	my $before    = fq('SELECT count(*) FROM ids');
	my $committed = logged_rows($prefix);
	note "$l: $before rows after recovery, $committed reported committed by pgbench";
	ok($committed > 0 && $before >= $committed && $before % 2000 == 0, "$l: every committed row is there, and only whole transactions");
	is(fq('SELECT clock_timestamp() < insta_id.created_at(max(id)) FROM ids'), 't', "$l: the clock is still behind the newest ID");
	my $last = fq('SELECT coalesce(max(n), 0) FROM ids');
	pgbench_wait(burst($burst, 3), "$l: pgbench ran after the restart");
	is(dups(), 0, "$l: after the restart, zero duplicates among all IDs");
	check_above($l, $last);
	clock_offset($node, '+0');
}

sub marks_logged
{
	my @m = slurp_file($node->logfile) =~ /insta_id: the high-water mark of issued IDs in this database is [0-9]+ ms ahead of the clock/g;
	return scalar @m;
}

# A 10 s burst, stop (fast|immediate), the clock 8 s back, into the
# milliseconds of that burst (as long as the restart takes under 8 s), start,
# burst again. (With 5 s and 4 s, an immediate stop's restart, which
# replays the burst's WAL, took 3.8 s on a 2-core VM and the clock was no
# longer behind the newest ID.)
sub restart_behind
{
	my ($config, $mode, $drop_mark) = @_;
	my $l = "$config, restart ($mode stop) with the clock 8 s back" . ($drop_mark ? ', mark erased' : '');
	setup_db('wait');
	clock_offset($node, '+0');
	pgbench_wait(burst($burst, 10), "$l: pgbench ran");
	my $newest = fq('SELECT max(id) FROM ids');
	is(fq("SELECT insta_id.high_water_mark() >= insta_id.created_at($newest)"), 't', "$l: the high-water mark covers the newest ID");
	my $logged = marks_logged();
	$node->stop($mode);
	InstaIdTest::insta_start($node);
	# The clock 8 s behind the newest ID, put there once the server is up
	# and before the first ID loads the mark: set before the restart, the
	# restart's own seconds (over 7 s on a busy machine) ate the margin and
	# the clock had passed the newest ID by the check.
	my $behind = fq("SELECT round(extract(epoch FROM insta_id.created_at($newest) - clock_timestamp()) - 8, 1)");
	clock_offset($node, sprintf('%+.1f', $behind));
	is(fq("SELECT clock_timestamp() < insta_id.created_at($newest)"), 't', "$l: the clock is behind the newest ID");
	# Erased before anything loaded it (its sequence, by hand).
	fq(q{SELECT setval('insta_id_mark.high_water', 1)}) if $drop_mark;
	fq(q{SELECT insta_id.next_id(1, 's')});    # the first ID loads the mark
	is(marks_logged(), $logged + 1, "$l: the server log says a mark ahead of the clock was loaded") unless $drop_mark;
	my $last = fq('SELECT max(n) FROM ids');
	pgbench_wait(burst($burst, 3), "$l: pgbench ran after the restart");
	my $repeated = dups();
	if ($drop_mark)
	{
		note "$l: $repeated duplicate IDs";
		cmp_ok($repeated, '>', 0, "$l: IDs repeat (what the mark prevents)");
	}
	else
	{
		is($repeated, 0, "$l: zero duplicates among all IDs");
		check_above($l, $last);
	}
	clock_offset($node, '+0');
}

sub run_config
{
	my ($config, $preload) = @_;
	# restart_after_crash: the framework turns it off; a kill -9 of a backend
	# must be recovered from as in production.
	$node = insta_node('faults_' . ($preload ? 'preloaded' : 'dsm'), preload => $preload, faketime => 1,
		conf => "restart_after_crash = on\nlog_statement = none\n");
	is($node->safe_psql('postgres', 'CREATE EXTENSION insta_id; SELECT insta_id.guard_mode()'), 'shared', "$config: guard_mode() is shared");
	clock_steps($config);
	crash_and_restart($config, 'kill-backend');
	crash_and_restart($config, 'immediate');
	restart_behind($config, 'fast');
	restart_behind($config, 'immediate');
	restart_behind($config, 'fast', 1);
	$node->stop;
}

run_config('preloaded', 1);
run_config($node->pg_version >= 17 ? 'not preloaded (DSM registry)' : 'not preloaded (published segment)', 0);

done_testing();
