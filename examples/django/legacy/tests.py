from django.core.management import call_command
from django.db import connection
from django.test import TestCase

from .models import Author, Book


def sql(query, *args):
    with connection.cursor() as cursor:
        cursor.execute(query, args)
        return cursor.fetchall()


class Adopted(TestCase):
    def test_old_rows_and_keys_are_kept(self):
        self.assertEqual(sorted(Author.objects.values_list("id", "name")),
                         [(n, f"author {n}") for n in range(1, 4)])
        self.assertEqual(sorted(Book.objects.values_list("id", "author_id", "title")),
                         [(n, n, f"book {n}") for n in range(1, 4)])

    def test_the_database_has_next_id_defaults_and_bigint_keys(self):
        rows = sql("SELECT c.relname::text, a.attname::text, format_type(a.atttypid, NULL), a.attidentity,"
                   "       pg_get_expr(d.adbin, d.adrelid)"
                   " FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
                   " LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum"
                   " WHERE c.relname IN ('legacy_author', 'legacy_book') AND a.attname IN ('id', 'author_id')"
                   " ORDER BY 1, 2")
        self.assertEqual(rows, [
            ("legacy_author", "id", "bigint", "", "insta_id.next_id(7, 'legacy_author_id_seq'::regclass)"),
            ("legacy_book", "author_id", "bigint", "", None),
            ("legacy_book", "id", "bigint", "", "insta_id.next_id(7, 'legacy_book_id_seq'::regclass)"),
        ])

    def test_new_rows_get_ids_of_the_shard(self):
        author = Author.objects.create(name="new")
        books = Book.objects.bulk_create([Book(author=author, title="new"),
                                          Book(author_id=1, title="by an old author")])
        keys = [author.pk] + [b.pk for b in books]
        self.assertTrue(all(type(k) is int and k > 2**53 for k in keys), keys)
        self.assertEqual(sql("SELECT DISTINCT insta_id.shard_id(k) FROM unnest(%s::bigint[]) k", keys), [(7,)])
        self.assertEqual(Book.objects.get(pk=books[0].pk).author.name, "new")

    def test_models_and_migrations_agree(self):
        call_command("makemigrations", "legacy", "--check", "--dry-run", verbosity=0)
