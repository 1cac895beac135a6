-- Decoding fixed IDs: the published examples, the sign bit, the last ID.
SET TIME ZONE 'UTC';
-- Instagram's blog: ms 1387263000, shard 1341, nextval 5001 (5001 % 1024 = 905).
SELECT * FROM insta_id.id_parts(11637205501278089);
-- A second article: epoch 1293843600000 ms, ms 264384000000, shard 1001, nextval 9001.
SELECT * FROM insta_id.id_parts(2217813737473025833, '2011-01-01 01:00+00');
-- That article prints ...832, which decodes to seq 808, not 809.
SELECT insta_id.seq_id(2217813737473025832);
-- From 2046-06-27 17:00:49.497 UTC the time field reaches the sign bit.
SELECT * FROM insta_id.id_parts(9223372036854775807);
SELECT * FROM insta_id.id_parts(-9223372036854775808);
-- The last ID of the 41-bit field (2081-04-30).
SELECT * FROM insta_id.id_parts(-1);
SELECT insta_id.created_at(0), insta_id.shard_id(0), insta_id.seq_id(0);

-- Range bounds of a millisecond, for all shards and for one.
SELECT insta_id.min_id('2026-01-01 00:00+00') AS min_all,
       insta_id.max_id('2026-01-01 00:00+00') AS max_all,
       insta_id.min_id('2026-01-01 00:00+00', 5) AS min_5,
       insta_id.max_id('2026-01-01 00:00+00', 5) AS max_5;
SELECT (insta_id.id_parts(insta_id.max_id('2026-01-01 00:00:00.123456+00', 5))).*;
-- The same with an explicit epoch, independent of insta_id.epoch.
SELECT insta_id.min_id('2026-01-01 00:00+00', '2011-01-01 01:00+00'::timestamptz) AS min_e,
       insta_id.max_id('2026-01-01 00:00+00', 7, '2011-01-01 01:00+00'::timestamptz) AS max_7_e;
