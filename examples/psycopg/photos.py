"""insta_id from psycopg 3: IDs come back with INSERT ... RETURNING.

The tables are examples/schema.sql's: logical shards insta1..insta4, each with
a photos table whose id DEFAULT is that shard's insta_id.next_id(...).
The README's psycopg recipes are copied from the regions marked below;
test_photos.py runs them against a real server.
"""
import psycopg
from psycopg import sql

NUM_SHARDS = 4


# docs:start shard-of
def shard_for_user(user_id: int) -> int:
    """The logical shard a user's rows live in (Instagram: user id modulo)."""
    return user_id % NUM_SHARDS + 1


def shard_of_id(photo_id: int) -> int:
    """The shard an ID was minted for: bits 10..22, as insta_id.shard_id(id)."""
    return (photo_id >> 10) & 0x1FFF



def photos(shard: int) -> sql.Composed:
    """The shard's table, quoted: insta<N>.photos."""
    return sql.Identifier(f"insta{shard}", "photos")
# docs:end shard-of


# docs:start shortcode
SHORTCODE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def shortcode(photo_id: int) -> str:
    """Instagram's shortcode of an ID, as insta_id.shortcode(id): base 64, the
    64 bits read unsigned."""
    if not -2**63 <= photo_id < 2**63:
        raise ValueError(f"{photo_id} is not a bigint")
    n, code = photo_id & 0xFFFF_FFFF_FFFF_FFFF, ""
    while True:
        code = SHORTCODE_ALPHABET[n & 63] + code
        n >>= 6
        if not n:
            return code


def from_shortcode(code: str) -> int:
    """The ID of a shortcode, as insta_id.from_shortcode(code)."""
    if not code:
        raise ValueError("invalid shortcode: empty")
    n = 0
    for c in code:
        if c not in SHORTCODE_ALPHABET:
            raise ValueError(f"invalid shortcode: {code!r}")
        n = n * 64 + SHORTCODE_ALPHABET.index(c)
    if n >= 2**64:
        raise ValueError(f"invalid shortcode: {code!r} is past 64 bits")
    return n - 2**64 if n >= 2**63 else n  # a bigint, as PostgreSQL has it
# docs:end shortcode


# docs:start insert-one
def add_photo(conn: psycopg.Connection, user_id: int, caption: str) -> int:
    query = sql.SQL("INSERT INTO {} (user_id, caption) VALUES (%s, %s) RETURNING id")
    with conn.cursor() as cur:
        cur.execute(query.format(photos(shard_for_user(user_id))), (user_id, caption))
        return cur.fetchone()[0]  # a Python int, all 64 bits exact
# docs:end insert-one


# docs:start insert-many
def add_photos(conn: psycopg.Connection, user_id: int, captions: list[str]) -> list[int]:
    query = sql.SQL("INSERT INTO {} (user_id, caption) VALUES (%s, %s) RETURNING id")
    with conn.cursor() as cur:
        cur.executemany(query.format(photos(shard_for_user(user_id))),
                        [(user_id, c) for c in captions], returning=True)
        ids = []
        while True:  # one result per row, in the order of the parameters
            ids.append(cur.fetchone()[0])
            if not cur.nextset():
                return ids
# docs:end insert-many


# docs:start copy
def load_photos(conn: psycopg.Connection, user_id: int, captions: list[str]) -> list[int]:
    """COPY is the fastest load; it returns nothing, so read the IDs back by a key."""
    table = photos(shard_for_user(user_id))
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY {} (user_id, caption) FROM STDIN").format(table)) as copy:
            for caption in captions:
                copy.write_row((user_id, caption))  # the DEFAULT mints each id
        cur.execute(sql.SQL("SELECT id FROM {} WHERE user_id = %s ORDER BY id").format(table),
                    (user_id,))
        return [row[0] for row in cur]
# docs:end copy


# docs:start decode
def photo_with_parts(conn: psycopg.Connection, photo_id: int):
    """Route by the ID itself, and decode it in the same query."""
    query = sql.SQL("""
        SELECT p.caption, d.created_at, d.shard_id, d.seq_id
        FROM {} p, insta_id.id_parts(p.id) d
        WHERE p.id = %s""").format(photos(shard_of_id(photo_id)))
    with conn.cursor() as cur:
        cur.execute(query, (photo_id,))
        return cur.fetchone()  # (caption, datetime with tz, shard, seq)
# docs:end decode
