"""The engagement event stream: likes, comments and views, as other domains consume them.

Producers (views, likes, comments) append here; consumers (hot media) read it through a
Redis consumer group, so any number of them can run and a dead one's messages are claimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from mediagraph.keys import KeySpace
from mediagraph.keys.events import APPEND_EVENTS, engagement_stream

# Bounded so a stream nobody consumes cannot grow without limit.
STREAM_MAX_LENGTH = 1_000_000
# Events one script call appends: Redis runs nothing else meanwhile (about 2 ms for 500).
APPEND_CHUNK = 500


class EngagementKind(Enum):
    LIKE = "like"
    COMMENT = "comment"
    VIEW = "view"


@dataclass(frozen=True)
class EngagementEvent:
    kind: EngagementKind
    media_id: int
    # +1 for a like, a comment or counted views; -1 when a like or comment is removed.
    delta: int

    def fields(self) -> dict[str, str]:
        return {"kind": self.kind.value, "media_id": str(self.media_id), "delta": str(self.delta)}

    @classmethod
    def from_fields(cls, fields: dict[bytes, bytes]) -> EngagementEvent:
        return cls(
            kind=EngagementKind(fields[b"kind"].decode()),
            media_id=int(fields[b"media_id"]),
            delta=int(fields[b"delta"]),
        )


async def publish_engagement(redis: Redis, keys: KeySpace, event: EngagementEvent) -> None:
    await publish_engagements(redis, keys, [event])


def queue_engagement(pipe: Pipeline, keys: KeySpace, event: EngagementEvent) -> None:
    """`publish_engagement` queued on a pipeline (never awaited: awaiting a cluster pipeline empties it)."""
    pipe.xadd(
        engagement_stream(keys),
        event.fields(),  # type: ignore[arg-type]
        maxlen=STREAM_MAX_LENGTH,
        approximate=True,
    )


async def publish_engagements(redis: Redis, keys: KeySpace, events: Sequence[EngagementEvent]) -> None:
    """Many events (a flush's views, one per media) in one round trip per `APPEND_CHUNK`: an
    XADD each in a pipeline costs a command to pack and a reply to parse per event."""
    for start in range(0, len(events), APPEND_CHUNK):
        # Each event's fields as XADD takes them (name, value, …); every event has the same fields.
        entries = [
            [part for field in event.fields().items() for part in field]
            for event in events[start : start + APPEND_CHUNK]
        ]
        arguments = [STREAM_MAX_LENGTH, len(entries[0]), *(part for entry in entries for part in entry)]
        await APPEND_EVENTS.run(redis, [engagement_stream(keys)], arguments)
