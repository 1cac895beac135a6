-- A complete template: enum, domain and composite types, tables using them,
-- a partitioned table with partitions, functions (plpgsql, SQL-standard
-- bodies, a row-type argument, a SET search_path naming the template),
-- triggers, views on
-- views, a materialized view with an index, row-level security and a policy
-- calling a template function, grants on all of them and owners. A shard
-- copy must hold each object as the template has it (shard_drift, and
-- tests/tap/t/005_shards.pl compares pg_dump -s of the two), refer to its own objects
-- only (after DROP SCHEMA ... CASCADE of the template, nothing of a shard is
-- dropped and everything still works), and a template holding what cannot
-- be copied is refused, naming each object.
\set SHOW_CONTEXT never
SET client_min_messages = warning;
SELECT count(*) >= 0 AS dropped FROM (SELECT insta_id.drop_shard(shard_id, force => true) FROM insta_id.shards()) d;
CREATE ROLE insta_id_regress_owner;
CREATE ROLE insta_id_regress_writer;
CREATE ROLE insta_id_regress_reader;
CREATE SCHEMA full_tmpl;
CREATE TYPE full_tmpl.status AS ENUM ('new', 'active', 'gone');
COMMENT ON TYPE full_tmpl.status IS 'lifecycle';
CREATE DOMAIN full_tmpl.handle AS text COLLATE "C" NOT NULL CONSTRAINT handle_length CHECK (length(VALUE) BETWEEN 1 AND 30);
CREATE TYPE full_tmpl.place AS (lat float8, lon float8);
CREATE FUNCTION full_tmpl.normalize(s text) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT lower(trim(s)) $$;
CREATE TABLE full_tmpl.users (name full_tmpl.handle, tenant text NOT NULL DEFAULT 'a', updated_at timestamptz,
                              status full_tmpl.status NOT NULL DEFAULT 'new', past full_tmpl.status[], home full_tmpl.place,
                              CONSTRAINT not_gone CHECK (status <> 'gone'::full_tmpl.status),
                              CONSTRAINT normal_tenant CHECK (tenant = full_tmpl.normalize(tenant)));
SELECT insta_id.add_id_column('full_tmpl.users', 'id', 0);
-- Names of its own, which a copy keeps: key, index, statistics object.
ALTER TABLE full_tmpl.users ADD CONSTRAINT users_key PRIMARY KEY (id);
CREATE UNIQUE INDEX users_tenant_name ON full_tmpl.users (tenant, full_tmpl.normalize(name)) WITH (fillfactor = 80);
COMMENT ON INDEX full_tmpl.users_tenant_name IS 'one name per tenant';
CREATE STATISTICS full_tmpl.users_stats ON tenant, status FROM full_tmpl.users;
ALTER TABLE full_tmpl.users SET (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.05);
COMMENT ON SCHEMA full_tmpl IS 'one shard''s tables';
-- Names that need quoting, in every kind of object; an unlogged table.
CREATE TYPE full_tmpl."Mood; --" AS ENUM ('o''k');
CREATE UNLOGGED TABLE full_tmpl."Scratch ""pad""" (m full_tmpl."Mood; --" DEFAULT 'o''k', note text);
CREATE VIEW full_tmpl."a view; DROP SCHEMA x" AS SELECT m AS "the ""mood""" FROM full_tmpl."Scratch ""pad""";
CREATE FUNCTION full_tmpl."f(x)"("a b" int) RETURNS int LANGUAGE sql IMMUTABLE RETURN "a b" + 1;
CREATE TABLE full_tmpl.photos (user_id bigint NOT NULL REFERENCES full_tmpl.users (id), caption text);
SELECT insta_id.add_id_column('full_tmpl.photos', 'id', 0);
-- A partitioned table, partitions of two levels, one with an index and a CHECK of its own.
CREATE TABLE full_tmpl.events (at date NOT NULL, region text NOT NULL, what text, user_id bigint REFERENCES full_tmpl.users (id))
    PARTITION BY RANGE (at);
