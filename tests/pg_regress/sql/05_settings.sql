-- Settings: insta_id.epoch, insta_id.on_overflow and
-- insta_id.require_shared_guard are superuser-only.
-- They exist in a session once the library is loaded: preloaded, by the
-- first call of an insta_id function, or by LOAD.
SET TIME ZONE 'UTC';
LOAD 'insta_id';
SHOW insta_id.epoch;
SHOW insta_id.on_overflow;
SHOW insta_id.require_shared_guard;
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
SET insta_id.require_shared_guard = off;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE insta_id_regress_app;
SET insta_id.require_shared_guard = 'sometimes';
\echo :LAST_ERROR_SQLSTATE
-- insta_id.max_lead: milliseconds, superuser-only, 0 to one hour.
SHOW insta_id.max_lead;
SET insta_id.max_lead = '250ms';
SHOW insta_id.max_lead;
-- (the range message is worded differently across versions)
\set VERBOSITY sqlstate
SET insta_id.max_lead = -1;
SET insta_id.max_lead = '2h';
\set VERBOSITY default
RESET insta_id.max_lead;
CREATE ROLE insta_id_regress_lead;
SET ROLE insta_id_regress_lead;
SET insta_id.max_lead = '1h';
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE insta_id_regress_lead;
-- insta_id.max_clock_wait: milliseconds, any role (a bound on its own
-- sessions' waits), 100 ms up; 10 s by default.
SHOW insta_id.max_clock_wait;
CREATE ROLE insta_id_regress_wait;
SET ROLE insta_id_regress_wait;
SET insta_id.max_clock_wait = '2s';
SHOW insta_id.max_clock_wait;
RESET ROLE;
DROP ROLE insta_id_regress_wait;
\set VERBOSITY sqlstate
SET insta_id.max_clock_wait = 99;
SET insta_id.max_clock_wait = 'forever';
\set VERBOSITY default
RESET insta_id.max_clock_wait;
