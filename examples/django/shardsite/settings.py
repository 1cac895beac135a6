"""A minimal project: one app (photos) whose table lives in logical shards."""
import os

SECRET_KEY = "example-only"
INSTALLED_APPS = ["photos", "legacy"]
ROOT_URLCONF = "shardsite.urls"
ALLOWED_HOSTS = ["testserver"]
# As startproject writes it; LiveServerTestCase serves it (and fails without it).
STATIC_URL = "static/"
USE_TZ = True

# The server comes from libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE).
# The migrations create the extension, which needs a superuser; in production
# a DBA runs CREATE EXTENSION insta_id once per database beforehand.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("PGDATABASE", "app"),
        "HOST": os.environ.get("PGHOST", ""),
        "PORT": os.environ.get("PGPORT", ""),
        "USER": os.environ.get("PGUSER", ""),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# docs:start settings
# Logical shards 1..INSTA_ID_SHARDS: schemas insta1.. made by migration 0002.
INSTA_ID_SHARDS = 4
# docs:end settings
