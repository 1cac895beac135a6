-- The site matrix (issue 54): every helper, in each of its modes, crossed
-- with every evaluation site of tests/fixtures/evaluation_sites.sql, all
-- planted by the application role in a template and its shards. The
-- helpers are the rows of matrix.helpers, run in order by a superuser (a
-- new helper or mode is a new row there; a new site, a new row in the
-- fixture, is planted everywhere). For each row: the helper's SQLSTATE
-- (00000: it returned; a procedure's shows above, as psql prints it),
-- whether it did what it was asked, how many sites ran during it as
-- another role than their owner, and how many as a superuser, counted by a
-- sequence that a rollback does not undo (a refusal rolls back what the
-- sites wrote): 0 and 0 on every row. And every site ran, as its owner.
SET client_min_messages = warning;
\set SHOW_CONTEXT never
CREATE ROLE insta_id_regress_matrix;
SELECT format('GRANT CREATE ON DATABASE %I TO insta_id_regress_matrix', current_database()) \gexec
CREATE SCHEMA m_tmpl;
GRANT USAGE, CREATE ON SCHEMA m_tmpl TO insta_id_regress_matrix;
SET ROLE insta_id_regress_matrix;
\getenv fixtures INSTA_ID_FIXTURES
\set ECHO none
\i :fixtures/evaluation_sites.sql
\set ECHO all
SELECT evaluation_sites.plant('m_tmpl', 'template') AS planted_in_template;
RESET ROLE;

CREATE SCHEMA matrix;
-- prepare: run first, as the application role; call: the helper, as the
-- superuser; done: true when the helper did what the row asks of it.
CREATE TABLE matrix.helpers (step int PRIMARY KEY, helper text NOT NULL, mode text NOT NULL,
                             prepare text, call text NOT NULL, done text NOT NULL);
CREATE TABLE matrix.outcome (step int PRIMARY KEY, sqlstate text, done boolean, ran_as_superuser bigint);
-- The tables of a shard a helper is run over, every one.
CREATE FUNCTION matrix.tables(nsp text) RETURNS SETOF regclass LANGUAGE sql AS $$
    SELECT c.oid::regclass FROM pg_class c
    WHERE c.relnamespace = nsp::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY c.relname
$$;
GRANT USAGE ON SCHEMA matrix TO insta_id_regress_matrix;
INSERT INTO matrix.helpers VALUES
(1, 'create_shards', 'default', NULL,
 $$SELECT insta_id.create_shards(701, 701, 'm_tmpl')$$,
 $$EXISTS (SELECT FROM insta_id.shards() WHERE shard_id = 701)$$),
(2, 'create_shards_in_batches', 'default', NULL,
 $$CALL insta_id.create_shards_in_batches(702, 704, 'm_tmpl', 1)$$,
 $$(SELECT count(*) = 3 FROM insta_id.shards() WHERE shard_id BETWEEN 702 AND 704)$$),
-- (a table whose policies would apply is an error, never an empty-looking
-- table: row security forced on its owner, 42501)
(3, 'drop_shard', 'default, an empty shard, row security forced', NULL,
 $$SELECT insta_id.drop_shard(704)$$,
 $$NOT EXISTS (SELECT FROM insta_id.shards() WHERE shard_id = 704)$$),
(4, 'drop_shard', 'default, an empty shard',
 $$ALTER TABLE insta704.s_policy NO FORCE ROW LEVEL SECURITY$$,
 $$SELECT insta_id.drop_shard(704)$$,
 $$NOT EXISTS (SELECT FROM insta_id.shards() WHERE shard_id = 704)$$),
-- From here on every site is planted in the template and in each shard.
(5, 'create_shards', 'default, sites a copy refuses',
 $$SELECT evaluation_sites.plant(s, 'shard') FROM unnest('{m_tmpl,insta701,insta702,insta703}'::name[]) s$$,
 $$SELECT insta_id.create_shards(705, 705, 'm_tmpl')$$,
 $$EXISTS (SELECT FROM insta_id.shards() WHERE shard_id = 705)$$),
(6, 'migrate', 'default, every site exercised', NULL,
 (SELECT format('CALL insta_id.migrate(%L, %L, %L)', 'm_every_site', 'm_tmpl', string_agg(exercise, '; ' ORDER BY site))
  FROM evaluation_sites.sites),
 $$EXISTS (SELECT FROM insta_id.applied_migrations() WHERE migration = 'm_every_site')
   AND NOT EXISTS (SELECT FROM insta_id.pending_migrations() WHERE migration = 'm_every_site')$$),
(7, 'add_id_column', 'default, every table of a shard', NULL,
 $$SELECT count(insta_id.add_id_column(t)) FROM matrix.tables('insta701') t$$,
 $$NOT EXISTS (SELECT FROM matrix.tables('insta701') t WHERE NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = t AND a.attname = 'id'))$$),
