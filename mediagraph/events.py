"""The engagement event stream: likes, comments and views, as other domains consume them.

Producers (views, likes, comments) append here; consumers (hot media) read it through a
Redis consumer group, so any number of them can run and a dead one's messages are claimed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from mediagraph.keys import KeySpace
from mediagraph.keys.events import engagement_stream

# Bounded so a stream nobody consumes cannot grow without limit.
STREAM_MAX_LENGTH = 1_000_000


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
    await redis.xadd(
        engagement_stream(keys),
        event.fields(),  # type: ignore[arg-type]
        maxlen=STREAM_MAX_LENGTH,
        approximate=True,
    )


def queue_engagement(pipe: Pipeline, keys: KeySpace, event: EngagementEvent) -> None:
    """`publish_engagement` queued on a pipeline (never awaited: awaiting a cluster pipeline empties it)."""
    pipe.xadd(
        engagement_stream(keys),
        event.fields(),  # type: ignore[arg-type]
        maxlen=STREAM_MAX_LENGTH,
        approximate=True,
    )
