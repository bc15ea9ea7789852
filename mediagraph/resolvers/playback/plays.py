"""A stream's or a channel's plays, newest first, for the channel owner.

Rows come from `plays` (what the roll-up copied); a play still held in Redis takes its
newer last heartbeat and watch time from there, so a page is as fresh as the heartbeats
and `ended` (no heartbeat for the live window) is decided when the page is read. A
later heartbeat within the session's idle hours moves the same play forward, so an
ended play opens again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.dataloaders.playback import REDIS_UNREACHABLE, PlayByKeyLoader, PlayKey, PlayRow
from mediagraph.db.playback import plays_page
from mediagraph.errors import BadUserInput
from mediagraph.keys.playback import EPOCH, Entity, Kind, to_ms
from mediagraph.keys.playback.scripts import PlaybackScripts, play_of
from mediagraph.resolvers.pagination import Page, PageRequest, keyset_page
from mediagraph.resolvers.playback import check_time_range, require_owner


@dataclass(frozen=True)
class PlayRecord:
    id: uuid.UUID
    channel_id: int
    media_id: int
    started_at: datetime
    last_heartbeat_at: datetime
    watch_ms: int
    ended: bool


def _cursor_kind(entity: Entity) -> str:
    # A cursor names its stream or channel: one from another list is refused, not misread.
    return f"plays:{entity.kind.value}:{entity.id}"


def _beyond(context: Context, entity: Entity, request: PageRequest) -> tuple[datetime, uuid.UUID] | None:
    if request.cursor is None:
        return None
    argument = "before" if request.backward else "after"
    invalid = BadUserInput(f"The cursor is invalid; start again without `{argument}`.", argument=argument)
    try:
        values = decode_cursor(context.settings.secret_key, _cursor_kind(entity), request.cursor)
        started_ms, play_id = values
        if not isinstance(started_ms, int) or isinstance(started_ms, bool) or not isinstance(play_id, str):
            raise invalid
        return EPOCH + timedelta(milliseconds=started_ms), uuid.UUID(play_id)
    except (BadUserInput, ValueError, TypeError, OverflowError):
        raise invalid from None


async def plays(
    context: Context, entity: Entity, *, request: PageRequest, since: datetime | None, until: datetime | None
) -> Page[PlayRecord]:
    """Plays that started in [since, until), newest first; the channel owner's only."""
    require_owner(context, entity)
    check_time_range(since, until, names=("since", "until"))
    statement = plays_page(
        stream=entity.id if entity.kind is Kind.STREAM else None,
        channel=entity.channel if entity.kind is Kind.CHANNEL else None,
        since=since,
        until=until,
        beyond=_beyond(context, entity, request),
        limit=request.size + 1,
        backward=request.backward,
    )
    async with context.db.use() as session:
        rows = list(await session.execute(statement))
    fresher = await _held_in_redis(context, entity.channel, [row[1] for row in rows[: request.size]])
    records = [
        _record(context, PlayRow(entity.channel, started_at, play_id, media_id, last_heartbeat_at, watch_ms), fresher)
        for started_at, play_id, media_id, last_heartbeat_at, watch_ms in rows
    ]
    secret, kind = context.settings.secret_key, _cursor_kind(entity)
    return keyset_page(
        request, records, lambda play: encode_cursor(secret, kind, [to_ms(play.started_at), str(play.id)])
    )


async def play_by_key(context: Context, key: PlayKey) -> PlayRecord | None:
    """One play by its key (what its global id names); the channel owner's only, like the list."""
    require_owner(context, Entity.of_channel(key.channel_id))
    row = await context.loader(PlayByKeyLoader).load(key)
    if row is None:
        return None
    return _record(context, row, await _held_in_redis(context, row.channel_id, [row.session_id]))


def _record(context: Context, row: PlayRow, fresher: dict[uuid.UUID, tuple[int, int, int]]) -> PlayRecord:
    """A copied row, moved forward by what Redis still holds of it, with `ended` decided now."""
    last_ms, watched = to_ms(row.last_heartbeat_at), row.watch_ms
    held = fresher.get(row.session_id)
    # The same session with another start is a later play of the id, not this one.
    if held is not None and held[0] == to_ms(row.started_at):
        last_ms, watched = max(last_ms, held[1]), max(watched, held[2])
    window_ms = context.settings.playback_live_window_seconds * 1000
    return PlayRecord(
        id=row.session_id,
        channel_id=row.channel_id,
        media_id=row.media_id,
        started_at=row.started_at,
        last_heartbeat_at=EPOCH + timedelta(milliseconds=last_ms),
        watch_ms=watched,
        ended=last_ms < to_ms(context.services.clock()) - window_ms,
    )


async def _held_in_redis(
    context: Context, channel_id: int, play_ids: list[uuid.UUID]
) -> dict[uuid.UUID, tuple[int, int, int]]:
    """(started, last heartbeat, watched ms) of the plays Redis still holds; nothing while it is unreachable,
    and the page then shows what the last roll-up copied."""
    if not play_ids:
        return {}
    services = context.services
    sessions = [str(play_id) for play_id in play_ids]
    try:
        raw = await PlaybackScripts(services.redis, services.keys).read_plays(channel_id, sessions)
    except REDIS_UNREACHABLE:
        return {}
    held = {}
    for session, value in zip(sessions, raw, strict=True):
        play = play_of(channel_id, session, value)
        if play is not None:
            held[uuid.UUID(session)] = (play.started_ms, play.last_ms, play.watch_ms)
    return held
