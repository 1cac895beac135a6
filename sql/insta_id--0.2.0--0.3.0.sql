\echo Use "ALTER EXTENSION insta_id UPDATE TO '0.3.0'" to load this file. \quit
-- 0.3.0: the duplicate guard spans all sessions without preloading on
-- PostgreSQL 17+ (the DSM registry), and insta_id.require_shared_guard can
-- forbid a per-session guard. The functions are unchanged (same library
-- symbols); guard_mode's comment says the new rule.
COMMENT ON FUNCTION insta_id.guard_mode() IS
'shared: the duplicate guard spans all sessions of the server (insta_id preloaded, or PostgreSQL 17+); session: each session guards only its own IDs (PostgreSQL 15/16 without preloading)';
