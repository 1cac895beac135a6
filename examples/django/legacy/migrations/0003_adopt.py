from django.db import migrations, models


class Migration(migrations.Migration):
    # (photos 0001 creates the extension)
    dependencies = [("legacy", "0002_old_rows"), ("photos", "0001_initial")]

    # A migration of its own: one that wrote to the tables in its
    # transaction has deferred foreign-key checks pending (Django makes its
    # foreign keys DEFERRABLE INITIALLY DEFERRED), and PostgreSQL refuses to
    # ALTER a table with pending trigger events (55006).
    operations = [
        # docs:start legacy-migration
        # The keys become insta_id keys of shard 7 in place: every row and
        # foreign key kept; Author's integer key and Book's author_id become
        # bigint. Django's state learns of the wider field only: its own ALTER
        # of an auto field would make the column an identity again.
        migrations.RunSQL("SELECT count(*) FROM insta_id.adopt_id_column('legacy_author', 'id', 7)"),
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField("author", "id", models.BigAutoField(primary_key=True, serialize=False)),
        ]),
        migrations.RunSQL("SELECT count(*) FROM insta_id.adopt_id_column('legacy_book', 'id', 7)"),
        # docs:end legacy-migration
    ]
