-- Settings: insta_id.epoch and insta_id.on_overflow are superuser-only.
SET TIME ZONE 'UTC';
SHOW insta_id.epoch;
SHOW insta_id.on_overflow;
SELECT insta_id.epoch();
SET insta_id.epoch = '1293843600000';
SELECT insta_id.epoch();
SELECT insta_id.created_at(2217813737473025833);
SET insta_id.epoch = 'yesterday';
\echo :LAST_ERROR_SQLSTATE
SET insta_id.epoch = '-1';
\echo :LAST_ERROR_SQLSTATE
RESET insta_id.epoch;
SET insta_id.on_overflow = 'sometimes';
\echo :LAST_ERROR_SQLSTATE
SET insta_id.on_overflow = 'error';
SET insta_id.on_overflow = 'legacy';
RESET insta_id.on_overflow;
CREATE ROLE insta_id_regress_app;
SET ROLE insta_id_regress_app;
SET insta_id.epoch = '0';
\echo :LAST_ERROR_SQLSTATE
SET insta_id.on_overflow = 'legacy';
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE insta_id_regress_app;
SHOW insta_id.max_sequences;
