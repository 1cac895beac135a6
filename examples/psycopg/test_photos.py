"""Runs photos.py's recipes against the database libpq's environment names
(PGHOST, PGPORT, PGUSER, PGDATABASE), loaded with examples/schema.sql."""
import datetime
import unittest

import psycopg

import photos


class Photos(unittest.TestCase):
    def setUp(self):
        self.conn = psycopg.connect(autocommit=True)
        self.addCleanup(self.conn.close)

    def query(self, q, *args):
        return self.conn.execute(q, args).fetchall()

    def assert_minted_for(self, ids, shard):
        self.assertTrue(all(type(i) is int for i in ids), ids)
        self.assertEqual(len(set(ids)), len(ids), "an ID repeated")
        # Every ID is larger than 2**53: JavaScript numbers could not hold it.
        self.assertTrue(all(i > 2**53 for i in ids))
        self.assertEqual({photos.shard_of_id(i) for i in ids}, {shard})
        self.assertEqual(self.query("SELECT DISTINCT insta_id.shard_id(i) FROM unnest(%s::bigint[]) i",
                                    ids), [(shard,)])

    def test_shortcodes_agree_with_sql(self):
        import random
        rng = random.Random(43)
        ids = [rng.randrange(-2**63, 2**63) for _ in range(1000)] + [0, 1, 2**63 - 1, -2**63, -1]
        ids.append(photos.add_photo(self.conn, 6, "shortcode"))
        rows = self.query("SELECT i, insta_id.shortcode(i), insta_id.from_shortcode(insta_id.shortcode(i))"
                          " FROM unnest(%s::bigint[]) i", ids)
        for i, code, back in rows:
            self.assertEqual(photos.shortcode(i), code)
            self.assertEqual(photos.from_shortcode(code), i)
            self.assertEqual(back, i)
        self.assertEqual(photos.from_shortcode("CWvxAY7B0ci"), 2715604631366879010)
        for not_bigint in [2**63, -2**63 - 1]:
            with self.assertRaises(ValueError):
                photos.shortcode(not_bigint)
        for bad in ["", "CK1J+q", "QAAAAAAAAAA"]:
            with self.assertRaises(ValueError):
                photos.from_shortcode(bad)
            with self.assertRaises(psycopg.errors.InvalidTextRepresentation):
                self.query("SELECT insta_id.from_shortcode(%s)", bad)

    def test_insert_returning_one_row(self):
        photo_id = photos.add_photo(self.conn, 6, "sunset")
        self.assert_minted_for([photo_id], 3)
        # The int sent back as a parameter finds the row: nothing was rounded.
        self.assertEqual(self.query("SELECT caption, id::text FROM insta3.photos WHERE id = %s", photo_id),
                         [("sunset", str(photo_id))])

    def test_executemany_returning(self):
        captions = [f"photo {n}" for n in range(500)]
        ids = photos.add_photos(self.conn, 9, captions)
        self.assertEqual(len(ids), 500)
        self.assert_minted_for(ids, 2)
        rows = dict(self.query("SELECT id, caption FROM insta2.photos WHERE id = ANY(%s)", ids))
        self.assertEqual([rows[i] for i in ids], captions, "ids come back in the order of the rows")

    def test_copy_then_read_back(self):
        captions = [f"copied {n}" for n in range(2000)]
        ids = photos.load_photos(self.conn, 12, captions)
        self.assertEqual(len(ids), 2000)
        self.assert_minted_for(ids, 1)
        self.assertEqual(sorted(c for (c,) in self.query("SELECT caption FROM insta1.photos WHERE id = ANY(%s)", ids)),
                         sorted(captions))

    def test_decode_in_a_query(self):
        before = datetime.datetime.now(datetime.timezone.utc)
        photo_id = photos.add_photo(self.conn, 7, "dog")
        caption, created_at, shard, seq = photos.photo_with_parts(self.conn, photo_id)
        self.assertEqual((caption, shard), ("dog", 4))
        self.assertEqual(seq, photo_id & 0x3FF)
        # The ID's time is the server's clock at the INSERT: the same machine here.
        self.assertLess(abs((created_at - before).total_seconds()), 60)
        self.assertIsNone(photos.photo_with_parts(self.conn, photo_id + 1 if seq < 1023 else photo_id - 1))

    def test_transaction_rolled_back_keeps_nothing(self):
        with self.assertRaises(psycopg.errors.NotNullViolation):
            with self.conn.transaction():
                photos.add_photo(self.conn, 5, "kept?")
                self.conn.execute("INSERT INTO insta2.photos (user_id) VALUES (NULL)")
        self.assertEqual(self.query("SELECT count(*) FROM insta2.photos WHERE caption = 'kept?'"), [(0,)])

    def test_create_shards_in_batches_in_autocommit_mode(self):
        # The procedure commits after every batch: from psycopg it runs in
        # autocommit mode; in psycopg's default mode (statements inside a
        # transaction) PostgreSQL refuses it with 2D000.
        self.addCleanup(self.conn.execute, "SELECT insta_id.drop_shard(s, force => true) FROM generate_series(5, 6) s"
                                           " WHERE s IN (SELECT shard_id FROM insta_id.shards())")
        self.conn.execute("CALL insta_id.create_shards_in_batches(5, 6, 'template')")
        self.assertEqual(self.query("SELECT count(*) FROM insta_id.shards() WHERE shard_id IN (5, 6)"), [(2,)])
        with psycopg.connect() as conn:
            with self.assertRaises(psycopg.errors.InvalidTransactionTermination) as raised:
                conn.execute("CALL insta_id.create_shards_in_batches(5, 6, 'template')")
            self.assertEqual(raised.exception.sqlstate, "2D000")


if __name__ == "__main__":
    unittest.main()
