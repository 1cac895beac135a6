-- IDs: next_id and the decoders (src/functions.rs, the bit layout of
-- src/layout.rs). Every object of insta_id lives in schema insta_id, which
-- the control file fixes (schema = insta_id, relocatable = false).
-- Volatility, strictness and parallel safety are declared for each:
--   next_id reads the clock and calls nextval: VOLATILE, PARALLEL UNSAFE.
--   Decoders and range bounds depend only on their arguments and on the
--   epoch, which is fixed per database before the first ID (see README):
--   IMMUTABLE, so they work in indexes and generated columns.
-- search_path: none needed; these are C functions that run no SQL.
-- Privileges: PUBLIC's (privileges.sql): an id DEFAULT works for any role.

CREATE FUNCTION insta_id.next_id(schema_shard int, seq regclass)
RETURNS bigint
LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'insta_id_next_id';
COMMENT ON FUNCTION insta_id.next_id(int, regclass) IS
'New ID: (ms since epoch << 23) | (schema_shard << 10) | (nextval(seq) % 1024); never repeats for a sequence (see insta_id.on_overflow)';

CREATE FUNCTION insta_id.id_parts(id bigint,
    OUT created_at timestamptz, OUT shard_id int, OUT seq_id int, OUT ms_since_epoch bigint)
RETURNS record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_id_parts';
COMMENT ON FUNCTION insta_id.id_parts(bigint) IS
'Decodes an ID with the epoch in force (insta_id.epoch)';

CREATE FUNCTION insta_id.id_parts(id bigint, epoch timestamptz,
    OUT created_at timestamptz, OUT shard_id int, OUT seq_id int, OUT ms_since_epoch bigint)
RETURNS record
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_id_parts_epoch';
COMMENT ON FUNCTION insta_id.id_parts(bigint, timestamptz) IS
'Decodes an ID made with the given epoch';

CREATE FUNCTION insta_id.created_at(id bigint)
RETURNS timestamptz
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_created_at';
COMMENT ON FUNCTION insta_id.created_at(bigint) IS
'The millisecond an ID was made in (epoch in force)';

CREATE FUNCTION insta_id.shard_id(id bigint)
RETURNS int
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_shard_id';
COMMENT ON FUNCTION insta_id.shard_id(bigint) IS 'The 13-bit logical shard of an ID';

CREATE FUNCTION insta_id.seq_id(id bigint)
RETURNS int
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_seq_id';
COMMENT ON FUNCTION insta_id.seq_id(bigint) IS 'The 10-bit sequence field of an ID (nextval % 1024)';

-- Instagram's shortcodes (instagram.com/p/<shortcode>/): the ID in base 64
-- with the alphabet A-Z a-z 0-9 - _, most significant digit first, the
-- 64 bits read unsigned (src/shortcode.rs). For URLs, and for clients that
-- cannot hold a 64-bit integer.
CREATE FUNCTION insta_id.shortcode(id bigint)
RETURNS text
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_shortcode';
COMMENT ON FUNCTION insta_id.shortcode(bigint) IS
'Instagram''s shortcode of an ID: base 64, alphabet A-Z a-z 0-9 - _, 1 to 11 characters (2715604631366879010 is CWvxAY7B0ci)';

CREATE FUNCTION insta_id.from_shortcode(code text)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_from_shortcode';
COMMENT ON FUNCTION insta_id.from_shortcode(text) IS
'The ID of an Instagram shortcode (leading A''s are padding); 22P02 for a character outside A-Z a-z 0-9 - _, an empty text, or a value past 64 bits';

CREATE FUNCTION insta_id.min_id(ts timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id';
COMMENT ON FUNCTION insta_id.min_id(timestamptz) IS
'Smallest ID any shard can have in the millisecond of ts';

CREATE FUNCTION insta_id.max_id(ts timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id';
COMMENT ON FUNCTION insta_id.max_id(timestamptz) IS
'Largest ID any shard can have in the millisecond of ts';

CREATE FUNCTION insta_id.min_id(ts timestamptz, shard_id int)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id_shard';
COMMENT ON FUNCTION insta_id.min_id(timestamptz, int) IS
'Smallest ID of one shard in the millisecond of ts';

CREATE FUNCTION insta_id.max_id(ts timestamptz, shard_id int)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id_shard';
COMMENT ON FUNCTION insta_id.max_id(timestamptz, int) IS
'Largest ID of one shard in the millisecond of ts';

CREATE FUNCTION insta_id.min_id(ts timestamptz, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id_epoch';
COMMENT ON FUNCTION insta_id.min_id(timestamptz, timestamptz) IS
'Smallest ID any shard can have in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.max_id(ts timestamptz, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id_epoch';
COMMENT ON FUNCTION insta_id.max_id(timestamptz, timestamptz) IS
'Largest ID any shard can have in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.min_id(ts timestamptz, shard_id int, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_min_id_shard_epoch';
COMMENT ON FUNCTION insta_id.min_id(timestamptz, int, timestamptz) IS
'Smallest ID of one shard in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.max_id(ts timestamptz, shard_id int, epoch timestamptz)
RETURNS bigint
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_max_id_shard_epoch';
COMMENT ON FUNCTION insta_id.max_id(timestamptz, int, timestamptz) IS
'Largest ID of one shard in the millisecond of ts, for IDs made with the given epoch';

CREATE FUNCTION insta_id.epoch()
RETURNS timestamptz
LANGUAGE c STABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_epoch';
COMMENT ON FUNCTION insta_id.epoch() IS 'The epoch in force (setting insta_id.epoch)';
