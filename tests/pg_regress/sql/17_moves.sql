-- The state of shard moves (insta_id.moves): what scripts/move_shard.sh
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
FROM insta_id.moves;
-- The new server's side of another shard.
SELECT insta_id.move_step(8, 'arriving', 'subscribed', 'insta8', 'db1:5432/app');
SELECT shard_id, side, step FROM insta_id.moves ORDER BY shard_id;
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
SELECT shard_id, side, step, jsonb_array_length(steps) AS steps FROM insta_id.moves ORDER BY shard_id;
-- A re-run that reaches the other server another way (a socket, an
-- address) records the same move: the peer is the latest.
SELECT insta_id.move_step(7, 'leaving', 'slot', 'insta7', '10.0.0.4:5433/app');
SELECT peer, step, jsonb_array_length(steps) AS steps FROM insta_id.moves WHERE shard_id = 7;
-- The table refuses what move_step would (23514), written by hand too.
INSERT INTO insta_id.moves VALUES (9, 'leaving', 'insta9', 'x', 'adopted', '2026-01-01 00:00:00+00', '[]');
\echo :LAST_ERROR_SQLSTATE
-- A step recorded in a transaction that rolls back is not recorded: the
-- row follows what the step made.
BEGIN;
SELECT insta_id.move_step(7, 'leaving', 'cutover', 'insta7', '/tmp:5433/app');
ROLLBACK;
SELECT step FROM insta_id.moves WHERE shard_id = 7;
-- move_done forgets one side's row, and only that side's.
SELECT insta_id.move_done(7, 'arriving') AS other_side, insta_id.move_done(7, 'leaving') AS done,
       insta_id.move_done(7, 'leaving') AS again;
SELECT shard_id FROM insta_id.moves;
-- Not dumped: the rows are this server's, not the database's.
SELECT count(*) AS config_tables FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'insta_id' AND c = 'insta_id.moves'::regclass;
-- Not PUBLIC's: neither the functions nor the table.
CREATE ROLE insta_id_regress_mover_nobody;
SET ROLE insta_id_regress_mover_nobody;
SELECT insta_id.move_step(8, 'arriving', 'copying', 'insta8', 'db1:5432/app');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.move_done(8, 'arriving');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM insta_id.moves;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT step FROM insta_id.moves WHERE shard_id = 8;
SELECT insta_id.move_done(8, 'arriving');
DROP ROLE insta_id_regress_mover_nobody;
