\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.4.0'" to load this file. \quit
-- 0.4.0: the duplicate guard survives restarts. Before any ID of a
-- millisecond leaves next_id, a mark at or past it is on disk
-- ($PGDATA/insta_id.mark); after a restart IDs continue above it, so a clock
-- that is behind cannot repeat IDs. high_water_mark() shows the mark.
CREATE FUNCTION insta_id.high_water_mark()
RETURNS timestamptz
LANGUAGE c VOLATILE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'insta_id_high_water_mark';
COMMENT ON FUNCTION insta_id.high_water_mark() IS
'The durable high-water mark: no ID of this server is later; after a restart IDs continue above it until the clock passes it (NULL before the first ID)';
GRANT EXECUTE ON FUNCTION insta_id.high_water_mark() TO PUBLIC;