SELECT insta_id.add_id_column('full_tmpl.events', 'id', 0);
ALTER TABLE full_tmpl.events ADD PRIMARY KEY (id, at, region);
CREATE INDEX events_what ON full_tmpl.events (what);
CREATE TABLE full_tmpl.events_2025 PARTITION OF full_tmpl.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE full_tmpl.events_2026 PARTITION OF full_tmpl.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')
    PARTITION BY LIST (region);
CREATE TABLE full_tmpl.events_2026_eu PARTITION OF full_tmpl.events_2026 FOR VALUES IN ('eu');
CREATE TABLE full_tmpl.events_2026_other PARTITION OF full_tmpl.events_2026 DEFAULT;
CREATE INDEX events_2025_at ON full_tmpl.events_2025 (at);
ALTER TABLE full_tmpl.events_2025 ADD CONSTRAINT events_2025_what CHECK (what <> '');
-- A CHECK NOT VALID, as a migration leaves it until VALIDATE (LIKE would
-- copy it validated).
ALTER TABLE full_tmpl.photos ADD CONSTRAINT photos_caption CHECK (caption <> '') NOT VALID;
-- Partitions' own defaults (a copy's are made with PARTITION OF, its parent's):
-- set on each level, the middle one's set for its partitions too, one dropped.
ALTER TABLE full_tmpl.events_2025 ALTER COLUMN what SET DEFAULT 'past';
ALTER TABLE full_tmpl.events_2026 ALTER COLUMN region SET DEFAULT 'eu';
ALTER TABLE full_tmpl.events_2026_other ALTER COLUMN region DROP DEFAULT;
-- What LIKE and PARTITION OF leave out of a column: statistics target and
-- options; a partition's own NOT NULL, comment, storage and compression (the
-- middle level's set on its partitions too, reset on one).
ALTER TABLE full_tmpl.users ALTER COLUMN tenant SET STATISTICS 500, ALTER COLUMN tenant SET (n_distinct = 100);
ALTER TABLE full_tmpl.events_2025 ALTER COLUMN what SET NOT NULL;
COMMENT ON COLUMN full_tmpl.events_2026_eu.what IS 'in the EU';
ALTER TABLE full_tmpl.events_2026 ALTER COLUMN what SET STORAGE EXTERNAL, ALTER COLUMN what SET COMPRESSION pglz;
ALTER TABLE full_tmpl.events_2026_other ALTER COLUMN what SET STORAGE EXTENDED, ALTER COLUMN what SET COMPRESSION default;
CREATE FUNCTION full_tmpl.touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.updated_at := now(); RETURN NEW; END $$;
COMMENT ON FUNCTION full_tmpl.touch() IS 'sets updated_at';
CREATE FUNCTION full_tmpl.photo_count(uid bigint) RETURNS bigint LANGUAGE sql STABLE
    BEGIN ATOMIC SELECT count(*) FROM full_tmpl.photos WHERE user_id = uid; END;
CREATE FUNCTION full_tmpl.user_label(u full_tmpl.users) RETURNS text LANGUAGE sql IMMUTABLE RETURN u.name || '#' || u.tenant;
CREATE FUNCTION full_tmpl.tenant_ok(t text) RETURNS boolean LANGUAGE sql STABLE SET search_path = full_tmpl, pg_catalog
    AS $$ SELECT t = current_setting('app.tenant', true) $$;
CREATE PROCEDURE full_tmpl.rename_user(uid bigint, new_name text) LANGUAGE sql
    BEGIN ATOMIC UPDATE full_tmpl.users SET name = new_name WHERE id = uid; END;
