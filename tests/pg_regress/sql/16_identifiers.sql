-- Identifier fuzzing of every helper: schema, template, table and column
-- names with quotes, dots, spaces, mixed case, $$, comment and statement
-- markers, backslashes, keywords, 63-byte and non-ASCII names. Each helper
-- either works exactly (the objects asked for, named as given) or fails
-- with a SQLSTATE; and an event trigger logging every DDL command shows no
-- statement ran outside the schemas the call was about.
SET client_min_messages = warning;
SELECT count(*) >= 0 AS clean FROM (SELECT insta_id.drop_shard(shard_id, force => true) FROM insta_id.shards()) d;
CREATE TABLE public.ddl_log (call int, tag text, schema_name text, identity text);
CREATE TABLE public.fuzz_call (n int);
INSERT INTO public.fuzz_call VALUES (0);
CREATE FUNCTION public.log_ddl() RETURNS event_trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO public.ddl_log SELECT (SELECT n FROM public.fuzz_call), c.command_tag, c.schema_name, c.object_identity
    FROM pg_event_trigger_ddl_commands() c;
END
$$;
CREATE EVENT TRIGGER insta_id_regress_ddl ON ddl_command_end EXECUTE FUNCTION public.log_ddl();

CREATE TABLE public.fuzz_names (k int PRIMARY KEY, name text NOT NULL);
INSERT INTO public.fuzz_names VALUES
    (1, 'q"uo''te'), (2, 'dot.ted'), (3, 'sp ace'), (4, 'MiXeD'), (5, '$$dollar$$'),
    (6, repeat('x', 63)), (7, repeat('é', 31)), (8, 'semi; DROP SCHEMA public CASCADE; --'),
    (9, 'back\slash'), (10, '日本語'), (11, 'select'), (12, '/* c */ x'), (13, 'user'), (14, '-- y');
-- And two that cannot be names: refused, never truncated or emptied behind
-- the caller's back.
CREATE TABLE public.bad_names (k int PRIMARY KEY, name text NOT NULL);
INSERT INTO public.bad_names VALUES (15, repeat('y', 64)), (16, '');

