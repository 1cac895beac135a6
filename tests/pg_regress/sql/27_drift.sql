-- shard_drift describes once per template (issue 58): a shard's table
-- whose catalog rows are its template namesake's is not described at all
-- (its rows would be the template table's), instead of deparsing its
-- own. What a call reports must be what describing every shard reports:
-- the same rows, and every difference of an object that keeps its name
-- found. Each difference is a row of drift_cases, planted in a shard of
-- its own (a new case is a new row); shard 400 has none.
SET client_min_messages = warning;
\set SHOW_CONTEXT never
SELECT count(*) >= 0 AS dropped FROM (SELECT insta_id.drop_shard(shard_id, force => true) FROM insta_id.shards()) d;
CREATE ROLE insta_id_regress_drift;
CREATE SCHEMA drift_outside;
CREATE TABLE drift_outside.codes (code text PRIMARY KEY);
-- Every part the shards take from the template: primary keys (one with
-- INCLUDE), foreign keys within the schema and out of it, CHECKs, plain,
-- expression, partial and descending indexes, a trigger with a WHEN, a
-- policy, a partitioned table's index; a column of the schema's own enum.
CREATE SCHEMA dr_tmpl;
CREATE TYPE dr_tmpl.state AS ENUM ('open', 'shut');
CREATE TABLE dr_tmpl.orders (total numeric NOT NULL CHECK (total >= 0), state dr_tmpl.state NOT NULL DEFAULT 'open', note text);
SELECT insta_id.add_id_column('dr_tmpl.orders', 'id', 0);
ALTER TABLE dr_tmpl.orders ADD PRIMARY KEY (id);
CREATE TABLE dr_tmpl.items (order_id bigint NOT NULL REFERENCES dr_tmpl.orders (id) ON DELETE CASCADE,
                            sku text NOT NULL, qty int NOT NULL CONSTRAINT items_qty_check CHECK (qty > 0),
                            code text REFERENCES drift_outside.codes);
SELECT insta_id.add_id_column('dr_tmpl.items', 'id', 0);
ALTER TABLE dr_tmpl.items ADD PRIMARY KEY (id) INCLUDE (sku);
CREATE INDEX items_sku_idx ON dr_tmpl.items (sku);
CREATE INDEX items_lower_idx ON dr_tmpl.items (lower(sku)) WHERE qty > 1;
CREATE INDEX orders_state_idx ON dr_tmpl.orders (state DESC NULLS LAST);
CREATE FUNCTION dr_tmpl.touch() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NEW; END $f$;
CREATE TRIGGER items_touch BEFORE INSERT OR UPDATE ON dr_tmpl.items
    FOR EACH ROW WHEN (NEW.qty > 0) EXECUTE FUNCTION dr_tmpl.touch();
ALTER TABLE dr_tmpl.orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY orders_mine ON dr_tmpl.orders TO insta_id_regress_drift USING (total > 0);
CREATE VIEW dr_tmpl.open_orders AS SELECT id, total FROM dr_tmpl.orders WHERE state = 'open';
CREATE TABLE dr_tmpl.events (at timestamptz NOT NULL, order_id bigint REFERENCES dr_tmpl.orders) PARTITION BY RANGE (at);
CREATE TABLE dr_tmpl.events_2026 PARTITION OF dr_tmpl.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
CREATE INDEX events_at_idx ON dr_tmpl.events (at);
CREATE STATISTICS dr_tmpl.items_stats (dependencies) ON sku, qty FROM dr_tmpl.items;
-- A CHECK calling the schema's own function; a column of an array type
-- whose own name depends on the order the types were made in (b's array
-- is __b, the enum _b having taken _b).
CREATE FUNCTION dr_tmpl.positive(int) RETURNS boolean LANGUAGE sql IMMUTABLE RETURN $1 > 0;
CREATE TABLE dr_tmpl.notes (n int CONSTRAINT notes_n_check CHECK (dr_tmpl.positive(n)));
-- Views naming the schema's objects by oid in their query trees: its own
-- function; a regclass constant (whose value is an oid); an empty array of
-- its enum (of which PostgreSQL records no dependency).
CREATE VIEW dr_tmpl.positive_orders AS SELECT id FROM dr_tmpl.orders WHERE dr_tmpl.positive(total::int);
CREATE VIEW dr_tmpl.tagged_orders AS SELECT id, tableoid = 'dr_tmpl.orders'::regclass AS here FROM dr_tmpl.orders;
CREATE VIEW dr_tmpl.no_states AS SELECT cardinality(ARRAY[]::dr_tmpl.state[]) AS n;
-- Tables whose expressions name the schema's objects where PostgreSQL
-- records no dependency: a CHECK with an empty array of its enum, one and
-- an index's predicate with a regclass[] constant.
CREATE TABLE dr_tmpl.marks (m int CONSTRAINT marks_check CHECK (cardinality(ARRAY[]::dr_tmpl.state[]) = 0));
CREATE TABLE dr_tmpl.tags (t oid CONSTRAINT tags_check CHECK (tableoid <> ALL ('{dr_tmpl.orders}'::regclass[])));
CREATE TABLE dr_tmpl.flags (f oid);
CREATE INDEX flags_f_idx ON dr_tmpl.flags (f) WHERE f <> ALL ('{dr_tmpl.orders}'::regclass[]);
-- A default naming no object of a user's (keyed by its node tree).
CREATE TABLE dr_tmpl.stamps (at timestamptz DEFAULT now());
CREATE TYPE dr_tmpl.b AS ENUM ('x');
CREATE TYPE dr_tmpl._b AS ENUM ('x');
CREATE TABLE dr_tmpl.z (c dr_tmpl.b[]);
CREATE TABLE dr_tmpl.labels (l text);
-- Strings spelling the schema's name, which create_shards copies as they
-- are (a copy's default reads 'dr_tmpl.x' too): a default, CHECKs (one
-- of a tsvector), a view's. A statistics object whose name holds a space
-- and a quote. And a grant of the template's function to a role whose
-- name holds a quote (a row prints grants, then the function's
-- definition).
CREATE TABLE dr_tmpl.strings (s text DEFAULT 'dr_tmpl.x' CONSTRAINT strings_s_check CHECK (s <> 'dr_tmpl.y'), n int,
                              v tsvector CONSTRAINT strings_v_check CHECK (v <> 'dr_tmpl.z'::tsvector));
CREATE STATISTICS dr_tmpl."strings ""stats" (dependencies) ON s, n FROM dr_tmpl.strings;
CREATE VIEW dr_tmpl.named AS SELECT to_regclass('dr_tmpl.orders') AS r;
-- Functions whose search_path names the schema after pg_catalog, in
-- capitals as a session wrote it (FROM CURRENT), or nothing ('').
CREATE FUNCTION dr_tmpl.pathed() RETURNS int LANGUAGE sql SET search_path = pg_catalog, dr_tmpl, pg_temp RETURN 1;
SELECT set_config('search_path', 'DR_TMPL, pg_catalog', false) IS NOT NULL AS set;
CREATE FUNCTION dr_tmpl.current_path() RETURNS int LANGUAGE sql SET search_path FROM CURRENT RETURN 1;
RESET search_path;
CREATE FUNCTION dr_tmpl.hardened() RETURNS int LANGUAGE sql SET search_path = '' RETURN 1;
-- A CHECK naming its own table (a copy's names its own).
CREATE TABLE dr_tmpl.selfref (x int);
ALTER TABLE dr_tmpl.selfref ADD CONSTRAINT selfref_check CHECK (tableoid = 'dr_tmpl.selfref'::regclass);
CREATE ROLE "insta_id_regress_o'drift";
GRANT EXECUTE ON FUNCTION dr_tmpl.positive(int) TO "insta_id_regress_o'drift";
SELECT insta_id.create_shards(400, 466, 'dr_tmpl');
-- A column of a collation each schema got once its copies were made (its
-- own: create_shards copies none).
DO $$
DECLARE
    s text;
BEGIN
    FOR s IN SELECT 'dr_tmpl' UNION ALL SELECT 'insta' || g FROM generate_series(400, 466) g LOOP
        EXECUTE format('CREATE COLLATION %1$I.c (provider = libc, locale = ''C''); ALTER TABLE %1$I.labels ALTER COLUMN l TYPE text COLLATE %1$I.c', s);
    END LOOP;
END
$$;

-- %1$I: the shard's schema.
CREATE TABLE drift_cases (shard int PRIMARY KEY, label text NOT NULL, change text NOT NULL);
INSERT INTO drift_cases VALUES
    (401, 'index: another column', 'DROP INDEX %1$I.items_sku_idx; CREATE INDEX items_sku_idx ON %1$I.items (qty)'),
    (402, 'index: descending', 'DROP INDEX %1$I.items_sku_idx; CREATE INDEX items_sku_idx ON %1$I.items (sku DESC)'),
    (403, 'index: an operator class', 'DROP INDEX %1$I.items_sku_idx; CREATE INDEX items_sku_idx ON %1$I.items (sku text_pattern_ops)'),
    (404, 'index: a collation', 'DROP INDEX %1$I.items_sku_idx; CREATE INDEX items_sku_idx ON %1$I.items (sku COLLATE "C")'),
    (405, 'index: storage options', 'ALTER INDEX %1$I.items_sku_idx SET (fillfactor = 70)'),
    (406, 'index: its predicate', 'DROP INDEX %1$I.items_lower_idx; CREATE INDEX items_lower_idx ON %1$I.items (lower(sku)) WHERE qty > 2'),
    (407, 'index: its expression', 'DROP INDEX %1$I.items_lower_idx; CREATE INDEX items_lower_idx ON %1$I.items (upper(sku)) WHERE qty > 1'),
    (408, 'index: unique', 'DROP INDEX %1$I.items_sku_idx; CREATE UNIQUE INDEX items_sku_idx ON %1$I.items (sku)'),
    (409, 'primary key: its included columns', 'ALTER TABLE %1$I.items DROP CONSTRAINT items_pkey, ADD PRIMARY KEY (id) INCLUDE (qty)'),
    (410, 'check: its expression', 'ALTER TABLE %1$I.items DROP CONSTRAINT items_qty_check, ADD CONSTRAINT items_qty_check CHECK (qty > 1)'),
    (411, 'check: not valid', 'ALTER TABLE %1$I.items DROP CONSTRAINT items_qty_check, ADD CONSTRAINT items_qty_check CHECK (qty > 0) NOT VALID'),
    (412, 'foreign key: its action', 'ALTER TABLE %1$I.items DROP CONSTRAINT items_order_id_fkey, ADD CONSTRAINT items_order_id_fkey FOREIGN KEY (order_id) REFERENCES %1$I.orders (id)'),
    (413, 'foreign key: the template''s table', 'ALTER TABLE %1$I.items DROP CONSTRAINT items_order_id_fkey, ADD CONSTRAINT items_order_id_fkey FOREIGN KEY (order_id) REFERENCES dr_tmpl.orders (id) ON DELETE CASCADE'),
    (414, 'foreign key: deferrable', 'ALTER TABLE %1$I.items ALTER CONSTRAINT items_order_id_fkey DEFERRABLE INITIALLY DEFERRED'),
    (415, 'foreign key: the column it references, renamed', 'ALTER TABLE %1$I.orders RENAME COLUMN id TO order_id'),
    (416, 'trigger: its timing', 'DROP TRIGGER items_touch ON %1$I.items; CREATE TRIGGER items_touch AFTER INSERT OR UPDATE ON %1$I.items FOR EACH ROW WHEN (NEW.qty > 0) EXECUTE FUNCTION %1$I.touch()'),
    (417, 'trigger: its condition', 'DROP TRIGGER items_touch ON %1$I.items; CREATE TRIGGER items_touch BEFORE INSERT OR UPDATE ON %1$I.items FOR EACH ROW WHEN (NEW.qty > 1) EXECUTE FUNCTION %1$I.touch()'),
    (418, 'trigger: the template''s function', 'DROP TRIGGER items_touch ON %1$I.items; CREATE TRIGGER items_touch BEFORE INSERT OR UPDATE ON %1$I.items FOR EACH ROW WHEN (NEW.qty > 0) EXECUTE FUNCTION dr_tmpl.touch()'),
    (419, 'trigger: its columns', 'DROP TRIGGER items_touch ON %1$I.items; CREATE TRIGGER items_touch BEFORE INSERT OR UPDATE OF qty ON %1$I.items FOR EACH ROW WHEN (NEW.qty > 0) EXECUTE FUNCTION %1$I.touch()'),
    (420, 'trigger: disabled', 'ALTER TABLE %1$I.items DISABLE TRIGGER items_touch'),
    (421, 'policy: its expression', 'ALTER POLICY orders_mine ON %1$I.orders USING (total > 1)'),
    (422, 'policy: its roles', 'ALTER POLICY orders_mine ON %1$I.orders TO PUBLIC'),
    (423, 'a column renamed under an index', 'ALTER TABLE %1$I.items RENAME COLUMN sku TO stock_unit'),
    (424, 'a column''s type under an index', 'ALTER TABLE %1$I.items ALTER COLUMN sku TYPE varchar(40)'),
    (425, 'view: its definition', 'CREATE OR REPLACE VIEW %1$I.open_orders AS SELECT id, total FROM %1$I.orders WHERE state = ''shut'''),
    (426, 'view: the template''s table', 'CREATE OR REPLACE VIEW %1$I.open_orders AS SELECT id, total FROM dr_tmpl.orders WHERE state = ''open'''),
    (427, 'view: a column it reads, renamed', 'ALTER TABLE %1$I.orders RENAME COLUMN total TO amount'),
    (428, 'view: a column of its own, renamed', 'ALTER VIEW %1$I.open_orders RENAME COLUMN total TO amount'),
    (429, 'view: an option', 'ALTER VIEW %1$I.open_orders SET (security_barrier = true)'),
    (430, 'table: its owner', 'ALTER TABLE %1$I.orders OWNER TO insta_id_regress_drift'),
    (431, 'table: a grant', 'GRANT SELECT ON %1$I.items TO insta_id_regress_drift'),
    (432, 'table: row level security forced', 'ALTER TABLE %1$I.orders FORCE ROW LEVEL SECURITY'),
    (433, 'table: its replica identity', 'ALTER TABLE %1$I.items REPLICA IDENTITY FULL'),
    (434, 'table: a storage option', 'ALTER TABLE %1$I.items SET (fillfactor = 80)'),
    (435, 'table: unlogged', 'ALTER TABLE %1$I.items SET UNLOGGED'),
    (436, 'column: NOT NULL', 'ALTER TABLE %1$I.orders ALTER COLUMN note SET NOT NULL'),
    (437, 'column: its default', 'ALTER TABLE %1$I.orders ALTER COLUMN state SET DEFAULT ''shut'''),
    (438, 'column: its default dropped', 'ALTER TABLE %1$I.orders ALTER COLUMN state DROP DEFAULT'),
    (439, 'column: a collation', 'ALTER TABLE %1$I.orders ALTER COLUMN note TYPE text COLLATE "C"'),
    (440, 'column: added', 'ALTER TABLE %1$I.orders ADD COLUMN extra int'),
    (441, 'statistics: its kinds', 'DROP STATISTICS %1$I.items_stats; CREATE STATISTICS %1$I.items_stats (ndistinct) ON sku, qty FROM %1$I.items'),
    (442, 'enum: a value added', 'ALTER TYPE %1$I.state ADD VALUE ''gone'''),
    (443, 'column: identity', 'ALTER TABLE %1$I.items ALTER COLUMN qty ADD GENERATED ALWAYS AS IDENTITY'),
    (444, 'check: the template''s function', 'ALTER TABLE %1$I.notes DROP CONSTRAINT notes_n_check, ADD CONSTRAINT notes_n_check CHECK (dr_tmpl.positive(n))'),
    (445, 'column: another array type of the same own name',
     'DROP TABLE %1$I.z; DROP TYPE %1$I._b; DROP TYPE %1$I.b; CREATE TYPE %1$I._b AS ENUM (''x''); CREATE TYPE %1$I.b AS ENUM (''x''); CREATE TABLE %1$I.z (c %1$I._b[])'),
    (446, 'view: the template''s function', 'CREATE OR REPLACE VIEW %1$I.positive_orders AS SELECT id FROM %1$I.orders WHERE dr_tmpl.positive(total::int)'),
    (447, 'view: a table of the shard it reads, another', 'CREATE TABLE %1$I.orders2 (LIKE %1$I.orders); CREATE OR REPLACE VIEW %1$I.open_orders AS SELECT id, total FROM %1$I.orders2 WHERE state = ''open'''),
    (448, 'view: a regclass constant, the template''s table', 'CREATE OR REPLACE VIEW %1$I.tagged_orders AS SELECT id, tableoid = ''dr_tmpl.orders''::regclass AS here FROM %1$I.orders'),
    (449, 'view: an empty array of the template''s enum', 'CREATE OR REPLACE VIEW %1$I.no_states AS SELECT cardinality(ARRAY[]::dr_tmpl.state[]) AS n'),
    (450, 'check: an empty array of the template''s enum', 'ALTER TABLE %1$I.marks DROP CONSTRAINT marks_check, ADD CONSTRAINT marks_check CHECK (cardinality(ARRAY[]::dr_tmpl.state[]) = 0)'),
    (451, 'check: a regclass[] constant, the template''s table', 'ALTER TABLE %1$I.tags DROP CONSTRAINT tags_check, ADD CONSTRAINT tags_check CHECK (tableoid <> ALL (''{dr_tmpl.orders}''::regclass[]))'),
    (452, 'index: a regclass[] constant, the template''s table', 'DROP INDEX %1$I.flags_f_idx; CREATE INDEX flags_f_idx ON %1$I.flags (f) WHERE f <> ALL (''{dr_tmpl.orders}''::regclass[])'),
    (453, 'column: a default of built-in functions, another', 'ALTER TABLE %1$I.stamps ALTER COLUMN at SET DEFAULT clock_timestamp()'),
    (454, 'column: next_id with another shard''s number', 'ALTER TABLE %1$I.orders ALTER COLUMN id SET DEFAULT insta_id.next_id(400, ''%1$I.orders_id_seq''::regclass)'),
    (455, 'column: next_id with another shard''s sequence', 'ALTER TABLE %1$I.orders ALTER COLUMN id SET DEFAULT insta_id.next_id(455, ''insta400.orders_id_seq''::regclass)'),
    (456, 'column: the template''s collation', 'ALTER TABLE %1$I.labels ALTER COLUMN l TYPE text COLLATE dr_tmpl.c'),
    (457, 'column: a default spelling the shard''s schema in a string', 'ALTER TABLE %1$I.strings ALTER COLUMN s SET DEFAULT ''%1$s.x'''),
    (458, 'check: a string spelling the shard''s schema', 'ALTER TABLE %1$I.strings DROP CONSTRAINT strings_s_check, ADD CONSTRAINT strings_s_check CHECK (s <> ''%1$s.y'')'),
    (459, 'view: a string spelling the shard''s schema', 'CREATE OR REPLACE VIEW %1$I.named AS SELECT to_regclass(''%1$s.orders'') AS r'),
    (460, 'check: a tsvector spelling the shard''s schema', 'ALTER TABLE %1$I.strings DROP CONSTRAINT strings_v_check, ADD CONSTRAINT strings_v_check CHECK (v <> ''%1$s.z''::tsvector)'),
    (461, 'function: a search_path naming the template', 'ALTER FUNCTION %1$I.pathed() SET search_path = pg_catalog, dr_tmpl, pg_temp'),
    (462, 'check: naming the template''s table as its own, as 0.10.0 copied it',
     'ALTER TABLE %1$I.selfref DROP CONSTRAINT selfref_check, ADD CONSTRAINT selfref_check CHECK (tableoid = ''dr_tmpl.selfref''::regclass) NOT VALID; ALTER TABLE %1$I.selfref VALIDATE CONSTRAINT selfref_check'),
    (463, 'column: a statistics target', 'ALTER TABLE %1$I.strings ALTER COLUMN s SET STATISTICS 500'),
    (464, 'column: an option', 'ALTER TABLE %1$I.strings ALTER COLUMN s SET (n_distinct = 10)'),
    (465, 'column: storage', 'ALTER TABLE %1$I.strings ALTER COLUMN s SET STORAGE EXTERNAL'),
    (466, 'column: compression', 'ALTER TABLE %1$I.strings ALTER COLUMN s SET COMPRESSION pglz');
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM drift_cases ORDER BY shard LOOP
        EXECUTE format(c.change, 'insta' || c.shard);
    END LOOP;
END
$$;

-- Each difference found, in its shard only.
SELECT coalesce(c.shard, d.shard_id) AS shard, c.label, string_agg(DISTINCT d.object, ', ') AS reported
FROM drift_cases c FULL JOIN insta_id.shard_drift('dr_tmpl') d ON d.shard_id = c.shard
GROUP BY 1, 2 ORDER BY 1;
-- A difference as it reads: the shard's, then the template's.
SELECT shard_id, object, difference FROM insta_id.shard_drift('dr_tmpl', 402, 402);
SELECT shard_id, object, difference FROM insta_id.shard_drift('dr_tmpl', 418, 418) WHERE object LIKE 'trigger%';
SELECT shard_id, object, difference FROM insta_id.shard_drift('dr_tmpl', 454, 454);
SELECT shard_id, object, difference FROM insta_id.shard_drift('dr_tmpl', 456, 456);
SELECT shard_id, object, difference FROM insta_id.shard_drift('dr_tmpl', 457, 457);
SELECT shard_id, object, difference FROM insta_id.shard_drift('dr_tmpl', 461, 461);
SELECT shard_id, object, difference FROM insta_id.shard_drift('dr_tmpl', 463, 466);

-- The tables and views taken from the template stand for the rows
-- describing each shard gives (template 0: none taken), for the shards
-- that differ and those that do not.
WITH n AS (SELECT ARRAY(SELECT oid FROM pg_namespace WHERE nspname = 'dr_tmpl' OR nspname LIKE 'insta4__') AS nsps),
     taken AS (SELECT d.* FROM n, insta_id._describe_schemas(n.nsps, 'dr_tmpl'::regnamespace::oid) d),
     -- (a relation described as its template namesake: the template's rows, in its schema)
     expanded AS (SELECT t.nsp, t.object, t.detail FROM taken t WHERE t.object IS NOT NULL
                  UNION ALL
                  SELECT m.nsp, t.object, t.detail FROM taken m
                  JOIN taken t ON t.rel = m.rel AND t.nsp = 'dr_tmpl'::regnamespace AND t.object IS NOT NULL
                  WHERE m.object IS NULL),
     deparsed AS (SELECT d.nsp, d.object, d.detail FROM n, insta_id._describe_schemas(n.nsps, 0) d)
SELECT (SELECT count(*) FROM deparsed) AS described,
       (SELECT count(*) FROM taken WHERE object IS NULL) AS relations_taken,
       (SELECT count(*) FROM (TABLE expanded EXCEPT ALL TABLE deparsed) x) AS only_taken,
       (SELECT count(*) FROM (TABLE deparsed EXCEPT ALL TABLE expanded) x) AS only_deparsed;

-- Whether a template view's tree names a user's object by OID is read
-- once a template view, whatever the plan: a join's filter read it for
-- every pair of a shard's view and a template view when the planner chose
-- a nested loop (11.7 s over 1000 shards). Nested loops forced here; the
-- other reader of _names_objects reads each default that is not a
-- next_id call once, subtracted. (The calls as the cumulative
-- statistics count them once flushed: PostgreSQL 15 shows no pending
-- count of a function called inside a statement.)
SET track_functions = 'all';
SET stats_fetch_consistency = 'none';
SET enable_hashjoin = off;
SET enable_mergejoin = off;
SELECT pg_stat_force_next_flush();
SELECT coalesce(pg_stat_get_function_calls('insta_id._names_objects(text)'::regprocedure), 0) AS names_objects_calls \gset
SELECT count(*) > 0 AS drift_found FROM insta_id.shard_drift('dr_tmpl');
SELECT pg_stat_force_next_flush();
WITH n AS (SELECT n.oid FROM pg_namespace n
           WHERE n.nspname = 'dr_tmpl'
              OR n.nspname IN (SELECT s.schema_name FROM insta_id.shards() s
                               WHERE s.template_schema IS NULL OR s.template_schema = 'dr_tmpl'))
SELECT pg_stat_get_function_calls('insta_id._names_objects(text)'::regprocedure) - :names_objects_calls
       - (SELECT count(*) FROM n JOIN pg_class c ON c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          WHERE insta_id._next_id_call(insta_id._without_locations(d.adbin::text),
                                       'insta_id.next_id(integer, regclass)'::regprocedure) IS NULL) AS template_views_read,
       (SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'dr_tmpl'::regnamespace AND c.relkind IN ('v', 'm')) AS template_views;
RESET enable_mergejoin;
RESET enable_hashjoin;
RESET stats_fetch_consistency;
RESET track_functions;

-- (force: shard 430's orders has another owner, and every items table
-- references drift_outside.codes, which links them all for the gate)
-- (from the last: 455's default uses 400's sequence, which drop_shard keeps)
SELECT count(*) AS dropped FROM (SELECT insta_id.drop_shard(shard_id, force => true) FROM insta_id.shards() WHERE shard_id BETWEEN 400 AND 466 ORDER BY shard_id DESC) d;
DROP SCHEMA dr_tmpl CASCADE;
DROP SCHEMA drift_outside CASCADE;

-- A template whose name holds a quote, which a literal doubles: its
-- regclass constants naming its table are its copies' own, no difference.
CREATE SCHEMA "dr 'q";
CREATE TABLE "dr 'q".p (id int);
CREATE TABLE "dr 'q".o (id int PRIMARY KEY, r regclass DEFAULT '"dr ''q".p'::regclass CONSTRAINT o_r_check CHECK (r <> '"dr ''q".p'::regclass));
SELECT insta_id.create_shards(470, 471, 'dr ''q');
SELECT * FROM insta_id.shard_drift('dr ''q');
SELECT count(*) AS dropped FROM (SELECT insta_id.drop_shard(shard_id) FROM insta_id.shards() WHERE shard_id IN (470, 471)) d;
DROP SCHEMA "dr 'q" CASCADE;
DROP TABLE drift_cases;
DROP ROLE insta_id_regress_drift;
DROP ROLE "insta_id_regress_o'drift";
