-- The state of shard moves (insta_id_admin.moves): what insta-id move
-- records at each step on each server, and insta-id status shows. The moves
-- themselves, with real servers: tests/tap/t/008_move.pl.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
-- The old server's side: the first step makes the row, each later one is
-- appended with its time.
SELECT insta_id.move_step(7, 'leaving', 'published', 'insta7', '/tmp:5433/app');
SELECT insta_id.move_step(7, 'leaving', 'slot', 'insta7', '/tmp:5433/app');
SELECT shard_id, side, schema_name, peer, step, jsonb_array_length(steps) AS steps,
       steps -> 0 ->> 'step' AS first, (steps -> 1 ->> 'at')::timestamptz >= started_at AS in_order
FROM insta_id_admin.moves;
-- The new server's side of another shard.
SELECT insta_id.move_step(8, 'arriving', 'subscribed', 'insta8', 'db1:5432/app');
SELECT shard_id, side, step FROM insta_id_admin.moves ORDER BY shard_id;
-- Refused: a side or step that does not exist (22023), a shard number out
-- of range (22003), another move of the same shard (55006: the other side,
-- another schema), with no change to the row.
SELECT insta_id.move_step(7, 'sideways', 'slot', 'insta7', '/tmp:5433/app');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_step(7, 'leaving', 'copying', 'insta7', '/tmp:5433/app');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_step(8192, 'leaving', 'slot', 'insta7', '/tmp:5433/app');
\echo :LAST_ERROR_SQLSTATE
-- (terse: the DETAIL names when the recorded move started)
\set VERBOSITY terse
SELECT insta_id.move_step(7, 'arriving', 'copying', 'insta7', '/tmp:5433/app');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_step(7, 'leaving', 'cutover', 'other', '/tmp:5433/app');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT shard_id, side, step, jsonb_array_length(steps) AS steps FROM insta_id_admin.moves ORDER BY shard_id;
-- A re-run that reaches the other server another way (a socket, an
-- address) records the same move: the peer is the latest.
SELECT insta_id.move_step(7, 'leaving', 'slot', 'insta7', '10.0.0.4:5433/app');
SELECT peer, step, jsonb_array_length(steps) AS steps FROM insta_id_admin.moves WHERE shard_id = 7;
-- A NULL argument is an error (22004), not a call that does nothing.
SELECT insta_id.move_step(7, 'leaving', NULL, 'insta7', '/tmp:5433/app');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_done(NULL, 'leaving');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_fence('insta7', NULL);
\echo :LAST_ERROR_SQLSTATE
-- The table refuses what move_step would (23514), written by hand too.
INSERT INTO insta_id_admin.moves VALUES (9, 'leaving', 'insta9', 'x', 'adopted', '2026-01-01 00:00:00+00', '[]');
\echo :LAST_ERROR_SQLSTATE
-- A step recorded in a transaction that rolls back is not recorded: the
-- row follows what the step made.
BEGIN;
SELECT insta_id.move_step(7, 'leaving', 'cutover', 'insta7', '/tmp:5433/app');
ROLLBACK;
SELECT step FROM insta_id_admin.moves WHERE shard_id = 7;
-- move_done forgets one side's row, and only that side's.
SELECT insta_id.move_done(7, 'arriving') AS other_side, insta_id.move_done(7, 'leaving') AS done,
       insta_id.move_done(7, 'leaving') AS again;
SELECT shard_id FROM insta_id_admin.moves;
-- Not dumped: the rows are this server's, not the database's.
SELECT count(*) AS config_tables FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'insta_id' AND c = 'insta_id_admin.moves'::regclass;
-- Not PUBLIC's: neither the functions nor the table (a shard administrator
-- may read which shards have a move and on which side: migrate skips them).
CREATE ROLE insta_id_regress_mover_nobody;
SET ROLE insta_id_regress_mover_nobody;
SELECT insta_id.move_step(8, 'arriving', 'copying', 'insta8', 'db1:5432/app');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_done(8, 'arriving');
\echo :LAST_ERROR_SQLSTATE
SELECT peer FROM insta_id_admin.moves;
\echo :LAST_ERROR_SQLSTATE
SELECT step FROM insta_id_admin.moves;
\echo :LAST_ERROR_SQLSTATE
SELECT shard_id, side FROM insta_id_admin.moves;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT step FROM insta_id_admin.moves WHERE shard_id = 8;
SELECT insta_id.move_done(8, 'arriving');
DROP ROLE insta_id_regress_mover_nobody;