(8, 'adopt_id_column', 'dry run, every table of a shard',
 $$DO 'DECLARE t regclass; BEGIN FOR t IN SELECT matrix.tables(''insta702'') LOOP EXECUTE format(''ALTER TABLE %s ADD COLUMN k serial'', t); END LOOP; END';
   ALTER TABLE insta702.s_policy NO FORCE ROW LEVEL SECURITY$$,
 $$SELECT count(*) FROM matrix.tables('insta702') t, insta_id.adopt_id_column(t, 'k', dry_run => true)$$,
 $$NOT EXISTS (SELECT FROM matrix.tables('insta702') t JOIN pg_attribute a ON a.attrelid = t WHERE a.attname = 'k' AND a.atttypid <> 'int'::regtype)$$),
(9, 'adopt_id_column', 'default, every table of a shard', NULL,
 $$SELECT count(*) FROM matrix.tables('insta702') t, insta_id.adopt_id_column(t, 'k')$$,
 $$NOT EXISTS (SELECT FROM matrix.tables('insta702') t JOIN pg_attribute a ON a.attrelid = t WHERE a.attname = 'k' AND a.atttypid <> 'bigint'::regtype)$$),
(10, 'create_partitions', 'default, a table with a CHECK, an index expression and a row trigger',
 $$CREATE TABLE insta703.m_parted (id bigint NOT NULL, v int CHECK (v < insta703.probe('check_table') + 100)) PARTITION BY RANGE (id);
   CREATE INDEX ON insta703.m_parted ((v + insta703.probe('index_expression')));
   CREATE TRIGGER m_parted BEFORE INSERT ON insta703.m_parted FOR EACH ROW EXECUTE FUNCTION insta703.fire('trigger_row');
   CREATE TABLE insta703.m_parted_default PARTITION OF insta703.m_parted DEFAULT;
   INSERT INTO insta703.m_parted VALUES (1, 1)$$,
 $$SELECT count(*) FROM insta_id.create_partitions('insta703.m_parted', '1 month', '2 months', '2025-01-01')$$,
 $$(SELECT count(*) = 4 FROM pg_inherits WHERE inhparent = 'insta703.m_parted'::regclass)$$),
(11, 'drop_partitions', 'list', NULL,
 $$SELECT count(*) FROM insta_id.drop_partitions('insta703.m_parted', '1 day', 'list')$$,
 $$(SELECT count(*) = 4 FROM pg_inherits WHERE inhparent = 'insta703.m_parted'::regclass)$$),
(12, 'drop_partitions', 'drop', NULL,
 $$SELECT count(*) FROM insta_id.drop_partitions('insta703.m_parted', '1 day', 'drop')$$,
 $$(SELECT count(*) = 1 FROM pg_inherits WHERE inhparent = 'insta703.m_parted'::regclass)$$),
(13, 'shard_drift', 'default', NULL,
 $$SELECT count(*) FROM insta_id.shard_drift('m_tmpl')$$,
 $$EXISTS (SELECT FROM insta_id.shard_drift('m_tmpl') WHERE shard_id = 701)$$),
(14, 'lock_shard_for_move', 'default', NULL,
 $$SELECT insta_id.lock_shard_for_move(703), pg_advisory_unlock_all()$$,
 $$NOT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())$$),
(15, 'drop_shard', 'default, a shard with rows', NULL,
 $$SELECT insta_id.drop_shard(701)$$,
 $$NOT EXISTS (SELECT FROM insta_id.shards() WHERE shard_id = 701)$$),
(16, 'drop_shard', 'force', NULL,
 $$SELECT insta_id.drop_shard(702, force => true)$$,
 $$NOT EXISTS (SELECT FROM insta_id.shards() WHERE shard_id = 702)$$);

-- A row's helper, its error caught: a function can be (a procedure that
-- commits cannot, and is called as it is).
CREATE PROCEDURE matrix.attempt(n int) LANGUAGE plpgsql AS $$
DECLARE
    state text := '00000';
