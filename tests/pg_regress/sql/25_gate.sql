-- One gate for tenants' code (issue 54): every statement a helper runs on a
-- shard's relation, and every read of one, runs as the one owner of the
-- code PostgreSQL may evaluate for it, or is refused (42501). Each case is
-- a row: what the DBA (a superuser) and the tenant (the application role)
-- make in a shard of their own, then the helper the DBA runs. The tenant's
-- code counts who ran it in sequences, which a rollback does not undo (a
-- refused helper's code may have run before the refusal): no case may show
-- a superuser, and a case that succeeds must show its code ran, as the
-- tenant, or it proves nothing. A new vector is a new row.
SET client_min_messages = warning;
\set SHOW_CONTEXT never
CREATE ROLE insta_id_regress_tenant;
CREATE ROLE insta_id_regress_other;
-- The tenant's code: probe(site), IMMUTABLE (folded wherever PostgreSQL
-- folds constants); fire(site), a trigger function; and three that leave
-- something in the caller's session, or try to.
CREATE SCHEMA tenant_code AUTHORIZATION insta_id_regress_tenant;
SET ROLE insta_id_regress_tenant;
CREATE SEQUENCE tenant_code.as_tenant;
CREATE SEQUENCE tenant_code.as_superuser;
CREATE SEQUENCE tenant_code.as_other;
GRANT USAGE ON SCHEMA tenant_code TO PUBLIC;
GRANT USAGE ON SEQUENCE tenant_code.as_tenant, tenant_code.as_superuser, tenant_code.as_other TO PUBLIC;
CREATE FUNCTION tenant_code.ran() RETURNS int LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT 0 * nextval(CASE WHEN (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user) THEN 'tenant_code.as_superuser'
                            WHEN current_user = 'insta_id_regress_tenant' THEN 'tenant_code.as_tenant'
                            ELSE 'tenant_code.as_other' END::regclass)::int $$;
CREATE FUNCTION tenant_code.probe(site text) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT tenant_code.ran()';
CREATE FUNCTION tenant_code.fire() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN PERFORM tenant_code.ran(); RETURN NEW; END';
CREATE FUNCTION tenant_code.lock_session() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN PERFORM tenant_code.ran(); PERFORM pg_advisory_lock(4242); RETURN NEW; END';
CREATE FUNCTION tenant_code.lock_transaction() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN PERFORM tenant_code.ran(); PERFORM pg_advisory_xact_lock(4243); RETURN NEW; END';
CREATE FUNCTION tenant_code.prepare() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN PERFORM tenant_code.ran(); EXECUTE ''PREPARE left_behind AS SELECT 1''; RETURN NEW; END';
CREATE FUNCTION tenant_code.unlock_all() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN PERFORM tenant_code.ran(); PERFORM pg_advisory_unlock_all(); RETURN NEW; END';
CREATE FUNCTION tenant_code.lock_then_fail() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN PERFORM tenant_code.ran(); PERFORM pg_advisory_lock(4242); RAISE EXCEPTION ''after the lock'' USING ERRCODE = ''check_violation''; END';
CREATE FUNCTION tenant_code.unlock_then_fail() RETURNS trigger LANGUAGE plpgsql AS
    'BEGIN PERFORM tenant_code.ran(); PERFORM pg_advisory_unlock_all(); RAISE EXCEPTION ''after the unlock'' USING ERRCODE = ''check_violation''; END';
CREATE FUNCTION tenant_code.open_cursor() RETURNS trigger LANGUAGE plpgsql AS
    'DECLARE c refcursor := ''left_open''; BEGIN PERFORM tenant_code.ran(); OPEN c FOR SELECT 1; RETURN NEW; END';
-- (an operator whose function is the tenant's, for another's NEGATOR)
CREATE FUNCTION tenant_code.ne(int, int) RETURNS boolean LANGUAGE sql IMMUTABLE AS
    'SELECT tenant_code.ran() = 0 AND $1 OPERATOR(pg_catalog.<>) $2';
