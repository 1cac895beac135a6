-- A hostile template owner (issue 23): decoys of pg_catalog's functions and
-- operators, generated from the catalog (so a new call to a built-in is
-- covered without anyone listing it), planted in the template and in a
-- shard by the application role, each logging who called it. A superuser
-- then runs every helper over them: no decoy may run with a superuser's
-- rights. Decoys with more specific argument types too: those compete
-- with pg_catalog's functions whatever the search_path order.
SET client_min_messages = warning;
CREATE ROLE insta_id_regress_app;
SELECT format('GRANT CREATE ON DATABASE %I TO insta_id_regress_app', current_database()) \gexec
SET ROLE insta_id_regress_app;
CREATE SCHEMA hostile;
CREATE TABLE hostile.log (who name, superuser boolean, called text);
GRANT USAGE ON SCHEMA hostile TO PUBLIC;
GRANT INSERT ON hostile.log TO PUBLIC;
CREATE FUNCTION hostile.note(called text) RETURNS void LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ INSERT INTO hostile.log SELECT current_user, r.rolsuper, called FROM pg_catalog.pg_roles r WHERE r.rolname = current_user $$;
CREATE SCHEMA htmpl;
CREATE TABLE htmpl.users (name text NOT NULL, email text, CHECK (length(name) > 0));
CREATE INDEX ON htmpl.users (lower(name));
CREATE VIEW htmpl.names AS SELECT upper(name) AS n FROM htmpl.users WHERE name <> '';
CREATE MATERIALIZED VIEW htmpl.counts AS SELECT count(*) AS n FROM htmpl.users;
CREATE FUNCTION htmpl.touch_extra() RETURNS trigger LANGUAGE plpgsql
AS $$ BEGIN PERFORM hostile.note('touch_extra'); RETURN NEW; END $$;
-- (a stored setting built to break out of a pasted ALTER FUNCTION ... SET)
SET search_path = htmpl, "x;ALTER/**/ROLE/**/insta_id_regress_app/**/SUPERUSER;--";
CREATE FUNCTION htmpl.touch() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$ BEGIN NEW.email := lower(NEW.email); RETURN NEW; END $$;
RESET search_path;
CREATE TRIGGER touch BEFORE INSERT ON htmpl.users FOR EACH ROW EXECUTE FUNCTION htmpl.touch();
RESET ROLE;
SELECT insta_id.add_id_column('htmpl.users', 'id', 0);
ALTER TABLE htmpl.users OWNER TO insta_id_regress_app;
ALTER SEQUENCE htmpl.users_id_seq OWNER TO insta_id_regress_app;
SET ROLE insta_id_regress_app;
-- The decoys: every pg_catalog function a role may shadow (not an aggregate
-- or window function; no internal or record arguments or results), with the
-- same argument types, calling the real one; and every operator on those.
-- Then each again with more specific types, which a call prefers to
-- pg_catalog's (an exact match beats an implicit cast, on any path order):
-- polymorphic arguments and results as text or text[]; else the first
-- argument as a type that casts to it implicitly (int4 for int8, varchar
-- for text, ...).
SET check_function_bodies = off;
CREATE FUNCTION hostile.specific(t oid, cast_source boolean) RETURNS oid LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN t IN ('anyelement'::regtype, 'anynonarray'::regtype, 'anycompatible'::regtype,
                   'anycompatiblenonarray'::regtype, '"any"'::regtype) THEN 'text'::regtype::oid
        WHEN t IN ('anyarray'::regtype, 'anycompatiblearray'::regtype) THEN 'text[]'::regtype::oid
        WHEN cast_source THEN (SELECT min(c.castsource) FROM pg_cast c JOIN pg_type y ON y.oid = c.castsource
                               WHERE c.casttarget = t AND c.castcontext = 'i' AND c.castsource <> t AND y.typtype <> 'p')
        ELSE t END
$$;
CREATE FUNCTION hostile.plant(nsp name) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    p record;
    made int := 0;