-- Each helper over each name, in a subtransaction: 'ok' or the SQLSTATE.
-- The schema of shard 500+k is the name itself, its table and id column too;
-- template 't'||name has a table of that name, copied into shard 600+k.
CREATE FUNCTION public.try(k int, sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    UPDATE public.fuzz_call SET n = k;
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END
$$;
CREATE FUNCTION public.mint(sql text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE shard int;
BEGIN
    EXECUTE sql INTO shard;
    RETURN shard;
END
$$;
SELECT f.k,
       public.try(f.k, format('SELECT insta_id.create_shard(%s, %L)', 500 + f.k, f.name)) AS create_shard,
       public.try(f.k, format('CREATE TABLE %I.%I (v int)', f.name, f.name)) AS "table",
       public.try(f.k, format('SELECT insta_id.add_id_column(%L, %L)', format('%I.%I', f.name, f.name), f.name)) AS add_id_column,
       public.try(f.k, format('CREATE SCHEMA %I; CREATE TABLE %1$I.%2$I (v int); SELECT insta_id.add_id_column(%3$L, %4$L, 0)',
                                          left('t' || f.name, 63), f.name, format('%I.%I', left('t' || f.name, 63), f.name), f.name)) AS template,
       public.try(f.k, format('SELECT insta_id.create_shards(%s, %1$s, %L)', 600 + f.k, left('t' || f.name, 63))) AS create_shards
FROM public.fuzz_names f ORDER BY f.k;

-- The objects asked for, named as given; rows get their shard's IDs.
SELECT f.k, n.nspname = f.name AS schema_named, c.relname = f.name AS table_named,
       public.mint(format('INSERT INTO %I.%I (v) VALUES (1) RETURNING insta_id.shard_id(%I)', f.name, f.name, f.name)) AS mints,
       public.mint(format('INSERT INTO insta%s.%I (v) VALUES (1) RETURNING insta_id.shard_id(%I)', 600 + f.k, f.name, f.name)) AS copy_mints
FROM public.fuzz_names f
LEFT JOIN pg_namespace n ON n.nspname = f.name
LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = f.name
ORDER BY f.k;

SELECT b.k, public.try(b.k, format('SELECT insta_id.create_shard(%s, %L)', 500 + b.k, b.name)) AS create_shard,
       public.try(b.k, format('SELECT insta_id.create_shards(%s, %1$s, %L)', 600 + b.k, b.name)) AS create_shards,
       public.try(b.k, format('SELECT insta_id.adopt_shard(%L, %s)', b.name, 600 + b.k)) AS adopt_shard
FROM public.bad_names b ORDER BY b.k;
SELECT count(*) AS made FROM insta_id.shards() WHERE shard_id IN (515, 516, 615, 616);
CALL insta_id.migrate('bad', repeat('y', 64), 'SELECT 1');
\echo :LAST_ERROR_SQLSTATE
UPDATE public.fuzz_call SET n = 0;

-- Migrations on each template (procedures: from the top level), adopting and
-- dropping. (Shards made by create_shard have no template, so every
-- template's migrations would reach them: these are given none.)
UPDATE insta_id_admin.shard_registry SET template_schema = '-' WHERE shard_id BETWEEN 501 AND 599;
SELECT format('UPDATE public.fuzz_call SET n = %s', f.k),
       format('CALL insta_id.migrate(%L, %L, %L)', 'm' || f.k, left('t' || f.name, 63),
              format('ALTER TABLE %I ADD COLUMN %I int', f.name, left('c' || f.name, 63)))
FROM public.fuzz_names f ORDER BY f.k \gexec
SELECT f.k, count(a.*) AS migrated_schemas,
       (SELECT count(*) FROM pg_attribute x WHERE x.attrelid = format('insta%s.%I', 600 + f.k, f.name)::regclass
                                              AND x.attname = left('c' || f.name, 63)) AS shard_has_column
FROM public.fuzz_names f LEFT JOIN insta_id_admin.applied_migrations a ON a.migration = 'm' || f.k
GROUP BY f.k ORDER BY f.k;
SELECT f.k,
       public.try(f.k, format('DELETE FROM insta_id_admin.shard_registry WHERE shard_id = %s', 500 + f.k)) AS unregister,
       public.try(f.k, format('SELECT insta_id.adopt_shard(%L, %s)', f.name, 500 + f.k)) AS adopt_shard,
       public.try(f.k, format('SELECT insta_id.drop_shard(%s, true), insta_id.drop_shard(%s, true)', 500 + f.k, 600 + f.k)) AS drop_shard
FROM public.fuzz_names f ORDER BY f.k;
SELECT f.k, n.oid IS NULL AS shard_schema_gone FROM public.fuzz_names f LEFT JOIN pg_namespace n ON n.nspname = f.name ORDER BY f.k;

-- What the DDL log shows: for each name, every command's schema was one the
-- call was about (the shard's, the template's, or shard 600+k's).
SELECT f.k, count(l.*) AS commands,
       count(l.*) FILTER (WHERE l.schema_name IS DISTINCT FROM f.name AND l.schema_name IS DISTINCT FROM left('t' || f.name, 63)
                                AND l.schema_name IS DISTINCT FROM 'insta' || (600 + f.k)
                                AND NOT (l.tag = 'CREATE SCHEMA' AND l.identity IN (quote_ident(f.name), quote_ident(left('t' || f.name, 63)),
                                                                                     'insta' || (600 + f.k)))) AS elsewhere
FROM public.fuzz_names f LEFT JOIN public.ddl_log l ON l.call = f.k
GROUP BY f.k ORDER BY f.k;
SELECT call, tag, schema_name, identity FROM public.ddl_log l JOIN public.fuzz_names f ON f.k = l.call
WHERE l.schema_name IS DISTINCT FROM f.name AND l.schema_name IS DISTINCT FROM left('t' || f.name, 63)
  AND l.schema_name IS DISTINCT FROM 'insta' || (600 + f.k)
  AND NOT (l.tag = 'CREATE SCHEMA' AND l.identity IN (quote_ident(f.name), quote_ident(left('t' || f.name, 63)), 'insta' || (600 + f.k)))
ORDER BY 1, 2, 3, 4;
SELECT count(*) AS public_still_there FROM pg_namespace WHERE nspname = 'public';

DROP EVENT TRIGGER insta_id_regress_ddl;

-- A table named with multibyte characters, as long as a name may be: its
-- sequence's name is cut by bytes, whole characters, and fits (cut by
-- characters it did not, PostgreSQL cut it to the table's own name, and the
-- search for a free name never ended).
SELECT insta_id.create_shard(690);
SELECT format('CREATE TABLE insta690.%I (v int)', repeat(U&'\8868', 20) || U&'\7532') \gexec
SELECT insta_id.add_id_column(format('insta690.%I', repeat(U&'\8868', 20) || U&'\7532')::regclass) AS id_sequence \gset
SELECT octet_length(c.relname) AS bytes, right(c.relname, 4) AS ending FROM pg_class c WHERE c.oid = :'id_sequence'::regclass;
SELECT insta_id.drop_shard(690, force => true);
SELECT format('DROP SCHEMA %I CASCADE', left('t' || f.name, 63)) FROM public.fuzz_names f ORDER BY f.k \gexec
DELETE FROM insta_id_admin.applied_migrations;
DELETE FROM insta_id_admin.migrations;
DROP TABLE public.ddl_log, public.fuzz_call, public.fuzz_names, public.bad_names;
DROP FUNCTION public.log_ddl(), public.try(int, text), public.mint(text);
