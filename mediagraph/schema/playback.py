from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.types import Info
from strawberry.types.nodes import SelectedField, Selection

from mediagraph.context import Context
from mediagraph.dataloaders.playback import Figures, PlayKey
from mediagraph.errors import NotFound
from mediagraph.ids import decode_id, to_global_id
from mediagraph.keys.playback import EPOCH, Entity, Granularity, Kind, to_ms
from mediagraph.resolvers import media as media_resolvers
from mediagraph.resolvers import playback as resolvers
from mediagraph.resolvers import users as user_resolvers
from mediagraph.resolvers.playback import BucketFigures, CountedIn, PlaybackReport
from mediagraph.resolvers.playback import live as live_resolvers
from mediagraph.resolvers.playback import plays as play_resolvers
from mediagraph.resolvers.playback.live import LiveStats
from mediagraph.schema.extensions import SHARED_STATE, VIEWER_DEPENDENT
from mediagraph.schema.relay import BuiltByName, Edge, Node, PageInfo, register_node, requested
from mediagraph.schema.scalars import Count
from mediagraph.subscriptions import playback as live

if TYPE_CHECKING:
    from mediagraph.schema.media import Media
    from mediagraph.schema.users import User

# Built by their own modules, which import this one (see `schema/relay.py`).
media_object: BuiltByName[Media] = BuiltByName("Media")
user_object: BuiltByName[User] = BuiltByName("User")

MediaRef = Annotated["Media", strawberry.lazy("mediagraph.schema.media")]
UserRef = Annotated["User", strawberry.lazy("mediagraph.schema.users")]

GranularityEnum = strawberry.enum(Granularity, name="PlaybackGranularity", description="UTC minutes, hours or days.")
CountedInEnum = strawberry.enum(
    CountedIn, name="PlaybackCount", description="A count a heartbeat can add one to: the all-time total or a bucket."
)


@strawberry.type(description="A heartbeat as counted.")
class PlaybackHeartbeat:
    session_id: uuid.UUID
    media_id: strawberry.ID
    counted_at: datetime = strawberry.field(description="The time the heartbeat counted at (its `at`, or now).")
    counted_in: list[CountedInEnum] = strawberry.field(  # type: ignore[valid-type]
        description="The counts this heartbeat added one to; empty when its session had already counted in them all."
    )
    counted: list[CountedInEnum] = strawberry.field(  # type: ignore[valid-type]
        description="The counts this heartbeat added one to.",
        deprecation_reason="Renamed `countedIn`: `counted` is a Boolean elsewhere (RecordViewPayload).",
    )
    concurrent: Count = strawberry.field(description="The stream's concurrent viewers, this session included.")

    @classmethod
    def from_report(cls, report: PlaybackReport) -> PlaybackHeartbeat:
        return cls(
            session_id=report.session_id,
            media_id=strawberry.ID(to_global_id("Media", report.media_id)),
            counted_at=report.counted_at,
            counted_in=report.counted,
            counted=report.counted,
            concurrent=report.concurrent,
        )


@strawberry.type(description="Plays started and peak concurrent viewers in one UTC bucket [start, end).")
class PlaybackBucket:
    start: datetime
    end: datetime
    count: Count = strawberry.field(description="Sessions that played in the bucket, each counted once.")
    peak: Count = strawberry.field(description="The most concurrent viewers seen in the bucket.")

    entity: strawberry.Private[Entity]
    watch_ms: strawberry.Private[int]
    unique_viewer_count: strawberry.Private[int]

    @classmethod
    def from_figures(cls, entity: Entity, figures: BucketFigures) -> PlaybackBucket:
        return cls(
            start=figures.start,
            end=figures.end,
            count=figures.plays,
            peak=figures.peak,
            entity=entity,
            watch_ms=figures.watch_ms,
            unique_viewer_count=figures.unique_viewers,
        )

    @strawberry.field(
        metadata=VIEWER_DEPENDENT,
        description="Seconds watched, counted at each heartbeat's time (gaps between a session's heartbeats, "
        "each at most 10 s). The channel owner's only: null, with FORBIDDEN, for anyone else.",
    )
    def watch_seconds(self, info: Info[Context, None]) -> float | None:
        resolvers.require_owner(info.context, self.entity)
        return self.watch_ms / 1000

    @strawberry.field(
        metadata=VIEWER_DEPENDENT,
        description="`watchSeconds` over the sessions that played in the bucket (`count`); 0 without any. "
        "The channel owner's only: null, with FORBIDDEN, for anyone else.",
    )
    def average_view_duration_seconds(self, info: Info[Context, None]) -> float | None:
        resolvers.require_owner(info.context, self.entity)
        return resolvers.average_seconds(self.watch_ms, self.count)

    @strawberry.field(
        metadata=VIEWER_DEPENDENT,
        description="Distinct viewers in the bucket: signed-in viewers once each, every anonymous session as one. "
        "The channel owner's only: null, with FORBIDDEN, for anyone else.",
    )
    def unique_viewers(self, info: Info[Context, None]) -> Count | None:
        resolvers.require_owner(info.context, self.entity)
        return self.unique_viewer_count