BEGIN
    BEGIN
        EXECUTE (SELECT h.call FROM matrix.helpers h WHERE h.step = n);
    EXCEPTION WHEN OTHERS THEN
        state := SQLSTATE;
    END;
    INSERT INTO matrix.outcome (step, sqlstate) VALUES (n, state);
END $$;
CREATE FUNCTION matrix.superuser_runs() RETURNS bigint LANGUAGE sql AS $$
    SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM evaluation_sites.ran_as_superuser
$$;
CREATE TABLE matrix.before (step int PRIMARY KEY, ran_as_superuser bigint);
CREATE PROCEDURE matrix.begin(n int) LANGUAGE sql AS $$
    SELECT set_config('evaluation_sites.helper', n::text, false);
    INSERT INTO matrix.before VALUES (n, matrix.superuser_runs());
$$;
CREATE PROCEDURE matrix.finish(n int) LANGUAGE plpgsql AS $$
DECLARE
    did boolean;
BEGIN
    PERFORM set_config('evaluation_sites.helper', '', false);
    EXECUTE 'SELECT ' || (SELECT h.done FROM matrix.helpers h WHERE h.step = n) INTO did;
    INSERT INTO matrix.outcome AS o (step, done, ran_as_superuser)
    SELECT n, did, matrix.superuser_runs() - b.ran_as_superuser FROM matrix.before b WHERE b.step = n
    ON CONFLICT (step) DO UPDATE SET done = excluded.done, ran_as_superuser = excluded.ran_as_superuser;
END $$;

-- Every row, in order: prepare (as the application role), then the
-- helper, and its outcome. (Errors print their SQLSTATE only: a procedure's are its row's.)
\set VERBOSITY sqlstate
SELECT CASE WHEN h.prepare IS NOT NULL THEN 'SET ROLE insta_id_regress_matrix' END,
       h.prepare,
       CASE WHEN h.prepare IS NOT NULL THEN 'RESET ROLE' END,
       format('CALL matrix.begin(%s)', h.step),
       CASE WHEN h.call ~ '^CALL ' THEN h.call ELSE format('CALL matrix.attempt(%s)', h.step) END,
       format('CALL matrix.finish(%s)', h.step)
FROM matrix.helpers h ORDER BY h.step \gexec
\set VERBOSITY default

-- The matrix: each helper and mode, how many of the sites that ran during
-- it ran as another role than their owner, and how many as a superuser:
-- none may. (Which sites run in a step is not printed: a plan folds an
-- index expression again only when the relation's cache entry was rebuilt,
-- which autovacuum's ANALYZE may cause at any time.)
SELECT h.step, h.helper, h.mode, o.sqlstate, o.done,
       (SELECT count(*) FROM evaluation_sites.seen s
        WHERE s.helper = h.step::text AND (s.who <> 'insta_id_regress_matrix' OR s.superuser)) AS ran_as_another_role,
       o.ran_as_superuser
FROM matrix.helpers h LEFT JOIN matrix.outcome o USING (step) ORDER BY h.step;
SELECT count(*) AS ran_as_another_role FROM evaluation_sites.seen WHERE superuser OR who <> 'insta_id_regress_matrix';
SELECT matrix.superuser_runs() AS ran_as_a_superuser_ever;
-- Every site ran somewhere, as its owner, or the matrix proves nothing.
SELECT s.site FROM evaluation_sites.sites s
WHERE NOT EXISTS (SELECT FROM evaluation_sites.seen n WHERE n.site = s.site AND n.helper <> '') ORDER BY 1;

SELECT count(insta_id.drop_shard(shard_id, force => true)) AS dropped FROM insta_id.shards() WHERE shard_id BETWEEN 701 AND 705;
DELETE FROM insta_id_admin.applied_migrations WHERE migration = 'm_every_site';
DELETE FROM insta_id_admin.migrations WHERE name = 'm_every_site';
-- The walks in C agree with the recursive SQL they replaced, from every
-- schema and every relation of the database (tests/fixtures/gate_walk_oracle.sql).
\getenv fixtures INSTA_ID_FIXTURES
\set ECHO none
\i :fixtures/gate_walk_oracle.sql
\set ECHO all
SELECT count(*) FILTER (WHERE rels IS NULL) AS from_schemas, count(*) FILTER (WHERE rels IS NOT NULL) AS from_relations FROM gate_oracle.starts;
SELECT * FROM gate_oracle.differences();
DROP SCHEMA gate_oracle CASCADE;

DROP SCHEMA m_tmpl, matrix, evaluation_sites CASCADE;
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_matrix', current_database()) \gexec
DROP ROLE insta_id_regress_matrix;