REVOKE ALL ON FUNCTION full_tmpl.tenant_ok(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION full_tmpl.tenant_ok(text) TO insta_id_regress_writer;
CREATE TRIGGER users_touch BEFORE INSERT OR UPDATE ON full_tmpl.users FOR EACH ROW EXECUTE FUNCTION full_tmpl.touch();
CREATE FUNCTION full_tmpl.default_what() RETURNS trigger LANGUAGE plpgsql
    AS $$ BEGIN NEW.what := coalesce(NEW.what, 'something'); RETURN NEW; END $$;
CREATE TRIGGER events_what BEFORE INSERT ON full_tmpl.events FOR EACH ROW EXECUTE FUNCTION full_tmpl.default_what();
CREATE VIEW full_tmpl.user_stats WITH (security_barrier) AS
    SELECT u.id, full_tmpl.user_label(u) AS label, full_tmpl.photo_count(u.id) AS photos FROM full_tmpl.users u;
COMMENT ON VIEW full_tmpl.user_stats IS 'per user';
CREATE VIEW full_tmpl.busy_users AS SELECT * FROM full_tmpl.user_stats WHERE photos > 1;
CREATE MATERIALIZED VIEW full_tmpl.caption_counts AS SELECT caption, count(*) AS n FROM full_tmpl.photos GROUP BY caption;
CREATE UNIQUE INDEX caption_counts_caption ON full_tmpl.caption_counts (caption);
ALTER TABLE full_tmpl.users ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_rows ON full_tmpl.users FOR ALL TO insta_id_regress_writer
    USING (full_tmpl.tenant_ok(tenant)) WITH CHECK (full_tmpl.tenant_ok(tenant));
-- Defaults and CHECKs naming the template's objects by OID, with or
-- without a dependency recorded (a table each): a copy's name its own.
CREATE TABLE full_tmpl.refs_table (t oid CONSTRAINT refs_table_check CHECK (t <> 'full_tmpl.users'::regclass));
CREATE TABLE full_tmpl.refs_tables (t oid CONSTRAINT refs_tables_check CHECK (t <> ALL ('{full_tmpl.users}'::regclass[])));
CREATE TABLE full_tmpl.refs_states (s text CONSTRAINT refs_states_check CHECK (s <> ALL (ARRAY[]::full_tmpl.status[]::text[])));
CREATE TABLE full_tmpl.refs_default (t regclass[] DEFAULT '{full_tmpl.photos}');
CREATE DOMAIN public.regress_rel AS regclass;
CREATE TABLE full_tmpl.refs_domains (t oid CONSTRAINT refs_domains_check CHECK (t <> ALL ('{full_tmpl.users}'::public.regress_rel[])));
-- Its own table, by a regclass constant in a default and a CHECK (of which
-- PostgreSQL records no dependency on the table): a copy's, its own too.
CREATE TABLE full_tmpl.refs_self (t regclass);
ALTER TABLE full_tmpl.refs_self ALTER COLUMN t SET DEFAULT 'full_tmpl.refs_self'::regclass,
    ADD CONSTRAINT refs_self_check CHECK (tableoid = 'full_tmpl.refs_self'::regclass);
-- A domain whose default and CHECK name the template's tables (types are
-- made before tables: these wait for them), and a table using it.
CREATE DOMAIN full_tmpl.other_rel AS regclass DEFAULT 'full_tmpl.users'::regclass
    CONSTRAINT other_rel_check CHECK (VALUE <> 'full_tmpl.photos'::regclass);