@strawberry.type(
    description="One play of a stream: a playback session from its first heartbeat to its latest. A Node, "
    "the channel owner's only: `node(id:)` is null, with FORBIDDEN, for anyone else."
)
class Play(Node):
    session_id: uuid.UUID = strawberry.field(
        description="The `sessionId` the player sent with `reportPlayback`. A session heard from again after "
        "MEDIAGRAPH_PLAYBACK_SESSION_IDLE_HOURS of silence starts a new play with the same `sessionId` (and "
        "another `id` and `startedAt`)."
    )
    started_at: datetime = strawberry.field(description="When its first heartbeat played (the heartbeat's `at`).")
    last_heartbeat_at: datetime = strawberry.field(description="When its latest heartbeat played.")
    watch_seconds: float = strawberry.field(
        description="Seconds watched: gaps between its heartbeats, each at most 10 s, so a pause adds nothing."
    )
    ended: bool = strawberry.field(
        description="No heartbeat within the live window (15 s by default) as of this answer. A later heartbeat "
        "of the same session (within MEDIAGRAPH_PLAYBACK_SESSION_IDLE_HOURS) continues this play, which then "
        "is no longer ended."
    )
    media_raw_id: strawberry.Private[int]

    @classmethod
    def of(cls, play: play_resolvers.PlayRecord) -> Play:
        # One id per play, not per session: a session id reused after its idle hours is another play.
        global_id = to_global_id("Play", play.channel_id, to_ms(play.started_at), play.id)
        return cls(
            id=strawberry.ID(global_id),
            session_id=play.id,
            started_at=play.started_at,
            last_heartbeat_at=play.last_heartbeat_at,
            watch_seconds=play.watch_ms / 1000,
            ended=play.ended,
            media_raw_id=play.media_id,
        )

    @strawberry.field(description="The media played; null when it has been deleted since.")
    async def media(self, info: Info[Context, None]) -> MediaRef | None:
        row = await media_resolvers.media_by_id(info.context, self.media_raw_id)
        return media_object(row) if row is not None else None


async def _fetch_play(context: Context, channel_id: int, started_ms: int, session_id: uuid.UUID) -> Play | None:
    key = PlayKey(channel_id, EPOCH + timedelta(milliseconds=started_ms), session_id)
    record = await play_resolvers.play_by_key(context, key)
    return Play.of(record) if record is not None else None


register_node("Play", _fetch_play, id_shape=(int, int, uuid.UUID))


@strawberry.type(description="Plays, newest first.")
class PlayConnection:
    edges: list[Edge[Play]]
    page_info: PageInfo


# A PlaybackStats id names its subject: a stream by its media id, a channel by its user id.
SUBJECT_CODES = {Kind.STREAM: 1, Kind.CHANNEL: 2}


