"""The like statements of the hot path: a like (or its taking back) is one statement.

One round trip checks the viewer's token against the user's row (revocation and
deletion, as `Context.require_viewer` would), writes or deletes the like row and, only
when a row actually appeared or disappeared, moves the exact count and queues the
media for the sort sync. All of it is one statement, so one transaction: the count
never disagrees with the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from mediagraph.db.media import Media
from mediagraph.db.rows import RowBuilder
from mediagraph.db.writes import WritePool

# The media's row comes back with the answer (its columns first, as `RowBuilder` reads
# them), so the mutation's `Media` needs no read of its own.
_MEDIA_COLUMNS = ", ".join(f'm."{column.name}"' for column in Media.__table__.columns)  # type: ignore[attr-defined]
_media_rows = RowBuilder(Media)

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
    pass


@dataclass(frozen=True)
class LikeChange:
    changed: bool  # a like row appeared (or disappeared): the count moved by one
    media: Media


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
    return LikeChange(changed=bool(row["changed"]), media=_media_rows(row))
