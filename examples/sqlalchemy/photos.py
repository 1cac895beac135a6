"""insta_id from SQLAlchemy 2 (ORM): one mapped class for every logical shard.

Each shard is a schema (insta1..insta4) holding a copy of the template's
table, whose id DEFAULT is that shard's insta_id.next_id(...). The class is
mapped without a schema; schema_translate_map picks the shard per session.
The README's SQLAlchemy recipes are copied from the regions marked below;
test_photos.py runs them against a real server.
"""
import json

from sqlalchemy import BigInteger, Engine, FetchedValue, ForeignKey, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, orm_insert_sentinel

class Base(DeclarativeBase):
    pass


# docs:start model
class Photo(Base):
    __tablename__ = "photos"  # no schema: the shard's, from schema_translate_map

    # The database mints the id (the shard table's DEFAULT insta_id.next_id(...)):
    # FetchedValue says so without putting a DEFAULT of its own in the DDL, and
    # the ORM reads the id back with RETURNING.
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, server_default=FetchedValue())
    user_id: Mapped[int] = mapped_column(BigInteger)
    caption: Mapped[str] = mapped_column(Text, default="")

    # Lets the ORM insert many new objects in one INSERT ... RETURNING and
    # match each returned id to its object: a nullable integer column that
    # SQLAlchemy fills with the row's position in the batch. Without it a
    # flush of N new objects is N INSERT statements (correct, but slow).
    _sentinel: Mapped[int] = orm_insert_sentinel()
# docs:end model


# docs:start schema
def create_shards(engine: Engine, first: int, last: int) -> None:
    """The template schema from the metadata, then the shards through insta_id."""
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE SCHEMA template")
        Base.metadata.create_all(conn.execution_options(schema_translate_map={None: "template"}))
        conn.exec_driver_sql("SELECT insta_id.add_id_column('template.photos', 'id', 0)")
        conn.exec_driver_sql("SELECT insta_id.create_shards(%s, %s, 'template')", (first, last))
# docs:end schema


# docs:start session
NUM_SHARDS = 4


def shard_for_user(user_id: int) -> int:
    return user_id % NUM_SHARDS + 1  # Instagram: user id modulo the shard count


def shard_of_id(photo_id: int) -> int:
    return (photo_id >> 10) & 0x1FFF  # bits 10..22, as insta_id.shard_id(id)


def shard_session(engine: Engine, shard: int) -> Session:
    return Session(engine.execution_options(schema_translate_map={None: f"insta{shard}"}))
# docs:end session


# docs:start legacy-model
# An application's tables from before insta_id, as SQLAlchemy made them from
# Integer/BigInteger keys with Identity(): albums.id integer and
# tracks.album_id integer (its foreign key). adopt() makes both keys insta_id
# keys of a shard in place (keys kept; albums.id and tracks.album_id widened
# to bigint); the mapping then says BigInteger and that the database mints
# the key, which the ORM reads back with RETURNING. (Their own metadata: not
# the shards' template's.)
class LegacyBase(DeclarativeBase):
    pass


class Album(LegacyBase):
    __tablename__ = "albums"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, server_default=FetchedValue())  # was Integer, Identity()
    title: Mapped[str] = mapped_column(Text)


class Track(LegacyBase):
    __tablename__ = "tracks"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, server_default=FetchedValue())  # was BigInteger, Identity()
    album_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("albums.id"))  # was Integer


def adopt(engine: Engine, shard: int) -> None:
    with engine.begin() as conn:
        for table in ("albums", "tracks"):
            conn.execute(text("SELECT count(*) FROM insta_id.adopt_id_column(CAST(:t AS regclass), 'id', :s)"),
                         {"t": table, "s": shard})
# docs:end legacy-model


# docs:start json
def make_json_app(engine: Engine):
    """A WSGI endpoint, GET /photos/<id>: the photo as JSON, its IDs as strings.

    Every insta_id ID is above 2^53: a JSON number that large loses its low
    bits in JavaScript (JSON.parse makes it a double), so a browser would ask
    for another photo than the one it was given. Strings stay exact.
    """
    def app(environ, start_response):
        parts = environ.get("PATH_INFO", "").strip("/").split("/")
        photo = None
        if len(parts) == 2 and parts[0] == "photos" and parts[1].isdigit() and int(parts[1]) < 2**63:
            photo_id = int(parts[1])
            with shard_session(engine, shard_of_id(photo_id)) as session:
                photo = session.get(Photo, photo_id)
                body = photo and {"id": str(photo.id), "user_id": str(photo.user_id), "caption": photo.caption}
        status = "200 OK" if photo else "404 Not Found"
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(body if photo else {"error": "no such photo"}).encode()]
    return app
# docs:end json

