-- Objects for bench/run.sh. Runs in a fresh database of a throwaway cluster.
CREATE EXTENSION insta_id;

-- Instagram's function as published (with `%` for the blog's `%%`), with the
-- shard and the sequence as arguments so it can spread over sequences too.
CREATE FUNCTION plpgsql_next_id(shard_id int, seq regclass, OUT result bigint) AS $$
DECLARE
    our_epoch bigint := 1314220021721;
    seq_id bigint;
    now_millis bigint;
BEGIN
    SELECT nextval(seq) % 1024 INTO seq_id;
    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE plpgsql;

-- 64 sequences: 1,000,000 calls spread over them stay far below 1024 IDs per
-- millisecond per sequence, so per-call cost is what gets measured.
DO $$ BEGIN
  FOR i IN 0..63 LOOP EXECUTE format('CREATE SEQUENCE bs_%s', i); END LOOP;
END $$;
CREATE TABLE seqs AS SELECT array_agg(format('bs_%s', i)::regclass ORDER BY i) AS s FROM generate_series(0, 63) i;
CREATE SEQUENCE single_seq;

-- Tables for INSERT throughput, one per id default.
CREATE TABLE ins_bigserial (id bigserial PRIMARY KEY, v int);
CREATE SEQUENCE ins_plpgsql_original_seq;
CREATE TABLE ins_plpgsql_original (id bigint PRIMARY KEY DEFAULT plpgsql_next_id(1, 'ins_plpgsql_original_seq'), v int);
CREATE SEQUENCE ins_next_id_seq;
CREATE TABLE ins_next_id (id bigint PRIMARY KEY DEFAULT insta_id.next_id(1, 'ins_next_id_seq'), v int);

-- A million IDs to decode.
CREATE TABLE decode_ids AS
  SELECT insta_id.next_id(1, s[(g & 63) + 1]) AS id FROM generate_series(1, 1000000) g, seqs;
VACUUM ANALYZE;