@strawberry.type(description="Playback statistics of a stream (a media) or a channel (an uploader's media together).")
class PlaybackStats(Node):
    entity: strawberry.Private[Entity]
    # The figures a live push just read, so its fields do not read them again.
    known: strawberry.Private[LiveStats | None] = None

    @classmethod
    def of(cls, entity: Entity, *, known: LiveStats | None = None) -> PlaybackStats:
        # The id comes from the subject: a media's (or user's) statistics always have the same one.
        global_id = strawberry.ID(to_global_id("PlaybackStats", SUBJECT_CODES[entity.kind], entity.id))
        return cls(id=global_id, entity=entity, known=known)

    @strawberry.field(description="Plays ever started (sessions).")
    async def total(self, info: Info[Context, None]) -> Count:
        if self.known is not None:
            return self.known.total
        return await resolvers.total(info.context, self.entity)

    @strawberry.field(
        metadata=VIEWER_DEPENDENT,
        description="Seconds ever watched (gaps between a session's heartbeats, each at most 10 s). "
        "The channel owner's only: null, with FORBIDDEN, for anyone else.",
    )
    async def watch_seconds(self, info: Info[Context, None]) -> float | None:
        return (await self._watch_totals(info.context)).watch_ms / 1000

    @strawberry.field(
        metadata=VIEWER_DEPENDENT,
        description="`watchSeconds` over all plays ever started (`total`); 0 without any. "
        "The channel owner's only: null, with FORBIDDEN, for anyone else.",
    )
    async def average_view_duration_seconds(self, info: Info[Context, None]) -> float | None:
        figures = await self._watch_totals(info.context)
        return resolvers.average_seconds(figures.watch_ms, figures.plays)

    async def _watch_totals(self, context: Context) -> Figures:
        if self.known is not None and self.known.watch is not None:
            resolvers.require_owner(context, self.entity)
            return self.known.watch
        return await resolvers.watch_totals(context, self.entity)

    @strawberry.field(
        description=(
            "Sessions heard from within the live window (15 s by default); null, with a SERVICE_UNAVAILABLE "
            "error, while the live store is unreachable (the other figures then come from the durable store)."
        )
    )
    async def concurrent(self, info: Info[Context, None]) -> Count | None:
        if self.known is not None and self.known.concurrent is not None:
            return self.known.concurrent
        return await resolvers.concurrent(info.context, self.entity)

    @strawberry.field(
        description=(
            "Every bucket in [from, to), empty ones as zero. `to` defaults to the end of the current bucket and "
            "`from` to 60 minutes, 24 hours or 30 days before it; at most 1440 minutes, 744 hours or 366 days."
        )
    )
    async def series(
        self,
        info: Info[Context, None],
        granularity: GranularityEnum,  # type: ignore[valid-type]
        from_: Annotated[datetime | None, strawberry.argument(name="from")] = None,
        to: datetime | None = None,
    ) -> list[PlaybackBucket]:
        figures = await resolvers.series(info.context, self.entity, granularity=granularity, start=from_, end=to)
        return [PlaybackBucket.from_figures(self.entity, bucket) for bucket in figures]

    @strawberry.field(
        metadata=VIEWER_DEPENDENT,
        description="Plays that started in [since, until) (either bound optional), newest first, both ways. "
        "The channel owner's only: null, with FORBIDDEN, for anyone else. A play shows here once the roll-up "
        "has copied it (within `MEDIAGRAPH_PLAYBACK_ROLLUP_INTERVAL_SECONDS`), and plays are kept "
        "`MEDIAGRAPH_PLAY_HISTORY_DAYS` days.",
    )
    async def plays(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> PlayConnection | None:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page = await play_resolvers.plays(info.context, self.entity, request=request, since=since, until=until)
        return PlayConnection(
            edges=[Edge(cursor=cursor, node=Play.of(play)) for cursor, play in page.items],
            page_info=PageInfo.of(page),
        )

    @strawberry.field(description="The UTC minute running now: plays started in it and its peak concurrent viewers.")
    async def current_minute(self, info: Info[Context, None]) -> PlaybackBucket:
        if self.known is not None:
            return PlaybackBucket.from_figures(self.entity, self.known.minute)
        return PlaybackBucket.from_figures(self.entity, await resolvers.current_minute(info.context, self.entity))


async def _fetch_stats(context: Context, subject_code: int, raw_id: int) -> PlaybackStats | None:
    try:
        if subject_code == SUBJECT_CODES[Kind.STREAM]:
            return PlaybackStats.of(await resolvers.stream_of(context, raw_id))
        if subject_code == SUBJECT_CODES[Kind.CHANNEL]:
            return PlaybackStats.of(await resolvers.channel_of(context, raw_id))
    except NotFound:
        return None
    return None


register_node("PlaybackStats", _fetch_stats, id_parts=2)


@strawberry.type(
    description="A media's concurrent viewers, as `liveViewersUpdated` pushes them; its id is the media's own "
    "(one LiveViewers per media), so a push updates every cached copy."
)
class LiveViewers(Node):
    media_raw_id: strawberry.Private[int]
    viewers: Count = strawberry.field(description="Sessions heard from within the live window (15 s by default).")

    @classmethod
    def of(cls, media_id: int, viewers: int) -> LiveViewers:
        return cls(id=strawberry.ID(to_global_id("LiveViewers", media_id)), media_raw_id=media_id, viewers=viewers)

    @strawberry.field(description="The media watched.")
    async def media(self, info: Info[Context, None]) -> MediaRef:
        return media_object(await media_resolvers.require_media(info.context, self.media_raw_id))


@strawberry.type(
    description="A channel's concurrent viewers (everything its user uploaded), as `liveChannelViewersUpdated` "
    "pushes them; its id is the user's own (one LiveChannelViewers per user)."
)
class LiveChannelViewers(Node):
    user_raw_id: strawberry.Private[int]
    viewers: Count = strawberry.field(description="Sessions heard from within the live window (15 s by default).")

    @classmethod
    def of(cls, user_id: int, viewers: int) -> LiveChannelViewers:
        return cls(id=strawberry.ID(to_global_id("LiveChannelViewers", user_id)), user_raw_id=user_id, viewers=viewers)

    @strawberry.field(description="The channel's user.")
    async def user(self, info: Info[Context, None]) -> UserRef:
        row = await user_resolvers.user_by_id(info.context, self.user_raw_id)
        if row is None:
            raise NotFound("No such user.")
        return user_object(row)


async def live_viewers_of_media(context: Context, media_id: int) -> LiveViewers:
    entity = await resolvers.stream_of(context, media_id)
    return LiveViewers.of(media_id, await resolvers.concurrent(context, entity))


async def live_viewers_of_channel(context: Context, user_id: int) -> LiveChannelViewers:
    entity = await resolvers.channel_of(context, user_id)
    return LiveChannelViewers.of(user_id, await resolvers.concurrent(context, entity))


async def _fetch_live_viewers(context: Context, media_id: int) -> LiveViewers | None:
    try:
        return await live_viewers_of_media(context, media_id)
    except NotFound:
        return None


async def _fetch_live_channel_viewers(context: Context, user_id: int) -> LiveChannelViewers | None:
    try:
        return await live_viewers_of_channel(context, user_id)
    except NotFound:
        return None


register_node("LiveViewers", _fetch_live_viewers)
register_node("LiveChannelViewers", _fetch_live_channel_viewers)


# The owner's figures that move with every heartbeat; a push selecting one runs for its subscriber alone.
OWNER_FIGURES = frozenset({"watchSeconds", "averageViewDurationSeconds", "uniqueViewers", "plays"})


def _asks_owner_figures(info: Info[Context, None]) -> bool:
    """Whether the subscription's selection (fragments included) reaches one of OWNER_FIGURES."""
    pending: list[Selection] = list(info.selected_fields)
    while pending:
        selection = pending.pop()
        if isinstance(selection, SelectedField) and selection.name in OWNER_FIGURES:
            return True
        pending.extend(selection.selections)
    return False


@strawberry.type
class PlaybackQueries:
    @strawberry.field(description="Playback statistics of one media (the stream).")
    async def playback_stats(self, info: Info[Context, None], media_id: strawberry.ID) -> PlaybackStats:
        return PlaybackStats.of(await resolvers.stream_of(info.context, decode_id(media_id, "Media")))

    @strawberry.field(description="Playback statistics of everything a user uploaded (the channel).")
    async def channel_stats(self, info: Info[Context, None], user_id: strawberry.ID) -> PlaybackStats:
        return PlaybackStats.of(await resolvers.channel_of(info.context, decode_id(user_id, "User")))


@strawberry.type
class PlaybackMutations:
    @strawberry.mutation(
        description=(
            "Report playback: players call it every 5 s while playing, with one random `sessionId` per playback. "
            "`at` is when the player played (default: now); by default it may lead the server clock by at most 30 s "
            "and trail it by at most 60 s, or the heartbeat is refused and nothing is counted."
        )
    )
    async def report_playback(
        self, info: Info[Context, None], session_id: uuid.UUID, media_id: strawberry.ID, at: datetime | None = None
    ) -> PlaybackHeartbeat:
        report = await resolvers.report_playback(
            info.context, session_id=session_id, media_id=decode_id(media_id, "Media"), at=at
        )
        return PlaybackHeartbeat.from_report(report)


@strawberry.type
class PlaybackSubscriptions:
    @strawberry.subscription(
        metadata=SHARED_STATE,
        description="A media's concurrent viewers now, then on every change, at most once a second, "
        "as a LiveViewers object (with its id, for normalized caches).",
    )
    async def live_viewers_updated(
        self, info: Info[Context, None], media_id: strawberry.ID
    ) -> AsyncGenerator[LiveViewers, None]:
        raw_id = decode_id(media_id, "Media")
        entity = await resolvers.stream_of(info.context, raw_id)
        async for viewers in live.live_viewers(info.context, entity):
            yield LiveViewers.of(raw_id, viewers)

    @strawberry.subscription(
        metadata=SHARED_STATE,
        description="A channel's concurrent viewers now, then on every change, at most once a second, "
        "as a LiveChannelViewers object (with its id, for normalized caches).",
    )
    async def live_channel_viewers_updated(
        self, info: Info[Context, None], user_id: strawberry.ID
    ) -> AsyncGenerator[LiveChannelViewers, None]:
        raw_id = decode_id(user_id, "User")
        entity = await resolvers.channel_of(info.context, raw_id)
        async for viewers in live.live_viewers(info.context, entity):
            yield LiveChannelViewers.of(raw_id, viewers)

    @strawberry.subscription(
        metadata=SHARED_STATE,
        description="A media's concurrent viewers now, then on every change, at most once a second.",
        deprecation_reason="A bare number cannot update a normalized cache: use `liveViewersUpdated`, "
        "which pushes a LiveViewers object with its id.",
    )
    async def live_viewers(self, info: Info[Context, None], media_id: strawberry.ID) -> AsyncGenerator[Count, None]:
        entity = await resolvers.stream_of(info.context, decode_id(media_id, "Media"))
        async for viewers in live.live_viewers(info.context, entity):
            yield viewers

    @strawberry.subscription(
        metadata=SHARED_STATE,
        description="A channel's concurrent viewers now, then on every change, at most once a second.",
        deprecation_reason="A bare number cannot update a normalized cache: use `liveChannelViewersUpdated`, "
        "which pushes a LiveChannelViewers object with its id.",
    )
    async def live_channel_viewers(
        self, info: Info[Context, None], user_id: strawberry.ID
    ) -> AsyncGenerator[Count, None]:
        entity = await resolvers.channel_of(info.context, decode_id(user_id, "User"))
        async for viewers in live.live_viewers(info.context, entity):
            yield viewers

    @strawberry.subscription(
        metadata=SHARED_STATE,
        description=(
            "A media's playback statistics (as `playbackStats`) now, then whenever its total, concurrent "
            "viewers or current minute (plays, peak) change, at most once a second."
        ),
    )
    async def playback_stats_updated(
        self, info: Info[Context, None], media_id: strawberry.ID
    ) -> AsyncGenerator[PlaybackStats, None]:
        entity = await resolvers.stream_of(info.context, decode_id(media_id, "Media"))
        async for stats in live_resolvers.stats_updates(info.context, entity, watch_time=_asks_owner_figures(info)):
            yield PlaybackStats.of(entity, known=stats)

    @strawberry.subscription(
        metadata=SHARED_STATE,
        description=(
            "A channel's playback statistics (as `channelStats`) now, then whenever its total, concurrent "
            "viewers or current minute (plays, peak) change, at most once a second."
        ),
    )
    async def channel_stats_updated(
        self, info: Info[Context, None], user_id: strawberry.ID
    ) -> AsyncGenerator[PlaybackStats, None]:
        entity = await resolvers.channel_of(info.context, decode_id(user_id, "User"))
        async for stats in live_resolvers.stats_updates(info.context, entity, watch_time=_asks_owner_figures(info)):
            yield PlaybackStats.of(entity, known=stats)
