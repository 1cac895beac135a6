-- The shard tables the psycopg and node-postgres examples use: a template
-- schema, and logical shards 1..4 copied from it (insta1..insta4), each with
-- its own sequence and its own next_id DEFAULT. tests/clients.sh loads it
-- into a fresh database. (The Django and SQLAlchemy examples make the same
-- with their own migrations and metadata.)
CREATE EXTENSION IF NOT EXISTS insta_id;
CREATE SCHEMA template;
CREATE TABLE template.photos (
    user_id bigint NOT NULL,
    caption text NOT NULL DEFAULT ''
);
SELECT insta_id.add_id_column('template.photos', 'id', 0);
ALTER TABLE template.photos ADD PRIMARY KEY (id);
SELECT insta_id.create_shards(1, 4, 'template');
