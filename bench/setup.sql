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

-- next_id and shard_id written with #[pg_extern] (src/pg_extern_bench.rs),
-- same bodies as the extension's hand-written fmgr functions.
CREATE FUNCTION next_id_pg_extern(int, regclass) RETURNS bigint
LANGUAGE c VOLATILE STRICT AS '$libdir/insta_id', 'bench_next_id_wrapper';
CREATE FUNCTION shard_id_pg_extern(bigint) RETURNS int
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE AS '$libdir/insta_id', 'bench_shard_id_wrapper';

-- 64 plain sequences (CREATE SEQUENCE): 1,000,000 calls spread over them
-- stay far below 1024 IDs per millisecond per sequence, so per-call cost is
-- what gets measured.
DO $$ BEGIN
  FOR i IN 0..63 LOOP EXECUTE format('CREATE SEQUENCE bs_%s', i); END LOOP;
END $$;
CREATE TABLE seqs AS SELECT array_agg(format('bs_%s', i)::regclass ORDER BY i) AS s FROM generate_series(0, 63) i;
CREATE SEQUENCE single_seq;

-- 64 sequences as insta_id's helpers make them (add_id_column: CACHE 32
-- with the shared guard), on tables h_0 .. h_63.
DO $$ BEGIN
  FOR i IN 0..63 LOOP
    EXECUTE format('CREATE TABLE h_%s (v int)', i);
    PERFORM insta_id.add_id_column(format('h_%s', i)::regclass, 'id', 1);
  END LOOP;
END $$;
CREATE TABLE hseqs AS
  SELECT array_agg(pg_get_serial_sequence(format('h_%s', i), 'id')::regclass ORDER BY i) AS s
  FROM generate_series(0, 63) i;

-- Tables for INSERT, one per id default.
CREATE TABLE ins_bigserial (id bigserial PRIMARY KEY, v int);
CREATE SEQUENCE ins_next_id_seq;
CREATE TABLE ins_next_id (id bigint PRIMARY KEY DEFAULT insta_id.next_id(1, 'ins_next_id_seq'), v int);
CREATE TABLE ins_next_id_helper (v int);
SELECT insta_id.add_id_column('ins_next_id_helper', 'id', 1);
ALTER TABLE ins_next_id_helper ADD PRIMARY KEY (id);
-- What the order of the keys alone costs a primary key: the IDs one INSERT
-- with a next_id default on a plain sequence made (ids_made), inserted again
-- in the order they were made, against 1..500,000 in order. Every 1,024
-- values nextval % 1024 wraps, mostly inside a millisecond, and the IDs
-- after the wrap sort before the ones just made there.
-- Both read their keys from the heap, in v's order, the same way.
CREATE SEQUENCE ids_made_seq;
CREATE TABLE ids_insert (id bigint PRIMARY KEY DEFAULT insta_id.next_id(1, 'ids_made_seq'), v int);
INSERT INTO ids_insert (v) SELECT g FROM generate_series(1, 500000) g;
CREATE TABLE ids_made AS SELECT v, id, v::bigint AS serial_id FROM ids_insert ORDER BY v;
CREATE INDEX ON ids_made (v);
DROP TABLE ids_insert;
CREATE TABLE ins_ids_next_id_order (id bigint PRIMARY KEY, v int);
CREATE TABLE ins_ids_serial_order (id bigint PRIMARY KEY, v int);
-- PostgreSQL 18's own time-ordered IDs, for the INSERT beside next_id's.
DO $$ BEGIN
  IF current_setting('server_version_num')::int >= 180000 THEN
    CREATE TABLE ins_uuidv7 (id uuid PRIMARY KEY DEFAULT uuidv7(), v int);
  END IF;
END $$;
-- Rows spread over the 64 plain sequences, by explicit id.
CREATE TABLE ins_nextval_spread (id bigint PRIMARY KEY, v int);
CREATE TABLE ins_next_id_spread (id bigint PRIMARY KEY, v int);

-- Tables for pgbench (bench/run.sh scaling): one shared by every client,
-- and one per client (clients 0-3), each as bigserial and as next_id.
CREATE TABLE one_bigserial (id bigserial PRIMARY KEY, v int);
CREATE TABLE one_next_id (v int);
SELECT insta_id.add_id_column('one_next_id', 'id', 1);
ALTER TABLE one_next_id ADD PRIMARY KEY (id);
DO $$ BEGIN
  FOR c IN 0..3 LOOP
    EXECUTE format('CREATE TABLE own_bigserial_%s (id bigserial PRIMARY KEY, v int)', c);
    EXECUTE format('CREATE TABLE own_next_id_%s (v int)', c);
    PERFORM insta_id.add_id_column(format('own_next_id_%s', c)::regclass, 'id', c + 1);
    EXECUTE format('ALTER TABLE own_next_id_%s ADD PRIMARY KEY (id)', c);
  END LOOP;
END $$;

-- A million IDs to decode.
CREATE TABLE decode_ids AS
  SELECT insta_id.next_id(1, s[(g & 63) + 1]) AS id FROM generate_series(1, 1000000) g, seqs;
-- Their shortcodes, for from_shortcode.
CREATE TABLE decode_codes AS SELECT insta_id.shortcode(id) AS code FROM decode_ids;
VACUUM ANALYZE;