CREATE TABLE full_tmpl.refs_by_domain (r full_tmpl.other_rel);
GRANT USAGE ON SCHEMA full_tmpl TO insta_id_regress_writer, insta_id_regress_reader;
-- Grants made in another order than the copy's, a type's grant beside
-- PUBLIC's, a table's comment (which LIKE leaves out).
GRANT SELECT ON full_tmpl.refs_by_domain TO insta_id_regress_reader;
GRANT SELECT ON full_tmpl.refs_by_domain TO insta_id_regress_writer;
GRANT USAGE ON TYPE full_tmpl.place, full_tmpl.status TO insta_id_regress_reader;
COMMENT ON TABLE full_tmpl.photos IS 'a row a photo';
GRANT SELECT, INSERT, UPDATE ON full_tmpl.users, full_tmpl.photos TO insta_id_regress_writer;
GRANT SELECT ON full_tmpl.user_stats, full_tmpl.busy_users, full_tmpl.caption_counts, full_tmpl.photos TO insta_id_regress_reader;
SELECT format('GRANT USAGE ON SEQUENCE %s TO insta_id_regress_writer', pg_get_serial_sequence('full_tmpl.' || t, 'id'))
FROM unnest(ARRAY['users', 'photos']) t \gexec
-- One owner for all of it (a copy's objects are made by it), and the schema.
SELECT format('ALTER %s %s OWNER TO insta_id_regress_owner', kind, name) FROM (
    SELECT CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END AS kind, c.oid::regclass::text AS name
    FROM pg_class c WHERE c.relnamespace = 'full_tmpl'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
    UNION ALL
    SELECT 'ROUTINE', p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'full_tmpl'::regnamespace
    UNION ALL
    SELECT CASE y.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, y.oid::regtype::text FROM pg_type y
    WHERE y.typnamespace = 'full_tmpl'::regnamespace
      AND (y.typtype IN ('e', 'd') OR (SELECT c.relkind FROM pg_class c WHERE c.oid = y.typrelid) = 'c')
    UNION ALL
    SELECT 'STATISTICS', format('full_tmpl.%I', x.stxname) FROM pg_statistic_ext x WHERE x.stxnamespace = 'full_tmpl'::regnamespace) o
ORDER BY kind, name \gexec
ALTER SCHEMA full_tmpl OWNER TO insta_id_regress_owner;
SELECT insta_id._code_owner('full_tmpl') AS owner_of_its_objects;

SELECT insta_id.create_shards(201, 202, 'full_tmpl');
-- What shard 201 holds, object by object; none differs from the template.
SELECT object FROM insta_id._describe_schemas(ARRAY['insta201'::regnamespace::oid], 0) ORDER BY 1;
SELECT count(*) AS drift FROM insta_id.shard_drift('full_tmpl');
SELECT c.relname, coalesce(pg_get_constraintdef(k.oid), pg_get_expr(d.adbin, d.adrelid)) AS definition
FROM pg_class c LEFT JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'c'
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid
WHERE c.relnamespace = 'insta201'::regnamespace AND c.relname LIKE 'refs%' ORDER BY 1;
SELECT adrelid::regclass AS tbl, pg_get_expr(adbin, adrelid) AS default FROM pg_attrdef WHERE adrelid = 'insta201.refs_self'::regclass;
-- Each column of a copy as its template's, in what shard_drift compares and
-- what it does not (statistics target, options, storage, compression,
-- comment): no row differs either way.
CREATE TEMP VIEW regress_cols AS
    SELECT n.nspname, t.relname, a.attname, a.attnotnull, nullif(a.attstattarget, -1) AS statistics,
           -- (but the pg_attver Debian 15.20 gives every column)
           nullif(ARRAY(SELECT o FROM unnest(a.attoptions) o WHERE o NOT LIKE 'pg\_attver=%'), '{}') AS attoptions,
           a.attstorage, a.attcompression, col_description(t.oid, a.attnum) AS comment,
           regexp_replace(replace(pg_get_expr(d.adbin, d.adrelid), n.nspname || '.', ''), '^insta_id\.next_id\(\d+,', 'insta_id.next_id(<shard>,') AS def
    FROM pg_namespace n JOIN pg_class t ON t.relnamespace = n.oid AND t.relkind IN ('r', 'p')
    JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = t.oid AND d.adnum = a.attnum
    WHERE n.nspname IN ('full_tmpl', 'insta201');
SELECT (SELECT count(*) FROM (SELECT relname, attname, attnotnull, statistics, attoptions, attstorage, attcompression, comment, def
                              FROM regress_cols WHERE nspname = 'full_tmpl'
                              EXCEPT SELECT relname, attname, attnotnull, statistics, attoptions, attstorage, attcompression, comment, def
                              FROM regress_cols WHERE nspname = 'insta201') x) AS only_template,
       (SELECT count(*) FROM (SELECT relname, attname, attnotnull, statistics, attoptions, attstorage, attcompression, comment, def
                              FROM regress_cols WHERE nspname = 'insta201'
                              EXCEPT SELECT relname, attname, attnotnull, statistics, attoptions, attstorage, attcompression, comment, def
                              FROM regress_cols WHERE nspname = 'full_tmpl') x) AS only_copy;
SELECT relname, attname, def, attnotnull, statistics, attoptions, attstorage, attcompression, comment
FROM regress_cols WHERE nspname = 'insta201' AND (attname, relname LIKE 'events%') IN (('what', true), ('region', true), ('tenant', false))
ORDER BY 1, 2;
DROP VIEW regress_cols;
SELECT y.typname, pg_get_expr(y.typdefaultbin, 0) AS default, pg_get_constraintdef(k.oid) AS "check"
FROM pg_type y JOIN pg_constraint k ON k.contypid = y.oid WHERE y.oid = 'insta201.other_rel'::regtype;
SELECT obj_description('insta201.photos'::regclass, 'pg_class') AS comment,
       (SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'insta201.photos'::regclass AND conname = 'photos_caption') AS not_valid,
       (SELECT array_agg(a::text ORDER BY a::text) FROM pg_type, unnest(typacl) a WHERE oid = 'insta201.place'::regtype)
       = (SELECT array_agg(a::text ORDER BY a::text) FROM pg_type, unnest(typacl) a WHERE oid = 'full_tmpl.place'::regtype) AS type_acl_as_template,
       has_type_privilege('public', 'insta201.place', 'USAGE') AND has_type_privilege('public', 'insta201.status', 'USAGE') AS public_uses_the_types;
INSERT INTO insta201.refs_by_domain VALUES (DEFAULT) RETURNING r;
INSERT INTO insta201.refs_by_domain VALUES ('insta201.photos');
-- shard_drift describes once per template (27_drift): what the shards take
-- from it is what deparsing each of them gives, for every kind of object.
WITH n AS (SELECT ARRAY['full_tmpl'::regnamespace::oid, 'insta201'::regnamespace::oid, 'insta202'::regnamespace::oid] AS nsps),
     taken AS (SELECT d.* FROM n, insta_id._describe_schemas(n.nsps, 'full_tmpl'::regnamespace::oid) d),
     -- (a relation described as its template namesake: the template's rows, in its schema)
     expanded AS (SELECT t.nsp, t.object, t.detail FROM taken t WHERE t.object IS NOT NULL
                  UNION ALL
                  SELECT m.nsp, t.object, t.detail FROM taken m
                  JOIN taken t ON t.rel = m.rel AND t.nsp = 'full_tmpl'::regnamespace AND t.object IS NOT NULL
                  WHERE m.object IS NULL),
     deparsed AS (SELECT d.nsp, d.object, d.detail FROM n, insta_id._describe_schemas(n.nsps, 0) d)
SELECT (SELECT count(*) FROM taken WHERE object IS NULL) AS relations_taken,
       (SELECT count(*) FROM (TABLE expanded EXCEPT ALL TABLE deparsed) x) AS only_taken,
       (SELECT count(*) FROM (TABLE deparsed EXCEPT ALL TABLE expanded) x) AS only_deparsed;
SELECT nspowner::regrole AS schema_owner FROM pg_namespace WHERE nspname = 'insta201';
SELECT proname, proconfig FROM pg_proc WHERE pronamespace = 'insta201'::regnamespace AND proconfig IS NOT NULL;

-- Nothing of a shard depends on the template: dropping it drops nothing else.
SELECT count(*) AS objects_before FROM insta_id._describe_schemas(ARRAY['insta201'::regnamespace::oid, 'insta202'::regnamespace::oid], 0);
SET client_min_messages = notice;
DROP SCHEMA full_tmpl CASCADE;
SET client_min_messages = warning;
SELECT count(*) AS objects_after FROM insta_id._describe_schemas(ARRAY['insta201'::regnamespace::oid, 'insta202'::regnamespace::oid], 0);

-- And every object works in the shard: the trigger, the policy and its
-- function (with the shard on its search_path), the grants, the views, the
-- procedure, the materialized view.
SET ROLE insta_id_regress_writer;
SET app.tenant = 'a';
INSERT INTO insta201.users (name) VALUES ('ann') RETURNING insta_id.shard_id(id), updated_at IS NOT NULL AS touched, status;
INSERT INTO insta201.users (name, tenant) VALUES ('bob', 'b');
\echo :LAST_ERROR_SQLSTATE
-- the types, their constraints and the CHECKs, the shard's own
INSERT INTO insta201.users (name, status) VALUES ('cy', 'gone');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO insta201.users (name) VALUES ('');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO insta201.users (name) VALUES ('ANN');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS typed_columns_in_shard FROM pg_attribute a JOIN pg_type y ON y.oid = a.atttypid
WHERE a.attrelid = 'insta201.users'::regclass AND y.typnamespace = 'insta201'::regnamespace;
INSERT INTO insta201.photos (user_id, caption) SELECT id, c FROM insta201.users, unnest(ARRAY['x', 'y']) c;
RESET ROLE;
-- rows routed to the shard's partitions, with the shard's IDs and the parent's trigger
INSERT INTO insta201.events (at, region, user_id) SELECT d, r, u.id FROM insta201.users u,
    (VALUES ('2025-03-01'::date, 'eu'), ('2026-03-01', 'eu'), ('2026-03-01', 'us')) v (d, r)
RETURNING tableoid::regclass, insta_id.shard_id(id), what;
\set VERBOSITY terse
INSERT INTO insta201.events (at, region, what) VALUES ('2025-03-01', 'eu', '');
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT id AS ann FROM insta201.users \gset
CALL insta201.rename_user(:ann, 'anne');
REFRESH MATERIALIZED VIEW CONCURRENTLY insta201.caption_counts;
SET ROLE insta_id_regress_reader;
SELECT label, photos FROM insta201.busy_users;
SELECT caption, n FROM insta201.caption_counts ORDER BY 1;
-- (the reader was not granted the table itself, in the template nor here)
SELECT count(*) FROM insta201.users;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
RESET app.tenant;

-- What a copy cannot hold, or would still tie to the template, is refused
-- before any shard is made, each object named (0A000).
CREATE SCHEMA bad_tmpl;
CREATE TYPE bad_tmpl.span AS RANGE (subtype = int4);
CREATE TYPE bad_tmpl.kind AS ENUM ('a');
CREATE TABLE bad_tmpl.events (at date NOT NULL, k bad_tmpl.kind) PARTITION BY LIST (k);
CREATE TABLE bad_tmpl.logs (at date NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE public.stray_logs PARTITION OF bad_tmpl.logs DEFAULT;
CREATE AGGREGATE bad_tmpl.total(int) (sfunc = int4pl, stype = int);
CREATE TABLE bad_tmpl.t (a int);
CREATE FUNCTION bad_tmpl.pick() RETURNS int LANGUAGE sql AS $$ SELECT a FROM bad_tmpl.t LIMIT 1 $$;
CREATE FUNCTION bad_tmpl.one() RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 1 $$;
CREATE TABLE bad_tmpl.u (a int GENERATED ALWAYS AS (bad_tmpl.one()) STORED, r bad_tmpl.t,
                         o oid GENERATED ALWAYS AS ('bad_tmpl.t'::regclass) STORED,
                         n int GENERATED ALWAYS AS (cardinality(ARRAY[]::bad_tmpl.kind[])) STORED);
ALTER TABLE bad_tmpl.u ADD COLUMN me oid GENERATED ALWAYS AS ('bad_tmpl.u'::regclass) STORED;
CREATE DOMAIN bad_tmpl.positive AS int CHECK (VALUE > bad_tmpl.one());
CREATE RULE no_delete AS ON DELETE TO bad_tmpl.t DO INSTEAD NOTHING;
-- (a sequence a column owns but draws nothing from: no copy holds it)
CREATE SEQUENCE bad_tmpl.owned_only OWNED BY bad_tmpl.t.a;
SELECT insta_id.create_shards(203, 203, 'bad_tmpl');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS made FROM insta_id.shards() WHERE shard_id = 203;
DROP SCHEMA bad_tmpl CASCADE;
DROP TABLE IF EXISTS public.stray_logs;

-- Ownership is given as in the template: a caller who may not do that fails whole.
CREATE SCHEMA owned_tmpl AUTHORIZATION insta_id_regress_owner;
CREATE ROLE insta_id_regress_maker;
GRANT EXECUTE ON FUNCTION insta_id.create_shards(int, int, text), insta_id.create_shard(int, text) TO insta_id_regress_maker;
GRANT INSERT ON insta_id_admin.shard_registry TO insta_id_regress_maker;
GRANT USAGE ON SCHEMA owned_tmpl TO insta_id_regress_maker;
SELECT format('GRANT CREATE ON DATABASE %I TO insta_id_regress_maker', current_database()) \gexec
SET ROLE insta_id_regress_maker;
-- (the message differs by version: "must be member of role", "must be able to SET ROLE")
\set VERBOSITY sqlstate
SELECT insta_id.create_shards(204, 204, 'owned_tmpl');
\set VERBOSITY default
RESET ROLE;
SELECT count(*) AS made FROM pg_namespace WHERE nspname = 'insta204';
DROP SCHEMA owned_tmpl;
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_maker', current_database()) \gexec
REVOKE ALL ON insta_id_admin.shard_registry FROM insta_id_regress_maker;
REVOKE ALL ON FUNCTION insta_id.create_shards(int, int, text), insta_id.create_shard(int, text) FROM insta_id_regress_maker;
DROP ROLE insta_id_regress_maker;

-- STORED generated columns, as Django's GeneratedField (db_persist=True)
-- and Rails' stored virtual columns make them, are copied with their
-- expressions, one of them over the ID.
CREATE SCHEMA gen_tmpl;
CREATE TABLE gen_tmpl.posts (title text NOT NULL, slug text GENERATED ALWAYS AS (lower(title)) STORED);
SELECT insta_id.add_id_column('gen_tmpl.posts', 'id', 0);
ALTER TABLE gen_tmpl.posts ADD COLUMN code text GENERATED ALWAYS AS (insta_id.shortcode(id)) STORED;
SELECT insta_id.create_shards(205, 205, 'gen_tmpl');
SELECT a.attname, a.attgenerated, pg_get_expr(d.adbin, d.adrelid) AS expression
FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = 'insta205.posts'::regclass ORDER BY a.attnum;
INSERT INTO insta205.posts (title) VALUES ('Hello World')
RETURNING slug, code = insta_id.shortcode(id) AS code_of_the_id, insta_id.shard_id(id);
SELECT * FROM insta_id.shard_drift('gen_tmpl');
SELECT insta_id.drop_shard(205, force => true);
DROP SCHEMA gen_tmpl CASCADE;

-- Two ID columns whose sequences would take one name (a_b.c and a.b_c:
-- a_b_c_seq): in the copy, the second is named against what the first
-- made (the copy's statements run first), and gets a name of its own.
CREATE SCHEMA clash_tmpl;
CREATE TABLE clash_tmpl.a_b (x text);
CREATE TABLE clash_tmpl.a (x text);
SELECT insta_id.add_id_column('clash_tmpl.a_b', 'c', 0) IS NOT NULL AS added;
SELECT insta_id.add_id_column('clash_tmpl.a', 'b_c', 0) IS NOT NULL AS added;
SELECT insta_id.create_shards(206, 206, 'clash_tmpl');
SELECT count(DISTINCT pg_get_serial_sequence('insta206.' || t, col)) AS sequences,
       bool_and(pg_get_serial_sequence('insta206.' || t, col) LIKE 'insta206.%') AS in_the_copy
FROM (VALUES ('a_b', 'c'), ('a', 'b_c')) v(t, col);
INSERT INTO insta206.a_b (x) VALUES ('1') RETURNING insta_id.shard_id(c);
INSERT INTO insta206.a (x) VALUES ('1') RETURNING insta_id.shard_id(b_c);
SELECT * FROM insta_id.shard_drift('clash_tmpl');
SELECT insta_id.drop_shard(206, force => true);
DROP SCHEMA clash_tmpl CASCADE;

-- Names pg_catalog's hide: a view is deparsed with pg_catalog first, so it
-- names the template's table pg_settings and function upper(text)
-- qualified; made with pg_catalog first in the copy, it names the copy's,
-- and its call of pg_catalog's upper stays pg_catalog's. A foreign key
-- whose column's name spells the template's qualification.
CREATE SCHEMA hid_tmpl;
CREATE TABLE hid_tmpl.pg_settings (name text, setting text);
CREATE FUNCTION hid_tmpl.upper(text) RETURNS text LANGUAGE sql IMMUTABLE RETURN 'mine: ' || $1;
CREATE VIEW hid_tmpl.shown AS
    SELECT s.name, hid_tmpl.upper(s.setting) AS own, upper(s.setting) AS catalogs, 'hid_tmpl.pg_settings'::regclass AS rel
    FROM hid_tmpl.pg_settings s;
CREATE TABLE hid_tmpl.p ("k REFERENCES hid_tmpl.x" int PRIMARY KEY);
CREATE TABLE hid_tmpl.c ("k REFERENCES hid_tmpl.x" int REFERENCES hid_tmpl.p);
-- (and an unlogged partition, which PARTITION OF alone would make logged)
CREATE TABLE hid_tmpl.l (a int) PARTITION BY LIST (a);
CREATE UNLOGGED TABLE hid_tmpl.l1 PARTITION OF hid_tmpl.l FOR VALUES IN (1);
SELECT insta_id.create_shards(207, 207, 'hid_tmpl');
SELECT DISTINCT pg_describe_object(d.refclassid, d.refobjid, 0) AS the_view_uses
FROM pg_rewrite r JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
WHERE r.ev_class = 'insta207.shown'::regclass AND d.refobjid <> r.ev_class ORDER BY 1;
INSERT INTO insta207.pg_settings VALUES ('a', 'b');
SELECT * FROM insta207.shown;
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'insta207.c'::regclass AND contype = 'f';
SELECT relname, relpersistence FROM pg_class WHERE relnamespace = 'insta207'::regnamespace AND relname LIKE 'l%' ORDER BY 1;
SELECT * FROM insta_id.shard_drift('hid_tmpl');
SELECT insta_id.drop_shard(207, force => true);
DROP SCHEMA hid_tmpl CASCADE;

SELECT insta_id.drop_shard(201, force => true), insta_id.drop_shard(202, force => true);
DROP OWNED BY insta_id_regress_owner, insta_id_regress_writer, insta_id_regress_reader;
DROP ROLE insta_id_regress_owner, insta_id_regress_writer, insta_id_regress_reader;
DROP DOMAIN public.regress_rel;
