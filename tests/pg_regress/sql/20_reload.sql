-- The high-water mark loaded again in one session: each DROP and CREATE
-- EXTENSION gives the database a new mark, which the session's next raise
-- or renewal loads. With 0.9.0's per-session guard (15 and 16 not
-- preloaded) each load registered an exit callback again; PostgreSQL has
-- room for 20, and the 21st ended the session (FATAL "out of
-- before_shmem_exit slots"). 50 cycles in one session, then the session
-- ends normally. In a
-- database of its own (the suite's has shards that depend on insta_id).
CREATE DATABASE insta_id_reload;
\c insta_id_reload
SET client_min_messages = error;
CREATE SEQUENCE s;
DO $$
BEGIN
    FOR i IN 1..50 LOOP
        CREATE EXTENSION insta_id;
        PERFORM insta_id.raise_high_water_mark(clock_timestamp());
        PERFORM insta_id.next_id(1, 's');
        DROP EXTENSION insta_id;
    END LOOP;
END
$$;
CREATE EXTENSION insta_id;
SELECT insta_id.raise_high_water_mark(clock_timestamp()) IS NOT NULL AS raised,
       insta_id.next_id(1, 's') > 0 AS minted;
\c insta_id_regress
DROP DATABASE insta_id_reload;
