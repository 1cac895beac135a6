"""Runs photos.py against the database libpq's environment names (PGHOST,
PGPORT, PGUSER, PGDATABASE): an empty database with insta_id available."""
import json
import subprocess
import threading
import unittest
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.util import setup_testing_defaults

from sqlalchemy import create_engine, event, select, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

import photos
from photos import Album, Photo, Track

engine = create_engine("postgresql+psycopg://")


def setUpModule():
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS insta_id")
    photos.create_shards(engine, 1, photos.NUM_SHARDS)


class Statements:
    """Counts the INSERT statements the engine sends."""

    def __init__(self):
        self.inserts = 0
        event.listen(engine, "before_cursor_execute", self.seen)

    def seen(self, conn, cursor, statement, *args):
        self.inserts += statement.startswith("INSERT")

    def close(self):
        event.remove(engine, "before_cursor_execute", self.seen)


class Photos(unittest.TestCase):
    def assert_minted_for(self, ids, shard):
        self.assertTrue(all(type(i) is int and i > 2**53 for i in ids), ids)
        self.assertEqual(len(set(ids)), len(ids), "an ID repeated")
        self.assertEqual({photos.shard_of_id(i) for i in ids}, {shard})

    def test_schema_is_the_shards(self):
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT shard_id, schema_name::text FROM insta_id.shards() ORDER BY 1")).all()
            self.assertEqual(rows, [(n, f"insta{n}") for n in range(1, 5)])
            default = conn.execute(text("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                                        "WHERE adrelid = 'insta3.photos'::regclass")).scalar_one()
            self.assertIn("insta_id.next_id(3, 'insta3.photos_id_seq'::regclass)", default)

    def test_add_returns_the_database_id(self):
        user = 10  # shard 3
        with photos.shard_session(engine, photos.shard_for_user(user)) as session:
            photo = Photo(user_id=user, caption="sunset")
            session.add(photo)
            session.commit()
            self.assert_minted_for([photo.id], 3)
            with engine.connect() as conn:
                self.assertEqual(conn.execute(text("SELECT insta_id.shard_id(:id), caption FROM insta3.photos "
                                                   "WHERE id = :id"), {"id": photo.id}).one(), (3, "sunset"))

    def test_bulk_flush_is_batched_and_matches_each_object(self):
        user = 8  # shard 1
        # Start the sequence just below a multiple of 1024, so the batch's low
        # 10 bits wrap: most of it shares a millisecond, where the IDs after the
        # wrap sort before those before it.
        with engine.begin() as conn:
            conn.exec_driver_sql("SELECT setval('insta1.photos_id_seq', 1024 * 50 - 100)")
        statements = Statements()
        self.addCleanup(statements.close)
        with photos.shard_session(engine, photos.shard_for_user(user)) as session:
            batch = [Photo(user_id=user, caption=f"photo {n}") for n in range(1000)]
            session.add_all(batch)
            session.commit()
            ids = [p.id for p in batch]
        self.assertEqual(statements.inserts, 1, "one INSERT ... RETURNING for the flush")
        self.assert_minted_for(ids, 1)
        with engine.connect() as conn:
            stored = dict(conn.execute(text("SELECT id, caption FROM insta1.photos WHERE id = ANY(:ids)"),
                                       {"ids": ids}).all())
        self.assertEqual([stored[p] for p in ids], [f"photo {n}" for n in range(1000)],
                         "every object got the id of its own row")

    def test_read_back_routed_by_the_id(self):
        with photos.shard_session(engine, photos.shard_for_user(7)) as session:
            photo = Photo(user_id=7, caption="dog")
            session.add(photo)
            session.commit()
            photo_id = photo.id
        with photos.shard_session(engine, photos.shard_of_id(photo_id)) as session:
            self.assertEqual(session.get(Photo, photo_id).caption, "dog")
            self.assertEqual(session.scalars(select(Photo.user_id).where(Photo.id == photo_id)).one(), 7)

    def test_without_a_shard_there_is_no_table(self):
        # Never a silent write to the template or to public.
        with self.assertRaises(ProgrammingError) as raised, Session(engine) as session:
            session.add(Photo(user_id=1))
            session.commit()
        self.assertEqual(raised.exception.orig.sqlstate, "42P01")

class Adopted(unittest.TestCase):
    """Tables made before insta_id, with rows, adopted in place."""

    def test_old_keys_kept_new_ones_minted(self):
        with engine.begin() as conn:
            # The tables and rows as the application had them (SQLAlchemy's DDL
            # for Integer and BigInteger keys with Identity()).
            conn.exec_driver_sql(
                "CREATE TABLE albums (id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, title text NOT NULL);"
                "CREATE TABLE tracks (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
                "                     album_id integer NOT NULL REFERENCES albums (id));"
                "INSERT INTO albums (title) VALUES ('old 1'), ('old 2'), ('old 3');"
                "INSERT INTO tracks (album_id) VALUES (1), (2), (3);")
        photos.adopt(engine, 6)
        with Session(engine) as session:
            album = Album(title="new")
            session.add(album)
            session.flush()
            tracks = [Track(album_id=album.id), Track(album_id=1)]
            session.add_all(tracks)
            session.commit()
            keys = [album.id] + [t.id for t in tracks]
            self.assertTrue(all(type(k) is int and k > 2**53 for k in keys), keys)
            self.assertEqual({photos.shard_of_id(k) for k in keys}, {6})
            self.assertEqual(sorted(a.id for a in session.scalars(select(Album)) if a.id < 2**53), [1, 2, 3])
        with engine.connect() as conn:
            self.assertEqual(conn.execute(text(
                "SELECT string_agg(format_type(atttypid, NULL), ',' ORDER BY attrelid::regclass::text, attname)"
                " FROM pg_attribute WHERE (attrelid, attname) IN"
                " (('albums'::regclass, 'id'), ('tracks'::regclass, 'album_id'), ('tracks'::regclass, 'id'))")).scalar_one(),
                "bigint,bigint,bigint")


def add_photo():
    """A photo of user 10, committed; its id."""
    with photos.shard_session(engine, photos.shard_for_user(10)) as session:
        photo = Photo(user_id=10, caption="sunset")
        session.add(photo)
        session.commit()
        return photo.id


def json_numbers_exact_in_javascript(text):
    """Parses JSON as JavaScript's JSON.parse would, failing on any number it
    could not hold exactly (beyond 2^53): such an ID would reach the browser
    as another one."""
    def exact(literal):
        if abs(int(literal)) > 2**53:
            raise AssertionError(f"{literal} reaches JSON as a number: JavaScript reads {float(literal):.0f}")
        return int(literal)
    return json.loads(text, parse_int=exact)


class Json(unittest.TestCase):
    def get(self, path):
        environ = {"PATH_INFO": path}
        setup_testing_defaults(environ)
        seen = {}
        body = b"".join(photos.make_json_app(engine)(environ, lambda status, headers: seen.update(status=status)))
        return seen["status"], body

    def test_ids_reach_json_as_strings(self):
        photo_id = add_photo()
        status, body = self.get(f"/photos/{photo_id}")
        self.assertEqual(status, "200 OK")
        self.assertEqual(json_numbers_exact_in_javascript(body), {"id": str(photo_id), "user_id": "10", "caption": "sunset"})

    def test_the_check_catches_a_number(self):
        with self.assertRaises(AssertionError):
            json_numbers_exact_in_javascript('{"id": %d}' % (2**62 + 1))

    def test_unknown_photo(self):
        self.assertEqual(self.get(f"/photos/{2**62 + 2 * 1024}")[0], "404 Not Found")
        self.assertEqual(self.get("/photos/x")[0], "404 Not Found")



def through_node(base_url, photo_id):
    """examples/node/fetch_photo.js: the photo fetched, its JSON read by
    JSON.parse and its id sent back, by node's fetch as a browser would."""
    return subprocess.run(["node", "fetch_photo.js", base_url, str(photo_id)],
                          cwd=Path(__file__).resolve().parents[1] / "node",
                          capture_output=True, text=True, timeout=60)


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class JsonThroughJavaScript(unittest.TestCase):
    """The endpoint over HTTP (wsgiref, on loopback), read by a real
    JavaScript client."""

    def serve(self, app):
        server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        self.addCleanup(lambda: (server.shutdown(), thread.join(), server.server_close()))
        return f"http://127.0.0.1:{server.server_port}/"

    def test_a_javascript_client_gets_the_ids_exact(self):
        photo_id = add_photo()
        out = through_node(self.serve(photos.make_json_app(engine)), photo_id)
        self.assertEqual((out.returncode, out.stdout.strip(), out.stderr), (0, str(photo_id), ""))

    def test_it_fails_on_an_id_sent_as_a_number(self):
        photo_id = add_photo()

        def numbers(environ, start_response):  # what json.dumps(photo.id) would send
            start_response("200 OK", [("Content-Type", "application/json")])
            return [json.dumps({"id": photo_id}).encode()]
        out = through_node(self.serve(numbers), photo_id)
        self.assertEqual(out.returncode, 1)
        self.assertIn(f"id reached JavaScript as the number {float(photo_id):.0f}", out.stderr)


if __name__ == "__main__":
    unittest.main()
