"""The rows `bench http` serves: users, media and likes loaded with COPY, and the same rows for PostGraphile.

View counts are loaded as if synced (the indexed column and the durable count
agree); likes are real rows with their exact counts, given by the first half of the
users only, so the second half (`likers`) can like anything without meeting a
like of their own. PostGraphile reads a schema of its own (`postgraphile_bench`) holding copies of the
public columns of `users` and `media`, with the same keys and indexes, so both
servers answer from identical rows and plans without PostGraphile seeing
credentials or mediagraph's bookkeeping tables.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import asyncpg
from sqlalchemy.engine import make_url

from mediagraph.ids import snowflake_floor, snowflake_time

POSTGRAPHILE_SCHEMA = "postgraphile_bench"
TAGS = ("music", "travel", "cats", "games", "news", "sport", "food", "art", "science", "film")
# Not a usable password hash: benchmark users never log in.
PASSWORD_HASH = "$argon2id$v=19$m=65536,t=3,p=4$benchmark$benchmark"
SPAN = timedelta(days=365)


def plain_url(url: str) -> str:
    """asyncpg and PostGraphile take `postgresql://` URLs, not SQLAlchemy's `+asyncpg` form."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def spread_ids(count: int, *, until: datetime) -> list[int]:
    """Snowflake ids spread evenly over the year before `until`, oldest first."""
    first = snowflake_floor(until - SPAN)
    step = (snowflake_floor(until) - first) // max(count, 1)
    return [first + n * step for n in range(count)]


# Likes per media: most media have a few, some many.
MEAN_LIKES = 4


def likers(user_ids: list[int]) -> list[int]:
    """The users who hold none of the loaded likes."""
    return user_ids[len(user_ids) // 2 :] or user_ids


async def load(database_url: str, *, media: int, users: int, seed: int = 8) -> None:
    """Fill `users`, `media` (random uploaders, tags and view counts) and likes, then ANALYZE."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    user_ids = spread_ids(users, until=now - SPAN)
    media_ids = spread_ids(media, until=now)
    fans = user_ids[: max(1, len(user_ids) // 2)]
    views = [rng.randint(0, 1_000_000) for _ in media_ids]
    likes = [
        (media_id, rng.sample(fans, min(len(fans), int(rng.expovariate(1 / MEAN_LIKES))))) for media_id in media_ids
    ]
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        await connection.copy_records_to_table(
            "users",
            columns=["id", "username", "nickname", "password_hash", "role", "created_at", "token_version"],
            records=[
                (user_id, f"bench_{n}", f"Bench user {n}", PASSWORD_HASH, "user", snowflake_time(user_id), 0)
                for n, user_id in enumerate(user_ids)
            ],
        )
        await connection.copy_records_to_table(
            "media",
            columns=[
                "id",
                "owner_id",
                "title",
                "description",
                "tags",
                "content_type",
                "filename",
                "size_bytes",
                "storage_key",
                "view_count",
                "like_count",
                "created_at",
                "updated_at",
            ],
            records=[
                (
                    media_id,
                    rng.choice(user_ids),
                    f"Benchmark clip {n}",
                    "A clip loaded by mediagraph bench http.",
                    rng.sample(TAGS, rng.randint(0, 3)),
                    "video/mp4",
                    f"clip-{n}.mp4",
                    rng.randint(10_000, 50_000_000),
                    f"bench/{media_id}",
                    views[n],
                    len(likes[n][1]),
                    snowflake_time(media_id),
                    snowflake_time(media_id),
                )
                for n, media_id in enumerate(media_ids)
            ],
        )
        await connection.copy_records_to_table(
            "media_view_count", columns=["media_id", "view_count"], records=list(zip(media_ids, views, strict=True))
        )
        await connection.copy_records_to_table(
            "media_likes",
            columns=["media_id", "user_id", "created_at"],
            records=[(media_id, fan, now) for media_id, fans_of in likes for fan in fans_of],
        )
        await connection.copy_records_to_table(
            "media_like_count",
            columns=["media_id", "like_count"],
            records=[(media_id, len(fans_of)) for media_id, fans_of in likes if fans_of],
        )
        # The sort columns already agree with the counters, as a sync leaves them: the sort
        # generation moves past the loaded rows (stamped with the next one on insert), or
        # every page would look through all of them for omitted items.
        await connection.execute(
            "UPDATE media_sort_generation SET generation = (SELECT coalesce(max(sort_generation), 0) FROM media)"
        )
        await connection.execute(
            "ANALYZE users; ANALYZE media; ANALYZE media_view_count; ANALYZE media_likes; ANALYZE media_like_count"
        )
    finally:
        await connection.close()


async def expose_for_postgraphile(database_url: str) -> None:
    """Copy the public columns into PostGraphile's schema, with the same keys and indexes."""
    schema = POSTGRAPHILE_SCHEMA
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        await connection.execute(
            f"""
            CREATE SCHEMA {schema};
            CREATE TABLE {schema}.users AS
              SELECT id, username, nickname, created_at FROM public.users;
            ALTER TABLE {schema}.users ADD PRIMARY KEY (id);
            CREATE TABLE {schema}.media AS
              SELECT id, owner_id, title, description, tags, content_type, filename, size_bytes,
                     view_count, like_count, created_at, updated_at
              FROM public.media;
            ALTER TABLE {schema}.media ADD PRIMARY KEY (id);
            ALTER TABLE {schema}.media ADD FOREIGN KEY (owner_id) REFERENCES {schema}.users (id);
            CREATE INDEX ON {schema}.media (owner_id, id);
            CREATE INDEX ON {schema}.media (view_count, id);
            CREATE INDEX ON {schema}.media (like_count, id);
            CREATE INDEX ON {schema}.media USING gin (tags);
            ANALYZE {schema}.users;
            ANALYZE {schema}.media;
            """
        )
    finally:
        await connection.close()


async def sample_media_ids(database_url: str, count: int, *, seed: int = 9) -> list[int]:
    """Ids spread over the whole table, in random order."""
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        ids = [row["id"] for row in await connection.fetch("SELECT id FROM media ORDER BY id")]
    finally:
        await connection.close()
    rng = random.Random(seed)
    return rng.sample(ids, min(count, len(ids)))


async def user_ids(database_url: str) -> list[int]:
    """Every user's id, oldest first (the loaded likes come from the first half)."""
    connection = await asyncpg.connect(plain_url(database_url))
    try:
        return [row["id"] for row in await connection.fetch("SELECT id FROM users ORDER BY id")]
    finally:
        await connection.close()
