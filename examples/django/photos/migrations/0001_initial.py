from django.contrib.postgres.operations import CreateExtension
from django.db import migrations, models

import photos.models


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    # docs:start migration-template
    operations = [
        CreateExtension("insta_id"),
        migrations.RunSQL("CREATE SCHEMA template", "DROP SCHEMA template CASCADE"),
        # The models' tables go into the template schema: search_path for this
        # migration's transaction only (its indexes are made at its end, there too).
        migrations.RunSQL("SET LOCAL search_path = template, public", migrations.RunSQL.noop),
        migrations.CreateModel(
            name="Photo",
            fields=[
                ("id", photos.models.InstaIdField(primary_key=True, serialize=False)),
                ("user_id", models.BigIntegerField(db_index=True)),
                ("caption", models.TextField(default="")),
            ],
            options={"db_table": "photos"},
        ),
        # The id column's DEFAULT insta_id.next_id(0, 'template.photos_id_seq').
        migrations.RunSQL("SELECT insta_id.add_id_column('template.photos', 'id', 0)",
                          migrations.RunSQL.noop),
    ]
    # docs:end migration-template
