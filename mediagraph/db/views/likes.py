"""The like statements of the hot path: a like (or its taking back) is one statement.

One round trip checks the viewer's token against the user's row (revocation and
deletion, as `Context.require_viewer` would), writes or deletes the like row and, only
when a row actually appeared or disappeared, moves the exact count and queues the
media for the sort sync. All of it is one statement, so one transaction: the count
never disagrees with the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from mediagraph.db.base import utcnow
from mediagraph.db.media import Media
from mediagraph.db.writes import WritePool, rounds_without_repeats

# The media's row comes back with the answer, so the mutation's `Media` needs no read of
# its own, and is built from the row as read (no model instance on the way).
_MEDIA_COLUMNS = ", ".join(f'm."{column.name}"' for column in Media.__table__.columns)  # type: ignore[attr-defined]

# $1 media, $2 user, $3 the token's version; a like's $4 is when it was made.
_VIEWER = "viewer AS (SELECT id FROM users WHERE id = $2 AND token_version = $3)"
_COUNT = """
counted AS (
    INSERT INTO media_like_count AS c (media_id, like_count)
    SELECT media_id, {delta} FROM changed
    ON CONFLICT (media_id) DO UPDATE SET like_count = c.like_count + excluded.like_count
    RETURNING c.media_id
), queued AS (
    INSERT INTO media_count_changes (media_id) SELECT media_id FROM counted RETURNING media_id
)
SELECT {media_columns}, EXISTS (SELECT FROM viewer) AS signed_in, EXISTS (SELECT FROM queued) AS changed
FROM (SELECT) AS one LEFT JOIN media m ON m.id = $1
"""

LIKE = f"""
WITH {_VIEWER}, changed AS (
    INSERT INTO media_likes (media_id, user_id, created_at)
    SELECT $1, id, $4 FROM viewer
    ON CONFLICT DO NOTHING
    RETURNING media_id
), {_COUNT.format(delta=1, media_columns=_MEDIA_COLUMNS).strip()}
"""

UNLIKE = f"""
WITH {_VIEWER}, changed AS (
    DELETE FROM media_likes WHERE media_id = $1 AND user_id IN (SELECT id FROM viewer)
    RETURNING media_id
), {_COUNT.format(delta=-1, media_columns=_MEDIA_COLUMNS).strip()}
"""


class StaleToken(Exception):
    """The token's user is gone, or its tokens were revoked since it was issued."""


class MissingMedia(Exception):
    """The media does not exist (or was deleted)."""


@dataclass(frozen=True)
class LikeChange:
    changed: bool  # a like row appeared (or disappeared): the count moved by one
    media: Mapping[str, Any]  # the media's row, its columns by name


async def change_like(
    writes: WritePool, *, media_id: int, user_id: int, token_version: int, like: bool, now: datetime
) -> LikeChange:
    """Like (or unlike) as the token's user; liking twice or unliking what is not liked changes nothing."""
    try:
        if like:
            row = await writes.fetchrow(LIKE, media_id, user_id, token_version, now)
        else:
            row = await writes.fetchrow(UNLIKE, media_id, user_id, token_version)
    except asyncpg.ForeignKeyViolationError:
        # The media does not exist (or was deleted while the like was written).
        raise MissingMedia from None
    if row is None or not row["signed_in"]:
        raise StaleToken
    if row["id"] is None:
        raise MissingMedia
    return LikeChange(changed=bool(row["changed"]), media=row)


