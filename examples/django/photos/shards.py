"""Which logical shard a query runs in."""
from contextlib import contextmanager

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction


# docs:start routing
def shard_for_user(user_id: int) -> int:
    """Instagram's rule: a user's rows live in shard user id modulo the shard count."""
    return user_id % settings.INSTA_ID_SHARDS + 1


def shard_of_id(pk: int) -> int:
    """The shard an ID was minted for: bits 10..22, as insta_id.shard_id(id)."""
    return (pk >> 10) & 0x1FFF


@contextmanager
def use_shard(shard: int, using: str = DEFAULT_DB_ALIAS):
    """Runs the block in one transaction with the shard's schema first on
    search_path, so the models' unqualified tables are the shard's.
    With several servers, pick `using` (a DATABASES alias) from your shard map."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('search_path'),"
            "       set_config('search_path', quote_ident(s) || ', public', true)"
            " FROM insta_id.shard_schema(%s) s WHERE s IS NOT NULL", [shard])
        row = cursor.fetchone()
        if row is None:
            raise LookupError(f"logical shard {shard} is not in database {using!r}")
        yield
        cursor.execute("SELECT set_config('search_path', %s, true)", [row[0]])
# docs:end routing