-- The fence of a shard's copy moved to this server (move_fence): every
-- table refuses a client's writes (55006) until the shard is registered
-- here; replication's workers (session_replication_role = replica) pass.
CREATE SCHEMA arriving;
CREATE TABLE arriving.users (id bigint PRIMARY KEY, name text);
CREATE TABLE arriving.events (id bigint, at date) PARTITION BY RANGE (at);
CREATE TABLE arriving.events_2026 PARTITION OF arriving.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
SELECT insta_id.move_fence('arriving', 12) AS fenced_tables;
SELECT c.relname, t.tgtype, t.tgnargs, encode(t.tgargs, 'escape') AS argument
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE t.tgname = 'insta_id_move_fence' ORDER BY c.relname;
CREATE ROLE insta_id_regress_client;
GRANT USAGE ON SCHEMA arriving TO insta_id_regress_client;
GRANT INSERT, UPDATE, DELETE, TRUNCATE ON arriving.users, arriving.events, arriving.events_2026 TO insta_id_regress_client;
SET ROLE insta_id_regress_client;
INSERT INTO arriving.users VALUES (1, 'early');
\echo :LAST_ERROR_SQLSTATE
UPDATE arriving.users SET name = 'x';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM arriving.events;
\echo :LAST_ERROR_SQLSTATE
TRUNCATE arriving.events_2026;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET session_replication_role = replica;
INSERT INTO arriving.users VALUES (1, 'from the stream');
INSERT INTO arriving.events VALUES (1, '2026-05-01');
RESET session_replication_role;
-- Refused: a schema that does not exist, a shard out of range, insta_id's
-- and PostgreSQL's own schemas.
SELECT insta_id.move_fence('nowhere', 12);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_fence('arriving', 8192);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_fence('insta_id', 12);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_fence('insta_id_admin', 12);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_fence('pg_catalog', 12);
\echo :LAST_ERROR_SQLSTATE
-- Adopted: the fence opens at once, without a lock on the tables; fencing
-- a shard registered here, or its schema for another shard, is refused (the
-- fence would never open).
SELECT insta_id.adopt_shard('arriving', 12);
SELECT insta_id.move_fence('arriving', 12);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_fence('arriving', 13);
\echo :LAST_ERROR_SQLSTATE
SET ROLE insta_id_regress_client;
INSERT INTO arriving.users VALUES (2, 'after the adoption');
INSERT INTO arriving.events VALUES (2, '2026-06-01');
RESET ROLE;
SELECT (SELECT count(*) FROM arriving.users) AS users, (SELECT count(*) FROM arriving.events) AS events;
-- Not PUBLIC's.
SET ROLE insta_id_regress_client;
SELECT insta_id.move_fence('arriving', 13);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT insta_id.drop_shard(12, force => true);
DROP ROLE insta_id_regress_client;

