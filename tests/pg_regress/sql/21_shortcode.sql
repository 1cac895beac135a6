-- insta_id.shortcode / from_shortcode: Instagram's base-64 form of an ID
-- (instagram.com/p/<shortcode>/). A public pair, checked by hand by its
-- poster on a real post's link:
SELECT insta_id.shortcode(2715604631366879010) AS code,
       insta_id.from_shortcode('CWvxAY7B0ci') AS id;
-- Another, from the README of the npm package instagram-id-to-url-segment
-- (2015); the ID decodes to a post of the package's month:
SELECT insta_id.shortcode(1038059720608660215) AS code,
       insta_id.from_shortcode('5n7dDmhTr3') AS id,
       insta_id.created_at(1038059720608660215) AT TIME ZONE 'UTC' AS made;
-- The pair issue 43 quotes (2501040375429168306, CK1JqHqFVOy) does not
-- agree with itself; each side converts to this:
SELECT insta_id.shortcode(2501040375429168306) AS code_of_the_id,
       insta_id.from_shortcode('CK1JqHqFVOy') AS id_of_the_code;
-- The bounds: the 64 bits read unsigned, 1 to 11 characters.
SELECT i, insta_id.shortcode(i) AS code, insta_id.from_shortcode(insta_id.shortcode(i)) = i AS round_trip
FROM unnest(ARRAY[0, 1, 63, 64, 9223372036854775807, -9223372036854775808, -1]::bigint[]) i;
-- Every ID comes back: 100,000 spread over the 64 bits, and minted ones.
SELECT count(*) AS ids,
       count(*) FILTER (WHERE insta_id.from_shortcode(insta_id.shortcode(i)) <> i) AS changed,
       max(length(insta_id.shortcode(i))) AS longest
FROM (SELECT (g * 184467440737095::bigint) # (g::bigint << 40) AS i FROM generate_series(-50000, 49999) g) x;
CREATE SEQUENCE sc_seq;
SELECT count(*) FILTER (WHERE insta_id.from_shortcode(insta_id.shortcode(id)) <> id) AS changed,
       min(length(insta_id.shortcode(id))) = 11 AS eleven_characters
FROM (SELECT insta_id.next_id(5, 'sc_seq') AS id FROM generate_series(1, 1000)) x;
DROP SEQUENCE sc_seq;
-- Leading A's are padding, as in a shortcode padded to a fixed width; a
-- long text (stored compressed, so read detoasted) too.
SELECT insta_id.from_shortcode('AAAB') AS one, insta_id.from_shortcode('AP__________') AS minus_one;
CREATE TABLE sc_long (c text);
INSERT INTO sc_long VALUES (repeat('A', 100000) || 'CWvxAY7B0ci');
SELECT pg_column_compression(c) IS NOT NULL AS compressed, insta_id.from_shortcode(c) FROM sc_long;
DROP TABLE sc_long;
-- Not a shortcode: 22P02, and no ID.
SELECT insta_id.from_shortcode('');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.from_shortcode('CK1J+q');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.from_shortcode('CK1 JqH');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.from_shortcode('é');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.from_shortcode('QAAAAAAAAAA');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.from_shortcode(repeat('x', 60) || '!');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.from_shortcode('BAAAAAAAAAAA');
\echo :LAST_ERROR_SQLSTATE
-- NULL in, NULL out; declared IMMUTABLE, STRICT, PARALLEL SAFE; PUBLIC's.
SELECT insta_id.shortcode(NULL) IS NULL AS null_id, insta_id.from_shortcode(NULL) IS NULL AS null_code;
SELECT p.oid::regprocedure, provolatile, proisstrict, proparallel,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may
FROM pg_proc p WHERE pronamespace = 'insta_id'::regnamespace AND proname IN ('shortcode', 'from_shortcode')
ORDER BY p.oid::regprocedure::text;
-- In an index, as an IMMUTABLE function may be: a lookup by shortcode.
CREATE TABLE sc_posts (id bigint PRIMARY KEY);
CREATE INDEX ON sc_posts (insta_id.shortcode(id));
INSERT INTO sc_posts VALUES (2715604631366879010), (1);
SELECT id FROM sc_posts WHERE insta_id.shortcode(id) = 'CWvxAY7B0ci';
DROP TABLE sc_posts;
