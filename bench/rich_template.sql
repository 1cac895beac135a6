-- The rich template of issue 58, for bench/shards.sh: three tables with
-- next_id keys and foreign keys, a trigger and its function, a view, a
-- partitioned table (next_id key, a foreign key) with two partitions,
-- row-level security with a policy, grants to an application role. Every
-- object owned by app_owner, not a superuser, so that each copy runs the
-- template's code through insta_id's gate as that role. Run as a
-- superuser in a database with insta_id (add_id_column is an
-- administrator's).
SET client_min_messages = warning;
DO $$ BEGIN CREATE ROLE app_owner NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN CREATE ROLE app_rw NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO app_owner', current_database()); END $$;
SET ROLE app_owner;
CREATE SCHEMA rich;
CREATE TABLE rich.accounts (name text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE rich.orders (account_id bigint NOT NULL, total numeric(12,2) NOT NULL CHECK (total >= 0),
                          note text, updated_at timestamptz);
CREATE TABLE rich.order_items (order_id bigint NOT NULL, sku text NOT NULL, qty int NOT NULL CHECK (qty > 0));
CREATE TABLE rich.events (at timestamptz NOT NULL DEFAULT now(), account_id bigint NOT NULL, kind text)
    PARTITION BY RANGE (at);
RESET ROLE;
SELECT insta_id.add_id_column('rich.accounts', 'id', 0);
SELECT insta_id.add_id_column('rich.orders', 'id', 0);
SELECT insta_id.add_id_column('rich.order_items', 'id', 0);
SELECT insta_id.add_id_column('rich.events', 'id', 0);
SET ROLE app_owner;
ALTER TABLE rich.accounts ADD PRIMARY KEY (id);
ALTER TABLE rich.orders ADD PRIMARY KEY (id), ADD FOREIGN KEY (account_id) REFERENCES rich.accounts (id);
ALTER TABLE rich.order_items ADD PRIMARY KEY (id),
    ADD FOREIGN KEY (order_id) REFERENCES rich.orders (id) ON DELETE CASCADE;
CREATE INDEX ON rich.orders (account_id);
CREATE INDEX ON rich.order_items (order_id);
ALTER TABLE rich.events ADD PRIMARY KEY (id, at), ADD FOREIGN KEY (account_id) REFERENCES rich.accounts (id);
CREATE TABLE rich.events_2026 PARTITION OF rich.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
CREATE TABLE rich.events_default PARTITION OF rich.events DEFAULT;
CREATE FUNCTION rich.touch() RETURNS trigger LANGUAGE plpgsql
    AS $f$ BEGIN NEW.updated_at := now(); RETURN NEW; END $f$;
CREATE TRIGGER orders_touch BEFORE INSERT OR UPDATE ON rich.orders
    FOR EACH ROW EXECUTE FUNCTION rich.touch();
CREATE VIEW rich.order_totals AS
    SELECT o.account_id, sum(o.total) AS total, count(*) AS orders FROM rich.orders o GROUP BY o.account_id;
ALTER TABLE rich.orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY orders_rw ON rich.orders FOR ALL TO app_rw USING (account_id > 0);
GRANT USAGE ON SCHEMA rich TO app_rw;
GRANT SELECT, INSERT, UPDATE, DELETE ON rich.accounts, rich.orders, rich.order_items, rich.events TO app_rw;
GRANT SELECT ON rich.order_totals TO app_rw;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA rich TO app_rw;
RESET ROLE;
