from django.db import migrations


def old_rows(apps, schema_editor):
    """The rows the application had before (a test's fixture: keys 1, 2, 3)."""
    Author = apps.get_model("legacy", "Author")
    Book = apps.get_model("legacy", "Book")
    for n in range(1, 4):
        Book.objects.create(author=Author.objects.create(name=f"author {n}"), title=f"book {n}")


class Migration(migrations.Migration):
    dependencies = [("legacy", "0001_initial")]

    operations = [migrations.RunPython(old_rows, migrations.RunPython.noop)]
