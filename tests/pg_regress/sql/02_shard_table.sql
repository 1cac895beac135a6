-- The flow of Instagram's article: a logical shard is a schema, each table
-- has its own sequence and an id DEFAULT minting IDs for that shard.
SET TIME ZONE 'UTC';
CREATE SCHEMA insta5;
CREATE SEQUENCE insta5.table_id_seq;
CREATE TABLE insta5.our_table (
    id bigint NOT NULL DEFAULT insta_id.next_id(5, 'insta5.table_id_seq'::regclass) PRIMARY KEY,
    body text
);
CREATE TEMP TABLE started AS SELECT date_trunc('milliseconds', clock_timestamp()) AS t;

-- IDs come back with RETURNING; decoded, they carry the shard and nextval % 1024.
INSERT INTO insta5.our_table (body) VALUES ('a'), ('b'), ('c')
RETURNING insta_id.shard_id(id) AS shard, insta_id.seq_id(id) AS seq, body;

SELECT p.shard_id, p.seq_id,
       p.created_at BETWEEN (SELECT t FROM started) AND clock_timestamp() AS made_just_now,
       p.ms_since_epoch = (extract(epoch FROM p.created_at) * 1000)::bigint - 1314220021721 AS ms_agrees
FROM insta5.our_table, insta_id.id_parts(id) AS p
ORDER BY id;

-- The 10-bit field is nextval % 1024, as in the original.
SELECT setval('insta5.table_id_seq', 5000);
INSERT INTO insta5.our_table (body) VALUES ('d') RETURNING insta_id.seq_id(id) AS seq;
SELECT currval('insta5.table_id_seq');

-- Time ranges are primary-key ranges: min_id/max_id bound a millisecond.
SELECT count(*) AS since_start FROM insta5.our_table
WHERE id >= insta_id.min_id((SELECT t FROM started)) AND id <= insta_id.max_id(clock_timestamp());
SELECT count(*) AS tomorrow FROM insta5.our_table
WHERE id >= insta_id.min_id(clock_timestamp() + interval '1 day');
SELECT count(*) AS in_shard_5 FROM insta5.our_table
WHERE id BETWEEN insta_id.min_id((SELECT t FROM started), 5) AND insta_id.max_id(clock_timestamp(), 5);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF)
SELECT * FROM insta5.our_table
WHERE id >= insta_id.min_id('2026-01-01') AND id < insta_id.min_id('2026-02-01');
RESET enable_seqscan;

-- NULL in, NULL out (STRICT); a NOT NULL id column then rejects the row.
SELECT insta_id.next_id(NULL, 'insta5.table_id_seq') IS NULL AS null_shard;
CREATE TABLE insta5.bad (id bigint NOT NULL DEFAULT insta_id.next_id(NULL::int, 'insta5.table_id_seq'));
INSERT INTO insta5.bad DEFAULT VALUES;
\echo :LAST_ERROR_SQLSTATE