BEGIN
    FOR p IN SELECT f.proname, pg_catalog.pg_get_function_identity_arguments(f.oid) AS args,
                    pg_catalog.format_type(f.prorettype, NULL) AS ret, f.proretset, f.pronargs, f.provariadic <> 0 AS variadic
             FROM pg_catalog.pg_proc f
             WHERE f.pronamespace = 'pg_catalog'::regnamespace AND f.prokind = 'f'
               AND NOT ('internal'::regtype = ANY (f.proargtypes::oid[]) OR f.prorettype IN ('internal'::regtype, 'record'::regtype))
               AND f.proallargtypes IS NULL
    LOOP
        BEGIN
            EXECUTE format('CREATE FUNCTION %I.%I(%s) RETURNS %s%s LANGUAGE sql AS %L', nsp, p.proname, p.args,
                           CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END, p.ret,
                           format('SELECT hostile.note(%L); SELECT pg_catalog.%I(%s)', p.proname || '(' || p.args || ')', p.proname,
                                  (SELECT string_agg(CASE WHEN p.variadic AND i = p.pronargs THEN 'VARIADIC ' ELSE '' END || '$' || i, ', ')
                                   FROM generate_series(1, p.pronargs) i)));
            made := made + 1;
        EXCEPTION WHEN OTHERS THEN
            NULL;  -- (a pseudo-type result without a polymorphic argument, ...)
        END;
    END LOOP;
    FOR p IN WITH f AS (
                 SELECT f.proname, f.proargtypes::oid[] AS a, f.prorettype, f.proretset, f.pronargs, f.provariadic <> 0 AS variadic,
                        EXISTS (SELECT FROM unnest(f.proargtypes::oid[]) t JOIN pg_catalog.pg_type y ON y.oid = t
                                WHERE y.typtype = 'p') AS polymorphic
                 FROM pg_catalog.pg_proc f
                 WHERE f.pronamespace = 'pg_catalog'::regnamespace AND f.prokind = 'f' AND f.pronargs > 0
                   AND NOT ('internal'::regtype = ANY (f.proargtypes::oid[]) OR f.prorettype IN ('internal'::regtype, 'record'::regtype))
                   AND f.proallargtypes IS NULL)
             SELECT f.proname, f.proretset, f.pronargs, f.variadic,
                    (SELECT string_agg(pg_catalog.format_type(coalesce(hostile.specific(t, i = 1 AND NOT f.polymorphic), t), NULL), ', '
                                       ORDER BY i)
                     FROM unnest(f.a) WITH ORDINALITY u(t, i)) AS args,
                    pg_catalog.format_type(coalesce(hostile.specific(f.prorettype, false), f.prorettype), NULL) AS ret
             FROM f
    LOOP
        BEGIN
            EXECUTE format('CREATE FUNCTION %I.%I(%s) RETURNS %s%s LANGUAGE sql AS %L', nsp, p.proname, p.args,
                           CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END, p.ret,
                           format('SELECT hostile.note(%L); SELECT pg_catalog.%I(%s)', p.proname || '(' || p.args || ')', p.proname,
                                  (SELECT string_agg(CASE WHEN p.variadic AND i = p.pronargs THEN 'VARIADIC ' ELSE '' END || '$' || i, ', ')
                                   FROM generate_series(1, p.pronargs) i)));
            made := made + 1;
        EXCEPTION WHEN OTHERS THEN
            NULL;  -- (the same types as above: exists already; ...)
        END;
    END LOOP;
    -- Operators, on the same types and on the more specific ones above
    -- (the first operand's, as for the functions they call).
    FOR p IN WITH o AS (SELECT o.oprname, o.oprleft AS l, o.oprright AS r, c.proname
                        FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_proc c ON c.oid = o.oprcode
                        WHERE o.oprnamespace = 'pg_catalog'::regnamespace)
             SELECT o.oprname, o.l::regtype AS l, o.r::regtype AS r, o.proname FROM o
             UNION ALL
             SELECT o.oprname, hostile.specific(o.l, true)::regtype, o.r::regtype, o.proname FROM o
             WHERE o.l <> 0 AND hostile.specific(o.l, true) <> o.l
             UNION ALL
             SELECT o.oprname, 0::regtype, hostile.specific(o.r, true)::regtype, o.proname FROM o
             WHERE o.l = 0 AND hostile.specific(o.r, true) <> o.r
    LOOP
        BEGIN
            EXECUTE format('CREATE OPERATOR %I.%s (%s RIGHTARG = %s, FUNCTION = %I.%I)', nsp, p.oprname,
                           CASE WHEN p.l::oid = 0 THEN '' ELSE format('LEFTARG = %s,', p.l) END, p.r, nsp, p.proname);
            made := made + 1;
        EXCEPTION WHEN OTHERS THEN
            NULL;
        END;
    END LOOP;
    RETURN made;
END
$$;
SELECT hostile.plant('htmpl') > 3000 AS decoys_planted;
RESET ROLE;

-- The decoys work: a superuser who puts the template ahead of pg_catalog is caught.
SET search_path = htmpl, pg_catalog;
SELECT lower('X');
RESET search_path;
SELECT who, superuser, called FROM hostile.log WHERE superuser;
TRUNCATE hostile.log;

-- Every helper, by a superuser, over the hostile template and its shards.
SELECT insta_id.create_shards(301, 302, 'htmpl');
CALL insta_id.create_shards_in_batches(303, 304, 'htmpl', 1);
-- (the copy carries the decoys into every shard)
SELECT count(*) > 1000 AS decoys_in_a_shard FROM pg_proc WHERE pronamespace = 'insta301'::regnamespace;
SET search_path = public, pg_catalog;
CALL insta_id.migrate('h1', 'htmpl', 'ALTER TABLE users ADD COLUMN note text; UPDATE users SET note = lower(name)');
RESET search_path;
SELECT count(*) AS differences FROM insta_id.shard_drift('htmpl');
SET ROLE insta_id_regress_app;
INSERT INTO insta301.users (name, email) VALUES ('a', 'A@X') RETURNING insta_id.shard_id(id), email;
RESET ROLE;
CREATE TABLE insta301.extra (id int, v int);
ALTER TABLE insta301.extra OWNER TO insta_id_regress_app;
INSERT INTO insta301.extra VALUES (NULL, 1);
CREATE TRIGGER touch BEFORE UPDATE ON insta301.extra FOR EACH ROW EXECUTE FUNCTION insta301.touch_extra();
SELECT insta_id.add_id_column('insta301.extra');
SELECT insta_id.drop_shard(302, force => true);
SELECT insta_id.lock_shard_for_move(301), pg_advisory_unlock_all();
SELECT count(*) AS materialized_rows FROM insta301.counts;

-- Nothing ran as the superuser; the application role's own code ran as itself.
SELECT who, superuser, called FROM hostile.log WHERE superuser OR who <> 'insta_id_regress_app';
SELECT count(*) > 0 AS owner_code_ran_as_owner FROM hostile.log WHERE who = 'insta_id_regress_app';
SELECT rolsuper AS app_is_superuser FROM pg_roles WHERE rolname = 'insta_id_regress_app';
SELECT proconfig FROM pg_proc WHERE proname = 'touch' AND pronamespace = 'insta301'::regnamespace;

-- adopt_shard by a superuser over a shard of the hostile template.
DELETE FROM insta_id.shard_registry WHERE shard_id = 303;
SELECT insta_id.adopt_shard('insta303', 303);
SELECT who, superuser, called FROM hostile.log WHERE superuser OR who <> 'insta_id_regress_app';

-- A schema named $user: search_path would read it as the role's name, so
-- statements would run in another schema. Refused.
SELECT insta_id.create_shard(305, '$user');
CREATE TABLE "$user".t (v int);
SELECT insta_id.add_id_column('"$user".t');
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_shard(305);

SELECT insta_id.drop_shard(s, force => true) FROM generate_series(301, 304) s WHERE s <> 302;
DELETE FROM insta_id.migrations WHERE name = 'h1';
DELETE FROM insta_id.applied_migrations WHERE migration = 'h1';
DROP SCHEMA htmpl, hostile CASCADE;
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_app', current_database()) \gexec
DROP ROLE insta_id_regress_app;
