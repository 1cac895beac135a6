from django.conf import settings
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("photos", "0001_initial")]

    # docs:start migration-shards
    # A migration of its own, after 0001 has committed the template whole.
    operations = [
        migrations.RunSQL(
            [("SELECT insta_id.create_shards(1, %s, 'template')", [settings.INSTA_ID_SHARDS])],
            [("SELECT insta_id.drop_shard(s, force => true) FROM generate_series(1, %s) s",
              [settings.INSTA_ID_SHARDS])],
        ),
    ]
    # docs:end migration-shards
