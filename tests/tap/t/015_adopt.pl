# insta_id.adopt_id_column on a table being written to (issue 43).
# - A busy referencing table: the adoption takes the adopted table's lock,
#   waits for the others at most lock_timeout (or half of deadlock_timeout),
#   lets go, retries, and gives up with 55P03 naming the process that holds
#   them; nothing changed.
# - Under pgbench writers (4 clients, prepared statements): parents with a
#   serial key and children referencing new and old parents, and a table
#   with an identity ALWAYS key. Both are adopted in the middle of the run,
#   the serial one widened to bigint with the children's key; the writers
#   go on until 200 more rows are written. Every writer keeps working or
#   waits: no error in the server's log from any of them. Every row written
#   is there once, old keys unchanged, new keys of the shard and above every
#   old one, every child's parent there, the foreign keys validated.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = insta_node('adopt', preload => 1, conf => "log_line_prefix = '%a: '\n");
$node->safe_psql('postgres', q{
	CREATE EXTENSION insta_id;
	SELECT insta_id.create_shard(5, 'app');
	CREATE TABLE app.posts (id serial PRIMARY KEY, body text NOT NULL);
	CREATE TABLE app.comments (id bigserial PRIMARY KEY, post_id int NOT NULL REFERENCES app.posts, body text);
	CREATE TABLE app.tags (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, t text);
	INSERT INTO app.posts (body) SELECT 'old ' || g FROM generate_series(1, 100000) g;
	INSERT INTO app.comments (post_id, body) SELECT g % 100000 + 1, 'old' FROM generate_series(1, 200000) g;
	INSERT INTO app.tags (t) SELECT 'old' FROM generate_series(1, 1000);
	ANALYZE;
	CREATE TABLE public.posts_before AS SELECT * FROM app.posts;
	CREATE TABLE public.comments_before AS SELECT * FROM app.comments;});

# A session reading the children: the adoption takes the parents' lock,
# waits for the children's, lets go, retries once, and gives up.
my $reader = $node->background_psql('postgres');
$reader->query_safe('BEGIN; SELECT count(*) FROM app.comments;');
my $reader_pid = $reader->query_safe('SELECT pg_backend_pid()');
my $err = error_of($node, 'postgres',
	q{SELECT * FROM insta_id.adopt_id_column('app.posts', lock_timeout => '100ms', lock_retries => 1)});
like($err, qr/55P03/, 'a busy referencing table: 55P03 once the retries are spent');
like($err, qr/Nothing was changed\. Held by: app\.comments \(process $reader_pid\)/, '... naming the table and the process holding it');
like($err, qr/retry 1 of 1/, '... after a retry');
is($node->safe_psql('postgres', q{SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = 'app.posts'::regclass AND attname = 'id'}),
	'integer', '... and the key is as it was');
$reader->query_safe('COMMIT');
$reader->quit;

# The writers: a new parent with a child, a child of an old parent, a tag.
my $script = <<'SQL';
\set old random(1, 100000)
BEGIN;
WITH p AS (INSERT INTO app.posts (body) VALUES ('new') RETURNING id)
INSERT INTO app.comments (post_id, body) SELECT id, 'on new' FROM p;
INSERT INTO app.comments (post_id, body) VALUES (:old, 'on old');
INSERT INTO app.tags (t) VALUES ('new');
END;
SQL
# (-T bounds a run that would otherwise not end; it is stopped sooner)
my $log_from = -s $node->logfile;
my $bench = pgbench_start($node, 'postgres', $script, '-c', 4, '-j', 2, '-T', 600, '-M', 'prepared');
# Once the writers are writing: both adoptions, each in its own transaction.
$node->poll_query_until('postgres', q{SELECT count(*) > 100 FROM app.posts WHERE body = 'new'}) or die 'no writes';
my $started = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
my ($plan, $notices) = ('', '');
is($node->psql('postgres', q{SELECT string_agg(step || ' ' || action, E'\n' ORDER BY step) FROM insta_id.adopt_id_column('app.posts')},
	stdout => \$plan, stderr => \$notices), 0, 'app.posts adopted under the writers') or diag($notices);
my $widened = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->safe_psql('postgres', q{SELECT count(*) FROM insta_id.adopt_id_column('app.tags')});
my $ended = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
note "the adoption of app.posts:\n$plan\n$notices";
note 'took ' . $node->safe_psql('postgres', qq{SELECT round(extract(epoch FROM '$widened'::timestamptz - '$started') * 1000)}) . ' ms (widening 100,000 parents and 200,000+ children), app.tags '
  . $node->safe_psql('postgres', qq{SELECT round(extract(epoch FROM '$ended'::timestamptz - '$widened') * 1000)}) . ' ms';
# The writers go on with the new keys, then stop (an open transaction is rolled back).
$node->poll_query_until('postgres', q{SELECT count(*) > 200 FROM app.posts WHERE id > 1000000}) or die 'no writes after the adoption';
# (the log read before the stop, which ends the clients' connections)
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_from);
pgbench_stop($bench);
my $done = $node->safe_psql('postgres', q{SELECT count(*) FROM app.posts WHERE body = 'new'});
note "pgbench: $done transactions";
is(scalar(() = $log =~ /^pgbench: (?:ERROR|FATAL)/mg), 0, 'no writer got an error') or diag($log);

# Every row written is there once; the old ones as they were.
is($node->safe_psql('postgres', q{SELECT count(*) FROM app.comments WHERE body IN ('on new', 'on old')}), 2 * $done, 'two children per new parent');
is($node->safe_psql('postgres', q{SELECT count(*) FROM app.tags WHERE t = 'new'}), $done, 'one tag per new parent');
is($node->safe_psql('postgres', q{SELECT count(*) FROM (SELECT * FROM public.posts_before EXCEPT SELECT * FROM app.posts) x}),
	0, 'every old parent unchanged');
is($node->safe_psql('postgres', q{SELECT count(*) FROM (SELECT id, post_id::bigint, body FROM public.comments_before EXCEPT SELECT id, post_id, body FROM app.comments) x}),
	0, 'every old child unchanged');
# New keys: minted before the adoption (serial's) and after (the shard's,
# above every old one).
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE id < 1000000) > 0 AND count(*) FILTER (WHERE id > (SELECT max(id) FROM public.posts_before) + 1000000) > 0
	FROM app.posts WHERE body = 'new'}), 't', 'writers wrote both before and after the adoption');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM app.posts WHERE id >= 1000000 AND (insta_id.shard_id(id) <> 5 OR insta_id.created_at(id) < now() - interval '10 minutes')}),
	0, 'every key minted after it is the shard\'s, of now');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM app.tags WHERE id >= 1000000 AND insta_id.shard_id(id) <> 5}), 0, 'the identity table\'s too');
is($node->safe_psql('postgres', q{SELECT count(*) FROM app.comments c LEFT JOIN app.posts p ON p.id = c.post_id WHERE p.id IS NULL}),
	0, 'every child\'s parent is there');
is($node->safe_psql('postgres', q{
	SELECT string_agg(format_type(a.atttypid, NULL), ',' ORDER BY a.attrelid::regclass::text)
	FROM pg_attribute a WHERE (a.attrelid, a.attname) IN (('app.posts'::regclass, 'id'), ('app.comments'::regclass, 'post_id'), ('app.tags'::regclass, 'id'))}),
	'bigint,bigint,bigint', 'the keys and the children\'s are bigint');
is($node->safe_psql('postgres', q{SELECT bool_and(convalidated) FROM pg_constraint WHERE confrelid = 'app.posts'::regclass}),
	't', 'the foreign key is validated');

$node->stop;
done_testing();