# The likes and unlikes of one moment in one statement, one commit: $1 media ids, $2 user ids,
# $3 token versions, $4 whether each is a like (pairwise), $5 when the likes were made. One
# answer row per request, in order, with the same columns as the single statements'. Requests
# naming the same (media, user) go in separate statements (`rounds_without_repeats`), so each
# answer says exactly whether its own row changed. Likes and unlikes share the statement
# because most of a statement's cost is its own (the commit, the executor, each constraint
# trigger's setup), not its rows': measured in BENCHMARKS.md.
CHANGE_MANY = f"""
WITH req AS (
    SELECT r.media_id, r.user_id, r.ver, r.liking, r.slot
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::boolean[])
        WITH ORDINALITY AS r(media_id, user_id, ver, liking, slot)
), viewer AS (
    SELECT req.slot, req.media_id, req.user_id, req.liking
    FROM req JOIN users u ON u.id = req.user_id AND u.token_version = req.ver
), liked AS (
    INSERT INTO media_likes (media_id, user_id, created_at)
    SELECT v.media_id, v.user_id, $5 FROM viewer v JOIN media m ON m.id = v.media_id
    WHERE v.liking ORDER BY v.media_id, v.user_id
    ON CONFLICT DO NOTHING
    RETURNING media_id, user_id
), unliked AS (
    DELETE FROM media_likes l USING viewer v
    WHERE NOT v.liking AND l.media_id = v.media_id AND l.user_id = v.user_id
    RETURNING l.media_id, l.user_id
), changed AS (
    SELECT media_id, user_id, 1 AS delta FROM liked
    UNION ALL SELECT media_id, user_id, -1 FROM unliked
), counted AS (
    INSERT INTO media_like_count AS c (media_id, like_count)
    SELECT media_id, sum(delta) FROM changed GROUP BY media_id ORDER BY media_id
    ON CONFLICT (media_id) DO UPDATE SET like_count = c.like_count + excluded.like_count
    RETURNING c.media_id
), queued AS (
    INSERT INTO media_count_changes (media_id) SELECT media_id FROM counted ORDER BY media_id RETURNING media_id
)
SELECT {_MEDIA_COLUMNS}, v.slot IS NOT NULL AS signed_in, ch.media_id IS NOT NULL AS changed
FROM req LEFT JOIN viewer v ON v.slot = req.slot
LEFT JOIN changed ch ON ch.media_id = req.media_id AND ch.user_id = req.user_id
LEFT JOIN media m ON m.id = req.media_id
ORDER BY req.slot
"""


@dataclass(frozen=True)
class LikeRequest:
    media_id: int
    user_id: int
    token_version: int


async def write_changes(writes: WritePool, items: list[tuple[LikeRequest, bool]]) -> list[LikeChange | Exception]:
    """The likes and unlikes of one moment (each a request and whether it is a like), in order, by
    one statement a round: each one's change, or the exception its request must raise."""
    results: list[LikeChange | Exception | None] = [None] * len(items)
    now = utcnow()
    for round_ in rounds_without_repeats(items, lambda item: (item[0].media_id, item[0].user_id)):
        changes = [items[at] for at in round_]
        args: list[Any] = [
            [request.media_id for request, _ in changes],
            [request.user_id for request, _ in changes],
            [request.token_version for request, _ in changes],
            [like for _, like in changes],
            now,
        ]
        try:
            rows = await writes.fetch(CHANGE_MANY, *args)
        except (asyncpg.ForeignKeyViolationError, asyncpg.DeadlockDetectedError):
            # A media deleted meanwhile (or a lock cycle with another batch): each alone.
            for at, (request, like) in zip(round_, changes, strict=True):
                results[at] = await _alone(writes, request, like=like, now=now)
            continue
        for at, row in zip(round_, rows, strict=True):
            results[at] = _answer(row)
    return [result if result is not None else RuntimeError("a like was not answered") for result in results]


async def _alone(writes: WritePool, request: LikeRequest, *, like: bool, now: datetime) -> LikeChange | Exception:
    try:
        return await change_like(
            writes,
            media_id=request.media_id,
            user_id=request.user_id,
            token_version=request.token_version,
            like=like,
            now=now,
        )
    except Exception as error:
        return error


def _answer(row: asyncpg.Record) -> LikeChange | Exception:
    if not row["signed_in"]:
        return StaleToken()
    if row["id"] is None:
        return MissingMedia()
    return LikeChange(changed=bool(row["changed"]), media=row)
