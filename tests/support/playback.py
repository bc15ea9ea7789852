"""Playback test helpers: the seed's counting rules as a small reference model, and queries."""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.factories import create_media, create_user
from tests.support.graphql import GraphQLClient

REPORT = """
mutation($session: UUID!, $media: ID!, $at: DateTime) {
  reportPlayback(sessionId: $session, mediaId: $media, at: $at) { sessionId mediaId countedAt counted concurrent }
}
"""
STREAM_STATS = """
query($media: ID!, $granularity: PlaybackGranularity!, $from: DateTime, $to: DateTime) {
  playbackStats(mediaId: $media) {
    total concurrent series(granularity: $granularity, from: $from, to: $to) { start end count peak }
  }
}
"""
CHANNEL_STATS = """
query($user: ID!, $granularity: PlaybackGranularity!, $from: DateTime, $to: DateTime) {
  channelStats(userId: $user) {
    total concurrent series(granularity: $granularity, from: $from, to: $to) { start end count peak }
  }
}
"""

PERIODS = {"MINUTE": 60, "HOUR": 3600, "DAY": 86400}


def iso(moment: datetime) -> str:
    """As the API writes DateTime values."""
    return moment.astimezone(UTC).isoformat()


def floor(moment: datetime, granularity: str) -> datetime:
    seconds = PERIODS[granularity]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + timedelta(seconds=int((moment - epoch).total_seconds()) // seconds * seconds)


@dataclass
class ReferenceModel:
    """The seed's rules, written plainly: a session's first heartbeat (INSERT) counts in the
    total and its minute, hour and day; a later one (MODIFY) counts in each of minute, hour
    and day whose period differs from (is later than) the last it counted in."""

    sessions: dict[str, dict[str, datetime]] = field(default_factory=dict)
    counts: collections.Counter[tuple[str, str, datetime | None]] = field(default_factory=collections.Counter)

    def heartbeat(self, session: str, *, entities: list[str], at: datetime) -> list[str]:
        periods = {granularity: floor(at, granularity) for granularity in PERIODS}
        last = self.sessions.get(session)
        if last is None:
            counted = ["TOTAL", *PERIODS]
            self.sessions[session] = periods
        else:
            counted = [g for g in PERIODS if periods[g] > last[g]]
            self.sessions[session] = {g: max(periods[g], last[g]) for g in PERIODS}
        for entity in entities:
            for name in counted:
                self.counts[(entity, name, None if name == "TOTAL" else periods[name])] += 1
        return counted

    def total(self, entity: str) -> int:
        return self.counts[(entity, "TOTAL", None)]

    def series(self, entity: str, granularity: str, start: datetime, end: datetime) -> list[tuple[str, int]]:
        step = timedelta(seconds=PERIODS[granularity])
        buckets, moment = [], floor(start, granularity)
        while moment < end:
            buckets.append((iso(moment), self.counts[(entity, granularity, moment)]))
            moment += step
        return buckets


@dataclass
class Channel:
    token: str
    user: dict[str, Any]
    media: list[dict[str, Any]]


async def make_channel(gql: GraphQLClient, http: Any, *, media: int = 1) -> Channel:
    token, user = await create_user(gql)
    uploads = [await create_media(http, token=token, title=f"Stream {n}") for n in range(media)]
    return Channel(token, user, uploads)


def new_session() -> str:
    return str(uuid.uuid4())


async def report(gql: GraphQLClient, session: str, media_id: str, at: datetime | None = None) -> dict[str, Any]:
    variables = {"session": session, "media": media_id, "at": iso(at) if at else None}
    return (await gql.ok(REPORT, variables))["reportPlayback"]  # type: ignore[no-any-return]


async def stream_stats(
    gql: GraphQLClient,
    media_id: str,
    granularity: str = "MINUTE",
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, Any]:
    return await _stats(gql, STREAM_STATS, "playbackStats", {"media": media_id}, granularity, start, end)


async def channel_stats(
    gql: GraphQLClient,
    user_id: str,
    granularity: str = "MINUTE",
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, Any]:
    return await _stats(gql, CHANNEL_STATS, "channelStats", {"user": user_id}, granularity, start, end)


async def _stats(
    gql: GraphQLClient,
    document: str,
    field: str,
    subject: dict[str, str],
    granularity: str,
    start: datetime | None,
    end: datetime | None,
) -> dict[str, Any]:
    variables = {**subject, "granularity": granularity, "from": _iso(start), "to": _iso(end)}
    return (await gql.ok(document, variables))[field]  # type: ignore[no-any-return]


def _iso(moment: datetime | None) -> str | None:
    return iso(moment) if moment is not None else None


def counts(series: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(bucket["start"], bucket["count"]) for bucket in series]


def peaks(series: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(bucket["start"], bucket["peak"]) for bucket in series]