CREATE OPERATOR tenant_code.!=! (LEFTARG = int, RIGHTARG = int, FUNCTION = tenant_code.ne);
-- (a table of the tenant's outside the shard, written by a DBA's rule)
CREATE TABLE tenant_code.log (v int);
GRANT INSERT ON tenant_code.log TO PUBLIC;
CREATE TRIGGER log_row BEFORE INSERT ON tenant_code.log FOR EACH ROW EXECUTE FUNCTION tenant_code.fire('log');
-- (an operator named like pg_catalog's, for a schema first on search_path)
CREATE FUNCTION tenant_code.ge(bigint, bigint) RETURNS boolean LANGUAGE sql AS
    'SELECT tenant_code.ran() = 0 AND $1 OPERATOR(pg_catalog.>=) $2';
RESET ROLE;

-- The cases. In dba and tenant, {s} is the shard's schema (the tenant's)
-- and {c} the case's number; in run, {n} is the shard.
CREATE TABLE gate_cases (n int PRIMARY KEY, c text NOT NULL, dba text NOT NULL, tenant text NOT NULL, run text NOT NULL,
                         before_run text NOT NULL DEFAULT '');
INSERT INTO gate_cases VALUES
-- drop_shard's check that a shard is empty plans a read of each table,
-- folding the tenant's index expressions and predicates, statistics
-- expressions and partition keys: run as the tenant.
(701, 'drop_shard: index expression', '',
 'CREATE TABLE {s}.t (v int); CREATE INDEX ON {s}.t ((v + tenant_code.probe(''{c}'')))',
 'SELECT insta_id.drop_shard({n})'),
(702, 'drop_shard: partial index predicate', '',
 'CREATE TABLE {s}.t (v int); CREATE INDEX ON {s}.t (v) WHERE v > tenant_code.probe(''{c}'')',
 'SELECT insta_id.drop_shard({n})'),
(703, 'drop_shard: statistics expression', '',
 'CREATE TABLE {s}.t (v int); CREATE STATISTICS {s}.st ON (v + tenant_code.probe(''{c}'')), v FROM {s}.t',
 'SELECT insta_id.drop_shard({n})'),
(704, 'drop_shard: partition key', '',
 'CREATE TABLE {s}.t (v int) PARTITION BY RANGE ((v + tenant_code.probe(''{c}''))); CREATE TABLE {s}.t1 PARTITION OF {s}.t FOR VALUES FROM (0) TO (100)',
 'SELECT insta_id.drop_shard({n})'),
-- The DBA's table with the tenant's index expression: refused, not run.
(705, 'drop_shard: the DBA''s table, the tenant''s index', 'CREATE TABLE {s}.t (v int); CREATE INDEX ON {s}.t ((v + tenant_code.probe(''{c}'')))', '',
 'SELECT insta_id.drop_shard({n})'),
-- An exclusion constraint whose index names no column (its predicate, or
-- an expression of constants): the index depends on its constraint alone,
-- and counts all the same.
(707, 'drop_shard: the DBA''s table, the tenant''s exclusion predicate',
 'CREATE TABLE {s}.t (v int, EXCLUDE USING btree (v WITH =) WHERE (tenant_code.probe(''{c}'') = 0))', '',
 'SELECT insta_id.drop_shard({n})'),