-- The cutover's lock (move_lock): in a transaction block only (25P01
-- outside: its locks would end with the statement), every table of the
-- shard in ACCESS EXCLUSIVE mode and every sequence locked, until the end
-- of the transaction; the WAL position after which nothing of it commits.
-- The retries behind a long reader, with real sessions:
-- tests/tap/t/008_move.pl.
SELECT insta_id.create_shard(20);
CREATE TABLE insta20.t (id bigserial PRIMARY KEY, v int);
SELECT insta_id.move_lock(20, 5);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT insta_id.move_lock(20, 5) <= pg_current_wal_insert_lsn() AS before_now;
-- (the table's ACCESS EXCLUSIVE; the sequence's SHARE ROW EXCLUSIVE, which
-- nextval()'s ROW EXCLUSIVE waits for)
SELECT c.relname, string_agg(l.mode, ', ' ORDER BY l.mode) FILTER (WHERE l.mode IN ('AccessExclusiveLock', 'ShareRowExclusiveLock')) AS held
FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'insta20'::regnamespace AND c.relkind IN ('r', 'S')
GROUP BY c.relname ORDER BY 1;
COMMIT;
SELECT count(*) AS locks_left FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.pid = pg_backend_pid() AND c.relnamespace = 'insta20'::regnamespace;
-- Refused: a shard not registered here (42704), attempts out of range
-- (22023), NULL (22004); not PUBLIC's.
BEGIN;
SELECT insta_id.move_lock(21, 5);
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT insta_id.move_lock(20, 0);
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_lock(20, NULL);
\echo :LAST_ERROR_SQLSTATE
CREATE ROLE insta_id_regress_mover_nobody;
SET ROLE insta_id_regress_mover_nobody;
SELECT insta_id.move_lock(20, 5);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id._in_transaction_block();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE insta_id_regress_mover_nobody;
SELECT insta_id.drop_shard(20, force => true);

-- What a move carries beside the rows (move_state on the old server, under
-- move_lock; move_carry on the new one): the tables the copy must have,
-- every sequence's state (restarted and unused too), the high-water mark,
-- the migration history. Both sides in this database: the shard 30 as the
-- old server's, its copy in schema copy30 as the new one's (a move of shard
-- 31 recorded into it).
SELECT insta_id.create_shard(30);
CREATE TABLE insta30.t (id bigserial PRIMARY KEY, v int);
CREATE SEQUENCE insta30.unused;
CREATE SEQUENCE insta30.restarted;
ALTER SEQUENCE insta30.restarted RESTART WITH 1000;
INSERT INTO insta30.t (v) SELECT g FROM generate_series(1, 5) g;
INSERT INTO insta_id_admin.applied_migrations (schema_name, migration, applied_at) VALUES ('insta30', '0001_t', '2026-01-01 00:00:00+00');
-- Not under move_lock: refused (55000), since a writer could still change it.
SELECT insta_id.move_state(30);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT insta_id.move_lock(30, 5) IS NOT NULL AS locked;
SELECT insta_id.move_state(30) AS state \gset
COMMIT;
SELECT jsonb_pretty(:'state'::jsonb - 'mark') AS state,
       (:'state'::jsonb ->> 'mark')::timestamptz = insta_id.high_water_mark() AS mark_is_the_servers;
SELECT jsonb_set(:'state'::jsonb, '{schema}', '"copy30"') AS copy_state \gset
CREATE SCHEMA copy30;
CREATE TABLE copy30.t (id bigserial PRIMARY KEY, v int);
CREATE SEQUENCE copy30.unused;
CREATE SEQUENCE copy30.restarted;
-- Sequences at the bound of their type, unused: fenced beside the bound.
CREATE SEQUENCE copy30.tiny AS smallint MINVALUE -32768 START -32768;
CREATE SEQUENCE copy30.top INCREMENT -1 MINVALUE 1 MAXVALUE 9223372036854775807 START 9223372036854775807;
SELECT insta_id.move_step(31, 'arriving', 'copied', 'copy30', '/tmp:5433/app');
-- Another shard's state (22023); then the carry.
SELECT insta_id.move_carry(31, :'copy_state');
\echo :LAST_ERROR_SQLSTATE
SELECT jsonb_set(:'copy_state'::jsonb, '{shard}', '31') AS copy_state \gset
SELECT insta_id.move_carry(31, :'copy_state') >= insta_id.high_water_mark() AS mark_raised;
-- The copy's sequences are left fenced (0.10.0): each narrowed to the value
-- it issued last, what it had kept aside to be put back at the adoption.
SELECT c.relname, f.last_value, f.is_called, f.min_value, f.max_value, q.seqmin, q.seqmax, q.seqcycle
FROM insta_id_admin.sequence_fences f JOIN pg_class c ON c.oid = f.seq JOIN pg_sequence q ON q.seqrelid = f.seq
ORDER BY c.relname;
-- So nothing mints from them: nextval() fails (2200H), next_id names the
-- server that holds the shard (55006), setval() past the fence fails
-- (22003).
SELECT nextval('copy30.t_id_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('copy30.tiny');
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('copy30.top');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(31, 'copy30.t_id_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(31, 'copy30.unused');
\echo :LAST_ERROR_SQLSTATE
SELECT setval('copy30.t_id_seq', 9);
\echo :LAST_ERROR_SQLSTATE
SELECT migration, applied_at FROM insta_id_admin.applied_migrations WHERE schema_name = 'copy30';
SELECT step, jsonb_array_length(steps) AS steps FROM insta_id_admin.moves WHERE shard_id = 31;
-- Refused (55000): a copy whose sequence was used past the old server's
-- (its values could repeat), one that lacks a table of the old server (its
-- rows would be lost), no move of that shard into that schema recorded
-- here, or the shard registered here already. Nothing is carried then.
-- (A copy fenced by 0.9.0 had its tables fenced only: as if here.)
BEGIN;
DELETE FROM insta_id_admin.sequence_fences WHERE seq = 'copy30.t_id_seq'::regclass;
ALTER SEQUENCE copy30.t_id_seq MINVALUE 1 MAXVALUE 100 START 1 RESTART 1;
SELECT setval('copy30.t_id_seq', 9);
SELECT insta_id.move_carry(31, :'copy_state');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT insta_id.move_carry(31, jsonb_set(:'copy_state'::jsonb, '{tables}', '["t", "made_later"]'));
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_carry(32, jsonb_set(:'copy_state'::jsonb, '{shard}', '32'));
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_carry(30, :'state');
\echo :LAST_ERROR_SQLSTATE
-- A state that is not one (22023), a sequence the copy lacks (42P01), NULL
-- (22004), a shard not registered on the old server (42704).
SELECT insta_id.move_carry(31, '{"schema": "copy30"}');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_carry(31, jsonb_set(:'copy_state'::jsonb, '{sequences,t_id_seq}', '[1.5, true]'));
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_carry(31, jsonb_set(:'copy_state'::jsonb, '{sequences,gone}', '[7, true]'));
\echo :LAST_ERROR_SQLSTATE
-- A value outside the fenced sequence's own range (22003), as setval
-- would say: now, not at the adoption after the old server let go.
SELECT insta_id.move_carry(31, jsonb_set(:'copy_state'::jsonb, '{sequences,tiny}', '[40000, true]'));
\echo :LAST_ERROR_SQLSTATE
-- A view in the copy where the old server had a sequence (the copy's owner
-- can make one): refused (42809) by the catalog, before any query names it,
-- so its function (IMMUTABLE: planning would run it) never runs as the
-- caller. No NOTICE from it below.
CREATE FUNCTION copy30.spy() RETURNS bigint LANGUAGE plpgsql IMMUTABLE
AS $$ BEGIN RAISE NOTICE 'spy ran as %', current_user; RETURN 1; END $$;
CREATE VIEW copy30.spyseq AS SELECT copy30.spy() AS last_value, true AS is_called;
SELECT insta_id.move_carry(31, jsonb_set(:'copy_state'::jsonb, '{sequences,spyseq}', '[7, true]'));
\echo :LAST_ERROR_SQLSTATE
DROP VIEW copy30.spyseq;
DROP FUNCTION copy30.spy();
SELECT insta_id.move_carry(31, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_state(33);
\echo :LAST_ERROR_SQLSTATE
-- Carried again onto the fence: it keeps the new state. Adopted, the copy
-- is the shard, still fenced until move_open (move_step calls it when the
-- adoption's step is recorded, after the carry): next_id says so (55006).
-- The step before the adoption: 42704, nothing recorded.
SELECT insta_id.move_step(31, 'arriving', 'adopted', 'copy30', '/tmp:5433/app');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_carry(31, jsonb_set(:'copy_state'::jsonb, '{sequences,t_id_seq}', '[6, true]')) IS NOT NULL AS carried;
SELECT last_value, is_called FROM insta_id_admin.sequence_fences WHERE seq = 'copy30.t_id_seq'::regclass;
SELECT insta_id.adopt_shard('copy30', 31);
SELECT insta_id.next_id(31, 'copy30.t_id_seq');
\echo :LAST_ERROR_SQLSTATE
-- Opened by the step: its sequences are as they were on the old server, each
-- continuing where it would have there (the restarted one at its restart
-- value, the unused one at its start), and the fences are gone. Not
-- PUBLIC's; 42704 for a shard not registered here, 22004 for NULL.
SELECT insta_id.move_open(32);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_open(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_step(31, 'arriving', 'adopted', 'copy30', '/tmp:5433/app');
SELECT count(*) AS fences_after_the_step FROM insta_id_admin.sequence_fences;
SELECT c.relname, q.seqmin, q.seqmax, q.seqstart, q.seqcycle FROM pg_sequence q JOIN pg_class c ON c.oid = q.seqrelid
WHERE c.relnamespace = 'copy30'::regnamespace ORDER BY c.relname;
SELECT nextval('copy30.restarted') AS restarted_continues_at, nextval('copy30.unused') AS unused_starts,
       nextval('copy30.t_id_seq') AS t_continues, nextval('copy30.tiny') AS tiny_starts, nextval('copy30.top') AS top_starts;
SELECT insta_id.move_open(31) AS opened_again;
SELECT insta_id.next_id(31, 'copy30.t_id_seq') > 0 AS minted;
SELECT count(*) AS fences_left FROM insta_id_admin.sequence_fences;
SELECT insta_id.move_done(31, 'arriving');
SELECT insta_id.drop_shard(31, force => true);
DELETE FROM insta_id_admin.applied_migrations WHERE schema_name IN ('insta30', 'copy30');
SELECT insta_id.drop_shard(30, force => true);

-- A move that keeps the old copy for its rollback (move_reserve, in place
-- of drop_shard in the cutover's transaction): the shard unregistered, its
-- schema kept and fenced, the step 'reserved' with the time it is kept
-- until. A rollback carries the new server's state back onto it
-- (move_carry, step 'returning') within the window; move_release drops it.
SELECT insta_id.create_shard(40);
CREATE TABLE insta40.t (id bigserial PRIMARY KEY, v int);
INSERT INTO insta40.t (v) VALUES (1), (2);
-- Refused: not under move_lock (55000), no move away recorded (55000), a
-- window out of range (22023), NULL (22004), a shard not here (42704).
SELECT insta_id.move_reserve(40, '15 minutes');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT insta_id.move_lock(40, 5) IS NOT NULL AS locked;
SELECT insta_id.move_reserve(40, '15 minutes');
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_step(40, 'leaving', 'slot', 'insta40', '/tmp:5433/app');
SELECT insta_id.move_reserve(40, '0');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_reserve(40, '8 days');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_reserve(40, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_reserve(41, '15 minutes');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT insta_id.move_lock(40, 5) IS NOT NULL AS locked;
SELECT insta_id.move_reserve(40, '15 minutes') AS kept_until \gset
COMMIT;
SELECT :'kept_until'::timestamptz - now() BETWEEN interval '14 minutes' AND interval '15 minutes' AS kept_15_minutes;
SELECT count(*) AS registered FROM insta_id_admin.shard_registry WHERE shard_id = 40;
SELECT step, reserve_until > now() AS kept FROM insta_id_admin.moves WHERE shard_id = 40;
-- The copy is fenced (55006), its rows still there, and so is its sequence:
-- next_id names the server the shard moved to (55006), nextval() fails
-- (2200H).
INSERT INTO insta40.t (v) VALUES (3);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.next_id(40, 'insta40.t_id_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('insta40.t_id_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_kept FROM insta40.t;
-- The rollback carries the new server's state onto it (here: the shard's
-- sequence further on) and records 'returning'.
SELECT jsonb_build_object('shard', 40, 'schema', 'insta40', 'tables', '["t"]'::jsonb,
                          'sequences', '{"t_id_seq": [7, true]}'::jsonb, 'mark', NULL, 'history', '[]'::jsonb) AS back \gset
SELECT insta_id.move_carry(40, :'back') IS NOT DISTINCT FROM insta_id.high_water_mark() AS carried;
SELECT last_value FROM insta40.t_id_seq;
SELECT step FROM insta_id_admin.moves WHERE shard_id = 40;
-- Once the window has closed, no rollback (55000).
UPDATE insta_id_admin.moves SET reserve_until = '2026-01-01 00:00:00+00' WHERE shard_id = 40;
SELECT insta_id.move_carry(40, :'back');
\echo :LAST_ERROR_SQLSTATE
-- The copy dropped: refused while the schema is registered again (55000)
-- or while an object of another schema depends on it (2BP01, from
-- drop_shard: nothing else is dropped; a subscription still applying into
-- it, 55000, is tests/tap/t/008_move.pl's); nothing kept for a shard
-- (42704); NULL (22004); not PUBLIC's.
SELECT insta_id.adopt_shard('insta40', 40);
SELECT insta_id.move_release(40);
\echo :LAST_ERROR_SQLSTATE
DELETE FROM insta_id_admin.shard_registry WHERE shard_id = 40;
CREATE SCHEMA keeper;
CREATE VIEW keeper.v AS SELECT count(*) AS n FROM insta40.t;
SELECT insta_id.move_release(40);
\echo :LAST_ERROR_SQLSTATE
SELECT n AS rows_kept FROM keeper.v;
DROP SCHEMA keeper CASCADE;
CREATE ROLE insta_id_regress_mover_nobody;
SET ROLE insta_id_regress_mover_nobody;
SELECT insta_id.move_release(40);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_reserve(40, '15 minutes');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE insta_id_regress_mover_nobody;
SELECT insta_id.move_release(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_release(40);
SELECT count(*) AS schema_left FROM pg_namespace WHERE nspname = 'insta40';
SELECT count(*) AS moves_left FROM insta_id_admin.moves WHERE shard_id = 40;
SELECT count(*) AS registered FROM insta_id_admin.shard_registry WHERE shard_id = 40;
SELECT count(*) AS fences_left FROM insta_id_admin.sequence_fences;
SELECT insta_id.move_release(40);
\echo :LAST_ERROR_SQLSTATE

-- A rollback's cutover on the server the shard had moved to (move_return,
-- in place of drop_shard): the shard unregistered, its schema kept and
-- fenced, the step 'returned'; move_release drops the copy once the
-- clients are on the old server, and leaves the move's record to the
-- mover. Refused: not under move_lock (55000), no move here recorded
-- (55000), a shard not here (42704), NULL (22004), not PUBLIC's.
SELECT insta_id.create_shard(42);
CREATE TABLE insta42.t (id bigserial PRIMARY KEY, v int);
INSERT INTO insta42.t (v) VALUES (1);
SELECT insta_id.move_return(42);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT insta_id.move_lock(42, 5) IS NOT NULL AS locked;
SELECT insta_id.move_return(42);
ROLLBACK;
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_return(43);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_return(NULL);
\echo :LAST_ERROR_SQLSTATE
CREATE ROLE insta_id_regress_returner_nobody;
SET ROLE insta_id_regress_returner_nobody;
SELECT insta_id.move_return(42);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE insta_id_regress_returner_nobody;
SELECT insta_id.move_step(42, 'arriving', 'adopted', 'insta42', '/tmp:5433/app');
BEGIN;
SELECT insta_id.move_lock(42, 5) IS NOT NULL AS locked;
SELECT insta_id.move_return(42) AS returned;
COMMIT;
SELECT count(*) AS registered FROM insta_id_admin.shard_registry WHERE shard_id = 42;
SELECT side, step FROM insta_id_admin.moves WHERE shard_id = 42;
INSERT INTO insta42.t (v) VALUES (2);
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('insta42.t_id_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS rows_kept FROM insta42.t;
SELECT insta_id.move_release(42);
SELECT count(*) AS schema_left FROM pg_namespace WHERE nspname = 'insta42';
SELECT count(*) AS fences_left FROM insta_id_admin.sequence_fences WHERE schema_name = 'insta42';
SELECT side, step FROM insta_id_admin.moves WHERE shard_id = 42;
SELECT insta_id.move_done(42, 'arriving');
SELECT insta_id.move_release(42);
\echo :LAST_ERROR_SQLSTATE

-- insta_id.migrate skips a shard moved here whose record of the move is
-- still here (its old copy may follow it for a rollback; DDL is not
-- replicated): 55006 at the end, naming it; the template and the other
-- shards migrated.
SELECT count(*) AS other_shards FROM insta_id_admin.shard_registry;
CREATE SCHEMA tpl50;
CREATE TABLE tpl50.t (id bigint PRIMARY KEY);
SELECT insta_id.create_shard(50), insta_id.create_shard(51);
CREATE TABLE insta50.t (id bigint PRIMARY KEY);
CREATE TABLE insta51.t (id bigint PRIMARY KEY);
SELECT insta_id.move_step(50, 'arriving', 'reserved', 'insta50', '/tmp:5433/app');
CALL insta_id.migrate('0001_v', 'tpl50', 'ALTER TABLE t ADD COLUMN v int');
\echo :LAST_ERROR_SQLSTATE
SELECT c.relnamespace::regnamespace AS schema, count(a.attname) AS has_v
FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'v'
WHERE c.relname = 't' AND c.relnamespace::regnamespace::text IN ('tpl50', 'insta50', 'insta51')
GROUP BY 1 ORDER BY 1;
SELECT insta_id.move_done(50, 'arriving');
SELECT insta_id.drop_shard(50, force => true), insta_id.drop_shard(51, force => true);
DROP SCHEMA tpl50 CASCADE;
DELETE FROM insta_id_admin.migrations WHERE name = '0001_v';
