"""How far a consumer group is behind on a Redis stream: entries waiting, and the oldest one's age.

Waiting means read by none of the group yet, or read and not acknowledged (pending).
Stream ids begin with the millisecond they were added, so the oldest waiting entry's
id tells its age without reading it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

# Without Redis 7's `lag` (or when Redis cannot compute it) undelivered entries are
# counted by reading their ids, up to this many.
COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class GroupBacklog:
    entries: int
    oldest_seconds: float


async def group_backlog(redis: Redis, stream: str, group: str) -> GroupBacklog:
    """The group's backlog; an empty one when the stream or the group does not exist yet."""
    try:
        groups: list[dict[str, Any]] = await redis.xinfo_groups(stream)
    except ResponseError:
        return GroupBacklog(0, 0.0)
    info = next((entry for entry in groups if _text(entry.get("name")) == group), None)
    if info is None:
        return GroupBacklog(0, 0.0)
    last_delivered = _text(info.get("last-delivered-id")) or "0-0"
    pending = int(info.get("pending") or 0)
    lag = info.get("lag")
    first_new: Any = await redis.xrange(stream, min=f"({last_delivered}", count=1)
    if lag is None:
        undelivered: Any = await redis.xrange(stream, min=f"({last_delivered}", count=COUNT_LIMIT) if first_new else []
        lag = len(undelivered)
    oldest_ids = [_text(first_new[0][0])] if first_new else []
    if pending:
        summary: Any = await redis.xpending(stream, group)
        if summary.get("min") is not None:
            oldest_ids.append(_text(summary["min"]))
    now_ms = time.time() * 1000
    oldest_ms = min((int(entry_id.split("-")[0]) for entry_id in oldest_ids), default=now_ms)
    return GroupBacklog(pending + int(lag), max(0.0, (now_ms - oldest_ms) / 1000))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value) if value is not None else ""