-- The DBA's operator whose NEGATOR is the tenant's: no dependency records
-- it, and PostgreSQL runs the negator for NOT (a =!= b), in a CHECK too.
(708, 'add_id_column: the DBA''s CHECK, its operator''s negator the tenant''s',
 'CREATE FUNCTION {s}.eq(int, int) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS ''BEGIN RETURN $1 = $2; END''; CREATE OPERATOR {s}.=!= (LEFTARG = int, RIGHTARG = int, FUNCTION = {s}.eq, NEGATOR = OPERATOR(tenant_code.!=!)); CREATE TABLE {s}.t (id bigint, v int CHECK (NOT (v OPERATOR({s}.=!=) 2))); INSERT INTO {s}.t VALUES (NULL, 1)', '',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- A table of the DBA's that shards' tables (and another role's) reference:
-- a read runs no foreign key's code, so drop_shard's check reads the
-- tenant's table as the tenant; a write checks rows through the key, so
-- add_id_column counts the DBA's table (and refuses).
(709, 'drop_shard: a key to the DBA''s table, which another role''s table references too', '',
 'CREATE TABLE {s}.t (u int REFERENCES shared_keys.users, v int); CREATE INDEX ON {s}.t ((v + tenant_code.probe(''{c}'')))',
 'SELECT insta_id.drop_shard({n})'),
(710, 'add_id_column: a key to the DBA''s table', '',
 'CREATE TABLE {s}.t (id bigint, u int REFERENCES shared_keys.users, v int); INSERT INTO {s}.t VALUES (NULL, NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.fire(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- With force, nothing of the shard is read.
(706, 'drop_shard, force: index expression', '',
 'CREATE TABLE {s}.t (v int); CREATE INDEX ON {s}.t ((v + tenant_code.probe(''{c}'')))',
 'SELECT insta_id.drop_shard({n}, force => true)'),
-- add_id_column fills an existing column with an UPDATE: the triggers a
-- role granted TRIGGER attached to the DBA's table (a statement trigger
-- fires for no row too) are refused; the tenant's own table runs as it.
(711, 'add_id_column: statement trigger of a TRIGGER grantee',
 'CREATE TABLE {s}.t (id bigint, v int); GRANT ALL ON {s}.t TO insta_id_regress_tenant',
 'CREATE TRIGGER t_st AFTER UPDATE ON {s}.t FOR EACH STATEMENT EXECUTE FUNCTION tenant_code.fire(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
(712, 'add_id_column: row trigger of a TRIGGER grantee',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); GRANT ALL ON {s}.t TO insta_id_regress_tenant',
 'CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.fire(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
(713, 'add_id_column: the tenant''s table and row trigger', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.fire(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- The tenant's index calls the tenant's function, whose result is a domain
-- of a third role's: that domain's CHECK runs on every value, and counts.
(714, 'add_id_column: a function of the tenant''s index returns another role''s domain',
 'CREATE DOMAIN tenant_code.d{c} AS int CHECK (VALUE IS NULL OR tenant_code.probe(''{c}'') = 0); ALTER DOMAIN tenant_code.d{c} OWNER TO insta_id_regress_other; CREATE FUNCTION tenant_code.h{c}(int) RETURNS tenant_code.d{c} LANGUAGE sql IMMUTABLE AS ''SELECT $1''; ALTER FUNCTION tenant_code.h{c}(int) OWNER TO insta_id_regress_tenant',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE INDEX ON {s}.t ((tenant_code.h{c}(v)))',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- adopt_id_column widens a key: PostgreSQL validates every foreign key on
-- it again, planning a query over both tables as one owner. A referencing
-- table of the tenant's, of any type, partitioned or not: refused, in a
-- dry run too.
(721, 'adopt_id_column: a bigint column referencing the DBA''s key',
 'CREATE TABLE {s}.k (id serial PRIMARY KEY); GRANT REFERENCES ON {s}.k TO insta_id_regress_tenant',
 'CREATE TABLE {s}.r (k bigint REFERENCES {s}.k, v int); CREATE INDEX ON {s}.r ((v + tenant_code.probe(''{c}'')))',
 'SELECT count(*) FROM insta_id.adopt_id_column(''{s}.k'')'),
(722, 'adopt_id_column, dry run: a bigint column referencing the DBA''s key',
 'CREATE TABLE {s}.k (id serial PRIMARY KEY); GRANT REFERENCES ON {s}.k TO insta_id_regress_tenant',
 'CREATE TABLE {s}.r (k bigint REFERENCES {s}.k, v int); CREATE INDEX ON {s}.r ((v + tenant_code.probe(''{c}'')))',
 'SELECT count(*) FROM insta_id.adopt_id_column(''{s}.k'', dry_run => true)'),
(723, 'adopt_id_column: a partitioned table referencing the DBA''s key',
 'CREATE TABLE {s}.k (id serial PRIMARY KEY); GRANT REFERENCES ON {s}.k TO insta_id_regress_tenant',
 'CREATE TABLE {s}.r (k int REFERENCES {s}.k, v int) PARTITION BY RANGE (v); CREATE TABLE {s}.r1 PARTITION OF {s}.r FOR VALUES FROM (0) TO (100); CREATE INDEX ON {s}.r1 ((v + tenant_code.probe(''{c}'')))',
 'SELECT count(*) FROM insta_id.adopt_id_column(''{s}.k'')'),
(724, 'adopt_id_column: the tenant''s key and referencing table', '',
 'CREATE TABLE {s}.k (id serial PRIMARY KEY); CREATE TABLE {s}.r (k int REFERENCES {s}.k, v int); CREATE INDEX ON {s}.r ((v + tenant_code.probe(''{c}'')))',
 'SELECT count(*) FROM insta_id.adopt_id_column(''{s}.k'')'),
-- create_partitions reads the default partition (planning folds its
-- index expressions), drop_partitions detaches through the gate.
(731, 'create_partitions: the default partition''s index expression', '',
 'CREATE TABLE {s}.e (id bigint) PARTITION BY RANGE (id); CREATE TABLE {s}.e_default PARTITION OF {s}.e DEFAULT; CREATE INDEX ON {s}.e_default ((id + tenant_code.probe(''{c}'')))',
 'SELECT count(*) FROM insta_id.create_partitions(''{s}.e'', ''1 month'', ''1 month'')'),
(732, 'create_partitions: the DBA''s table, the tenant''s default partition index',
 'CREATE TABLE {s}.e (id bigint) PARTITION BY RANGE (id); CREATE TABLE {s}.e_default PARTITION OF {s}.e DEFAULT; CREATE INDEX ON {s}.e_default ((id + tenant_code.probe(''{c}'')))', '',
 'SELECT count(*) FROM insta_id.create_partitions(''{s}.e'', ''1 month'', ''1 month'')'),
-- An operator >= the tenant planted in the schema of the DBA's table (it
-- may create there): the schema is first on search_path while the gate
-- runs, so every object in it counts, and the schema holds two owners'.
(733, 'create_partitions: an operator planted beside the DBA''s table',
 'CREATE TABLE {s}.e (id bigint) PARTITION BY RANGE (id); CREATE TABLE {s}.e_default PARTITION OF {s}.e DEFAULT',
 'CREATE OPERATOR {s}.>= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = tenant_code.ge)',
 'SELECT count(*) FROM insta_id.create_partitions(''{s}.e'', ''1 month'', ''1 month'')'),
-- Nothing of the tenant's code stays in the caller's session: an advisory
-- lock is refused and released (PostgreSQL does not tell a session's from
-- a transaction's, so both are), and so is a prepared statement, which is
-- deallocated.
(741, 'add_id_column: a session advisory lock taken by a trigger', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.lock_session(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
(742, 'add_id_column: a transaction advisory lock taken by a trigger', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.lock_transaction(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
(743, 'add_id_column: a statement prepared by a trigger', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.prepare(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- The caller's own session lock (a mover's: insta_id's, form 3) released
-- by the tenant's pg_advisory_unlock_all(): refused, not given back.
(744, 'add_id_column: the caller''s advisory lock released by a trigger', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.unlock_all(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- The same when the tenant's code raises after taking or releasing one: a
-- lock it took is released, the original error goes on (23514); a lock it
-- released of the caller's is refused.
(745, 'add_id_column: a session advisory lock taken by a trigger that then fails', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.lock_then_fail(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
(746, 'add_id_column: the caller''s advisory lock released by a trigger that then fails', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.unlock_then_fail(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- A caller holding an advisory lock of SQL's: a hold taken again inside
-- could not be told from it, so nothing runs (55000).
(747, 'add_id_column: the caller holds an advisory lock', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.fire(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- A cursor left open by the tenant's code would run later, as the caller.
(748, 'add_id_column: a cursor left open by a trigger', '',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE TRIGGER t_row BEFORE UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION tenant_code.open_cursor(''{c}'')',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})'),
-- A rule of the DBA's table writing a table of the tenant's elsewhere:
-- that table's trigger would run as whoever the statement runs as, so it
-- counts (rules' and policies' tables are reached like foreign keys').
(751, 'add_id_column: a rule writing the tenant''s table elsewhere',
 'CREATE TABLE {s}.t (id bigint, v int); INSERT INTO {s}.t VALUES (NULL, 1); CREATE RULE t_log AS ON UPDATE TO {s}.t DO ALSO INSERT INTO tenant_code.log VALUES (1)', '',
 'SELECT insta_id.add_id_column(''{s}.t'', ''id'', {n})');
-- (what the DBA holds before the helper runs: the mover's session lock,
-- or a lock of SQL's)
UPDATE gate_cases SET before_run = 'SELECT insta_id.lock_shard_for_move(' || n || ')' WHERE n IN (744, 746);
UPDATE gate_cases SET before_run = 'SELECT pg_advisory_lock(4245)' WHERE n = 747;

-- (the DBA's table that cases 709 and 710 reference, and another role's)
CREATE SCHEMA shared_keys;
CREATE TABLE shared_keys.users (id int PRIMARY KEY);
GRANT USAGE ON SCHEMA shared_keys TO PUBLIC;
GRANT REFERENCES ON shared_keys.users TO PUBLIC;
CREATE TABLE shared_keys.other_refs (u int REFERENCES shared_keys.users);
ALTER TABLE shared_keys.other_refs OWNER TO insta_id_regress_other;

-- Each case in a shard of its own, its schema the tenant's. Then, in a
-- new session (whose relation cache has folded none of the tenant's
-- expressions yet, as a DBA's would not have), the helper run by the DBA
-- in a subtransaction, and who ran the tenant's code counted.
DO $$
DECLARE
    g record;
    s name;
BEGIN
    FOR g IN SELECT * FROM gate_cases ORDER BY n LOOP
        s := insta_id.create_shard(g.n);
        EXECUTE format('ALTER SCHEMA %I OWNER TO insta_id_regress_tenant', s);
        IF g.dba <> '' THEN
            EXECUTE replace(replace(g.dba, '{s}', s), '{c}', g.n::text);
        END IF;
        IF g.tenant <> '' THEN
            SET LOCAL ROLE insta_id_regress_tenant;
            EXECUTE replace(replace(g.tenant, '{s}', s), '{c}', g.n::text);
            RESET ROLE;
        END IF;
    END LOOP;
END
$$;
\c
SET client_min_messages = warning;
\set SHOW_CONTEXT never
CREATE FUNCTION pg_temp.runs() RETURNS int[] LANGUAGE sql AS $$
    SELECT ARRAY[coalesce(pg_sequence_last_value('tenant_code.as_tenant'), 0),
                 coalesce(pg_sequence_last_value('tenant_code.as_superuser'), 0),
                 coalesce(pg_sequence_last_value('tenant_code.as_other'), 0)]::int[] $$;
CREATE TABLE gate_results (n int, outcome text, as_tenant boolean, as_superuser boolean, as_other boolean,
                           locks_left bigint, prepared_left bigint);
DO $$
DECLARE
    g record;
    state text;
    before int[];
BEGIN
    FOR g IN SELECT * FROM gate_cases ORDER BY n LOOP
        IF g.before_run <> '' THEN
            EXECUTE g.before_run;
        END IF;
        before := pg_temp.runs();
        BEGIN
            EXECUTE replace(replace(g.run, '{n}', g.n::text), '{s}', 'insta' || g.n);
            state := 'ok';
        EXCEPTION WHEN OTHERS THEN
            state := SQLSTATE;
        END;
        INSERT INTO gate_results
        SELECT g.n, state, a[1] > before[1], a[2] > before[2], a[3] > before[3],
               (SELECT count(*) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objid IN (4242, 4243) AND l.pid = pg_backend_pid()),
               (SELECT count(*) FROM pg_prepared_statements)
        FROM pg_temp.runs() a;
        PERFORM pg_advisory_unlock_all();
        DEALLOCATE ALL;
        PERFORM insta_id.drop_shard(g.n, force => true) FROM insta_id.shards() x WHERE x.shard_id = g.n;
    END LOOP;
END
$$;
-- outcome: ok, or the SQLSTATE; whether the tenant's code ran as the
-- tenant, as a superuser (never), as another role (never).
SELECT g.n, g.c AS "case", r.outcome, r.as_tenant, r.as_superuser, r.as_other, r.locks_left, r.prepared_left
FROM gate_cases g JOIN gate_results r USING (n) ORDER BY g.n;
-- Every case proved something: refused (42501) before the tenant's code
-- ran, or done with it run as the tenant (741 to 748: run as the tenant,
-- then refused, or its own error; 747: refused before; 706, drop_shard
-- with force, reads nothing).
SELECT g.n, g.c AS proves_nothing FROM gate_cases g JOIN gate_results r USING (n)
WHERE r.as_superuser OR r.as_other
   OR NOT CASE WHEN g.n BETWEEN 741 AND 744 OR g.n IN (746, 748) THEN r.outcome = '42501' AND r.as_tenant
               WHEN g.n = 745 THEN r.outcome = '23514' AND r.as_tenant AND r.locks_left = 0
               WHEN g.n = 747 THEN r.outcome = '55000' AND NOT r.as_tenant
               WHEN g.n = 706 THEN r.outcome = 'ok' AND NOT r.as_tenant
               ELSE (r.outcome = '42501' AND NOT r.as_tenant) OR (r.outcome = 'ok' AND r.as_tenant) END;

-- A refusal names each owner and its objects.
SELECT insta_id.create_shard(790);
ALTER SCHEMA insta790 OWNER TO insta_id_regress_tenant;
CREATE TABLE insta790.t (id bigint, v int);
GRANT ALL ON insta790.t TO insta_id_regress_tenant;
SET ROLE insta_id_regress_tenant;
CREATE TRIGGER t_st AFTER UPDATE ON insta790.t FOR EACH STATEMENT EXECUTE FUNCTION tenant_code.fire('named');
RESET ROLE;
SELECT insta_id.add_id_column('insta790.t', 'id', 790);
\echo :LAST_ERROR_SQLSTATE
SELECT insta_id.drop_shard(790, force => true);

-- A transaction that reads one snapshot to its end (REPEATABLE READ,
-- SERIALIZABLE) would hide from the gate's walk what was made after that
-- snapshot, yet run it: every helper that would run a table owner's code
-- refuses there (25000) before running any (tests/isolation's gate_snapshot
-- shows the trigger it would miss). Each case is a row; in READ COMMITTED
-- each runs the tenant's code, as the tenant, or it proves nothing.
SELECT insta_id.create_shard(780), insta_id.create_shard(782);
ALTER SCHEMA insta780 OWNER TO insta_id_regress_tenant;
ALTER SCHEMA insta782 OWNER TO insta_id_regress_tenant;
CREATE SCHEMA snapshot_tmpl AUTHORIZATION insta_id_regress_tenant;
SET ROLE insta_id_regress_tenant;
CREATE TABLE insta780.t (id bigint, v int);
INSERT INTO insta780.t VALUES (NULL, 1);
CREATE TRIGGER t_row BEFORE UPDATE ON insta780.t FOR EACH ROW EXECUTE FUNCTION tenant_code.fire('snapshot');
CREATE TABLE insta780.k (id serial PRIMARY KEY);
CREATE TABLE insta780.r (k int REFERENCES insta780.k, v int);
CREATE INDEX ON insta780.r ((v + tenant_code.probe('snapshot')));
CREATE TABLE insta780.e (id bigint) PARTITION BY RANGE (id);
CREATE TABLE insta780.e_default PARTITION OF insta780.e DEFAULT;
CREATE INDEX ON insta780.e_default ((id + tenant_code.probe('snapshot')));
CREATE TABLE insta782.t (v int);
CREATE INDEX ON insta782.t ((v + tenant_code.probe('snapshot')));
CREATE TABLE snapshot_tmpl.t (v int);
CREATE INDEX ON snapshot_tmpl.t ((v + tenant_code.probe('snapshot')));
RESET ROLE;
CREATE TABLE snapshot_cases (n int PRIMARY KEY, run text NOT NULL);
INSERT INTO snapshot_cases VALUES
(1, 'SELECT insta_id.add_id_column(''insta780.t'', ''id'', 780)'),
(2, 'SELECT count(*) FROM insta_id.adopt_id_column(''insta780.k'')'),
(3, 'SELECT count(*) FROM insta_id.create_partitions(''insta780.e'', ''1 month'', ''1 month'')'),
(4, 'SELECT insta_id.create_shards(781, 781, ''snapshot_tmpl'')'),
(5, 'SELECT insta_id.drop_shard(782)');
-- (the outcome: ok or the SQLSTATE, and who ran the tenant's code)
CREATE FUNCTION pg_temp.outcome(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    before int[] := pg_temp.runs();
    state text := 'ok';
BEGIN
    BEGIN
        EXECUTE sql;
    EXCEPTION WHEN OTHERS THEN
        state := SQLSTATE || ' ' || SQLERRM;
    END;
    RETURN state || CASE WHEN (pg_temp.runs())[1] > before[1] THEN ', ran as the tenant' ELSE '' END
                 || CASE WHEN (pg_temp.runs())[2] > before[2] THEN ', ran as a superuser' ELSE '' END
                 || CASE WHEN (pg_temp.runs())[3] > before[3] THEN ', ran as another role' ELSE '' END;
END
$$;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT n, run, pg_temp.outcome(run) FROM snapshot_cases ORDER BY n;
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT n, run, pg_temp.outcome(run) FROM snapshot_cases ORDER BY n;
ROLLBACK;
BEGIN ISOLATION LEVEL READ COMMITTED;
SELECT n, run, pg_temp.outcome(run) FROM snapshot_cases ORDER BY n;
ROLLBACK;
-- A read through the gate is read-only (it follows no foreign key): a
-- write passed as one is refused, and the tenant's trigger does not run.
SELECT pg_temp.outcome('SELECT insta_id._gate_query(''insta780'', ARRAY[''insta780.t''::regclass], ''UPDATE insta780.t SET v = 2 RETURNING v'')') AS write_as_a_read;
SELECT insta_id.drop_shard(780, force => true), insta_id.drop_shard(782, force => true);
SELECT shard_id, schema_name, template_schema FROM insta_id.shards();
-- The procedures make each of their transactions READ COMMITTED
-- themselves: a session whose default is SERIALIZABLE copies and migrates
-- (the migration records the level it ran at, in the template and a shard).
SET default_transaction_isolation = 'serializable';
CALL insta_id.create_shards_in_batches(781, 781, 'snapshot_tmpl');
CALL insta_id.migrate('snapshot_level', 'snapshot_tmpl',
    'CREATE TABLE ran_at AS SELECT pg_catalog.current_setting(''transaction_isolation'') AS level');
RESET default_transaction_isolation;
SELECT 'template' AS schema, level FROM snapshot_tmpl.ran_at UNION ALL SELECT 'shard 781', level FROM insta781.ran_at;
SELECT insta_id.drop_shard(781, force => true);
DELETE FROM insta_id_admin.applied_migrations WHERE migration = 'snapshot_level';
DELETE FROM insta_id_admin.migrations WHERE name = 'snapshot_level';
DROP SCHEMA snapshot_tmpl CASCADE;
DROP TABLE snapshot_cases;

-- The registry is written only through insta_id's checked writer: a
-- delegated administrator holds no INSERT, UPDATE or DELETE on insta_id's
-- tables, and may not register, re-point or unregister a schema it cannot
-- act as the owner of.
CREATE ROLE insta_id_regress_delegate;
SELECT insta_id.grant_shard_admin('insta_id_regress_delegate');
SELECT format('GRANT CREATE ON DATABASE %I TO insta_id_regress_delegate', current_database()) \gexec
CREATE SCHEMA dba_only;
CREATE TABLE dba_only.secrets (v text);
CREATE FUNCTION dba_only.dbas() RETURNS int LANGUAGE sql RETURN 1;
CREATE FUNCTION dba_only.others() RETURNS int LANGUAGE sql RETURN 1;
ALTER FUNCTION dba_only.others() OWNER TO insta_id_regress_other;
GRANT USAGE ON SCHEMA dba_only TO insta_id_regress_delegate;
SELECT insta_id.create_shard(798);
INSERT INTO insta_id_admin.moves (shard_id, side, schema_name, peer, step, started_at, steps)
VALUES (797, 'arriving', 'insta797', 'old:5432/app', 'subscribed', now(), '[]');
SET ROLE insta_id_regress_delegate;
SELECT insta_id.create_shard(795);
CREATE TEMP TABLE delegate_rows (n int, attempt text, sql text);
INSERT INTO delegate_rows VALUES
(1, 'update the registry', 'UPDATE insta_id_admin.shard_registry SET schema_name = ''dba_only'' WHERE shard_id = 795'),
(2, 'insert into the registry', 'INSERT INTO insta_id_admin.shard_registry (shard_id, schema_name) VALUES (796, ''dba_only'')'),
(3, 'delete from the registry', 'DELETE FROM insta_id_admin.shard_registry WHERE shard_id = 795'),
(4, 'record a migration', 'INSERT INTO insta_id_admin.applied_migrations (schema_name, migration) VALUES (''insta795'', ''x'')'),
(5, 'register the DBA''s schema through the writer', 'SELECT insta_id._admin_write(''add'', ''{"shard": 796, "schema": "dba_only"}'')'),
(6, 'adopt the DBA''s schema', 'SELECT insta_id.adopt_shard(''dba_only'', 796)'),
(7, 'call the write itself', 'SELECT insta_id._admin_write_apply(''add'', ''{"shard": 796, "schema": "dba_only"}'')'),
(8, 'an unknown write', 'SELECT insta_id._admin_write(''truncate'', ''{}'')'),
-- insta_id's lock primitives, by OID: only what the caller owns
(9, 'lock pg_authid (every login would wait)', 'SELECT insta_id._lock_relations(ARRAY[''pg_authid''::regclass::oid])'),
(10, 'lock pg_authid as DROP would', 'SELECT insta_id._lock_object(''pg_class''::regclass, ''pg_authid''::regclass)'),
(11, 'lock schema pg_catalog', 'SELECT insta_id._lock_schema(''pg_catalog''::regnamespace)'),
(12, 'lock the DBA''s table', 'SELECT insta_id._lock_relations(ARRAY[''dba_only.secrets''::regclass::oid])'),
-- a shard being moved here: only the move registers it (its fence opens)
(13, 'register a shard being moved here', 'SELECT insta_id.create_shard(797)'),
-- insta_id's session-level locks (the mover's), and the registry's rows
(14, 'hold the migration runner''s lock for the session', 'SELECT insta_id._lock(1768515633, 1, false, true, false)'),
(15, 'mark a shard as being moved', 'SELECT insta_id.lock_shard_for_move(798)'),
(16, 'lock the DBA''s shard''s registry row', 'SELECT insta_id._admin_write(''lock'', ''{"shard": 798, "exclusive": true}'')'),
(17, 'record the DBA''s schema as its shard''s template', 'SELECT insta_id._admin_write(''set_template'', ''{"shard": 795, "template": "dba_only"}'')'),
(18, 'record a shard as its shard''s template', 'SELECT insta_id._admin_write(''set_template'', ''{"shard": 795, "template": "insta798"}'')');
CREATE FUNCTION pg_temp.attempt(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'done';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
SELECT n, attempt, pg_temp.attempt(sql) AS outcome FROM delegate_rows ORDER BY n;
DROP TABLE delegate_rows;
-- The gate's read of an owner holds the object for the delegate only
-- where the gate could run as its owner (a superuser's code, which does
-- not count, or a role whose rights it has): another role's function is
-- read, not held, so the delegate cannot hold up its ALTER or DROP.
-- (dba_only holds a table and both functions: three objects, two owners)
BEGIN;
SELECT ARRAY(SELECT CASE WHEN r.rolsuper THEN 'a superuser' ELSE r.rolname END FROM pg_roles r
             WHERE r.oid = ANY (insta_id._gate_owners('dba_only'::regnamespace, '{}', true)) ORDER BY 1) AS owners;
SELECT f::regproc AS function,
       (SELECT count(*) FROM pg_locks l WHERE l.pid = pg_backend_pid() AND l.locktype = 'object'
          AND l.classid = 'pg_proc'::regclass AND l.objid = f) AS held
FROM unnest(ARRAY['dba_only.dbas'::regproc, 'dba_only.others'::regproc]::oid[]) f ORDER BY 1;
COMMIT;
-- Its own shard it may drop, through the writer.
SELECT insta_id.drop_shard(795);
RESET ROLE;
SELECT shard_id, schema_name, template_schema FROM insta_id_admin.shard_registry WHERE shard_id BETWEEN 795 AND 798 OR schema_name = 'dba_only';
SELECT insta_id.drop_shard(798);

-- What the gate reads of the session's advisory locks before and after
-- the owner's code (_advisory_holds, the backend's own lock list) is what
-- pg_locks shows of them: both of SQL's forms and insta_id's own, shared
-- and exclusive, a lock held in both modes, the session's and the
-- transaction's, spread over the lock table's partitions (more in one
-- partition than the list's first allocation holds).
BEGIN;
SELECT count(pg_advisory_xact_lock(k)) AS exclusive, count(pg_advisory_xact_lock_shared(k, 7)) AS shared
FROM generate_series(1, 1000) k;
SELECT pg_advisory_lock(4250), pg_advisory_lock_shared(4250), pg_advisory_lock(1, 2),
       insta_id._lock(insta_id._move_lock_key(), 4251, shared => false, session => true, wait => false);
SELECT cardinality(insta_id._advisory_holds()) AS holds,
       ARRAY(SELECT h FROM unnest(insta_id._advisory_holds()) h ORDER BY 1)
       = ARRAY(SELECT format('lock %s %s %s %s %s', l.database, l.classid, l.objid, l.objsubid, l.mode = 'ShareLock')
               FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.pid = pg_backend_pid() ORDER BY 1) AS as_pg_locks;
COMMIT;
SELECT pg_advisory_unlock_all();
SELECT insta_id._advisory_holds() AS none_left;

-- The walks in C agree with the recursive SQL they replaced, from every
-- schema and every relation of the database (tests/fixtures/gate_walk_oracle.sql).
\getenv fixtures INSTA_ID_FIXTURES
\set ECHO none
\i :fixtures/gate_walk_oracle.sql
\set ECHO all
SELECT count(*) FILTER (WHERE rels IS NULL) AS from_schemas, count(*) FILTER (WHERE rels IS NOT NULL) AS from_relations FROM gate_oracle.starts;
SELECT * FROM gate_oracle.differences();
DROP SCHEMA gate_oracle CASCADE;

SELECT insta_id.grant_shard_admin('insta_id_regress_delegate', revoke => true);
SELECT format('REVOKE CREATE ON DATABASE %I FROM insta_id_regress_delegate', current_database()) \gexec
DROP OWNED BY insta_id_regress_delegate;
DROP ROLE insta_id_regress_delegate;
DELETE FROM insta_id_admin.moves WHERE shard_id = 797;
DROP TABLE gate_cases, gate_results;
DROP SCHEMA dba_only, tenant_code, shared_keys CASCADE;
DROP ROLE insta_id_regress_tenant, insta_id_regress_other;
