import json
import subprocess
from pathlib import Path

from django.core.management import call_command
from django.db import ProgrammingError, connection
from django.test import LiveServerTestCase, TestCase
from django.test.utils import CaptureQueriesContext

from .models import Photo
from .shards import shard_for_user, shard_of_id, use_shard


def sql(query, *args):
    with connection.cursor() as cursor:
        cursor.execute(query, args)
        return cursor.fetchall()


class Shards(TestCase):
    def assert_minted_for(self, pks, shard):
        self.assertTrue(all(type(pk) is int and pk > 2**53 for pk in pks), pks)
        self.assertEqual(len(set(pks)), len(pks), "a primary key repeated")
        self.assertEqual({shard_of_id(pk) for pk in pks}, {shard})
        self.assertEqual(sql("SELECT DISTINCT insta_id.shard_id(i) FROM unnest(%s::bigint[]) i", pks), [(shard,)])

    def test_migrations_made_the_shards(self):
        self.assertEqual(sql("SELECT shard_id, schema_name::text FROM insta_id.shards() ORDER BY 1"),
                         [(n, f"insta{n}") for n in range(1, 5)])
        for n in range(1, 5):
            (default,), = sql("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef"
                              " WHERE adrelid = %s::regclass", f"insta{n}.photos")
            self.assertEqual(default, f"insta_id.next_id({n}, 'insta{n}.photos_id_seq'::regclass)")
        self.assertEqual(sql("SELECT count(*) FROM pg_indexes WHERE schemaname = 'insta2'"
                             " AND tablename = 'photos'"), [(2,)], "primary key and user_id index copied")

    def test_models_and_migrations_agree(self):
        call_command("makemigrations", "photos", "--check", "--dry-run", verbosity=0)

    def test_create_returns_the_database_pk(self):
        # docs:start create
        user_id = 10
        with use_shard(shard_for_user(user_id)):
            photo = Photo.objects.create(user_id=user_id, caption="sunset")
        # photo.pk is the id the shard's DEFAULT minted, read back with RETURNING
        # docs:end create
        self.assert_minted_for([photo.pk], 3)
        self.assertEqual(sql("SELECT caption FROM insta3.photos WHERE id = %s", photo.pk), [("sunset",)])

    def test_bulk_create_fills_every_pk(self):
        user_id = 9
        with CaptureQueriesContext(connection) as queries:
            # docs:start bulk-create
            with use_shard(shard_for_user(user_id)):
                photos = Photo.objects.bulk_create(
                    [Photo(user_id=user_id, caption=f"photo {n}") for n in range(500)])
            # every photos[i].pk is set, from one INSERT ... RETURNING
            # docs:end bulk-create
        inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
        self.assertEqual(len(inserts), 1)
        self.assertTrue(inserts[0].endswith('RETURNING "photos"."id"'), inserts[0][-80:])
        pks = [p.pk for p in photos]
        self.assert_minted_for(pks, 2)
        stored = dict(sql("SELECT id, caption FROM insta2.photos WHERE id = ANY(%s)", pks))
        self.assertEqual([stored[pk] for pk in pks], [f"photo {n}" for n in range(500)])

    def test_read_back_routed_by_the_pk(self):
        with use_shard(shard_for_user(7)):
            pk = Photo.objects.create(user_id=7, caption="dog").pk
        # docs:start read-back
        with use_shard(shard_of_id(pk)):
            photo = Photo.objects.get(pk=pk)
        # docs:end read-back
        self.assertEqual((photo.user_id, photo.caption), (7, "dog"))
        with use_shard(1), self.assertRaises(Photo.DoesNotExist):
            Photo.objects.get(pk=pk)  # another shard's table

    def test_search_path_is_restored(self):
        before = sql("SHOW search_path")
        with use_shard(2):
            self.assertEqual(sql("SHOW search_path"), [("insta2, public",)])
        self.assertEqual(sql("SHOW search_path"), before)

    def test_outside_a_shard_there_is_no_table(self):
        # Never a silent write to the template or to public.
        with self.assertRaisesMessage(ProgrammingError, 'relation "photos" does not exist'):
            Photo.objects.create(user_id=1)

    def test_unknown_shard(self):
        with self.assertRaisesMessage(LookupError, "logical shard 99 is not in database 'default'"):
            with use_shard(99):
                pass


def json_numbers_exact_in_javascript(text):
    """Parses JSON as JavaScript's JSON.parse would, failing on any number it
    could not hold exactly (beyond 2^53): such an ID would reach the browser
    as another one."""
    def exact(literal):
        if abs(int(literal)) > 2**53:
            raise AssertionError(f"{literal} reaches JSON as a number: JavaScript reads {float(literal):.0f}")
        return int(literal)
    return json.loads(text, parse_int=exact)


class Json(TestCase):
    def test_ids_reach_json_as_strings(self):
        with use_shard(shard_for_user(10)):
            photo = Photo.objects.create(user_id=10, caption="sunset")
        response = self.client.get(f"/photos/{photo.pk}")
        self.assertEqual(response.status_code, 200)
        body = json_numbers_exact_in_javascript(response.content)
        self.assertEqual(body, {"id": str(photo.pk), "user_id": "10", "caption": "sunset"})
        self.assertEqual(int(body["id"]), photo.pk)

    def test_the_check_catches_a_number(self):
        with self.assertRaises(AssertionError):
            json_numbers_exact_in_javascript('{"id": %d}' % (2**62 + 1))

    def test_unknown_photo(self):
        self.assertEqual(self.client.get(f"/photos/{2**62 + 2 * 1024}").status_code, 404)


def through_node(base_url, photo_id):
    """examples/node/fetch_photo.js: the photo fetched, its JSON read by
    JSON.parse and its id sent back, by node's fetch as a browser would."""
    return subprocess.run(["node", "fetch_photo.js", base_url, str(photo_id)],
                          cwd=Path(__file__).resolve().parents[2] / "node",
                          capture_output=True, text=True, timeout=60)


class JsonThroughJavaScript(LiveServerTestCase):
    """The JSON view over HTTP (Django's live server), read by a real
    JavaScript client."""
    host = "127.0.0.1"

    def test_a_javascript_client_gets_the_ids_exact(self):
        with use_shard(shard_for_user(10)):
            photo = Photo.objects.create(user_id=10, caption="sunset")
        # The live server needs the row committed, and the test case's flush
        # empties the tables on search_path only, not the shards'.
        self.addCleanup(self.delete, photo.pk)
        out = through_node(self.live_server_url + "/", photo.pk)
        self.assertEqual((out.returncode, out.stdout.strip(), out.stderr), (0, str(photo.pk), ""))

    @staticmethod
    def delete(pk):
        with use_shard(shard_of_id(pk)):
            Photo.objects.filter(pk=pk).delete()
