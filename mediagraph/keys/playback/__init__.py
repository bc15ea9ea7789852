"""Live playback statistics in Redis: every key, channel and time bucket of the domain.

All of a channel's keys (its own counters, its streams' counters, live sets and session
records) share one hash tag, the channel id. Every heartbeat of a stream touches its
channel's counters anyway, so the channel is the natural unit of locality, and the one
script that checks a session and counts it for the stream and the channel stays legal
in a Redis Cluster. Only the session-id claim (global uniqueness) and the two worker
indexes live outside a channel's slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum

from mediagraph.keys import KeySpace

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Kind(Enum):
    STREAM = "stream"
    CHANNEL = "channel"


class Granularity(Enum):
    MINUTE = "minute"
    HOUR = "hour"
    DAY = "day"

    @property
    def seconds(self) -> int:
        return PERIOD_SECONDS[self]

    @property
    def letter(self) -> str:
        return self.value[0]


PERIOD_SECONDS = {Granularity.MINUTE: 60, Granularity.HOUR: 3600, Granularity.DAY: 86400}
GRANULARITIES = (Granularity.MINUTE, Granularity.HOUR, Granularity.DAY)

# How long Redis keeps a bucket after it starts. The roll-up copies buckets into
# PostgreSQL within seconds, so these only bound how long a stopped worker may stay
# down before counts are lost, and Redis memory. A heartbeat may be at most an hour
# late (settings), so no bucket still receiving counts has expired.
RETENTION_SECONDS = {Granularity.MINUTE: 6 * 3600, Granularity.HOUR: 3 * 86400, Granularity.DAY: 8 * 86400}
# An entity's total and live-count state, refreshed on every heartbeat. Longer than any
# bucket's retention, so a bucket never outlives the state of its entity.
STATE_RETENTION_SECONDS = 9 * 86400


def to_ms(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


def bucket_index(moment_ms: int, granularity: Granularity) -> int:
    return moment_ms // (granularity.seconds * 1000)


def bucket_at(moment: datetime, granularity: Granularity) -> int:
    """The bucket holding `moment`."""
    return (moment - EPOCH) // timedelta(seconds=granularity.seconds)


def bucket_after(moment: datetime, granularity: Granularity) -> int:
    """The first bucket starting at or after `moment`."""
    return -((EPOCH - moment) // timedelta(seconds=granularity.seconds))


def bucket_start(index: int, granularity: Granularity) -> datetime:
    return EPOCH + timedelta(seconds=index * granularity.seconds)


@dataclass(frozen=True)
class Entity:
    """A stream (a media) or a channel (its uploader); `channel` is the hash tag of its keys."""

    kind: Kind
    id: int
    channel: int

    @classmethod
    def stream(cls, media_id: int, channel_id: int) -> Entity:
        return cls(Kind.STREAM, media_id, channel_id)

    @classmethod
    def of_channel(cls, channel_id: int) -> Entity:
        return cls(Kind.CHANNEL, channel_id, channel_id)

    @property
    def short(self) -> str:
        return f"s:{self.id}" if self.kind is Kind.STREAM else "c"


@dataclass(frozen=True)
class Counter:
    """One Redis counter: an entity's total (`granularity` None) or one of its buckets."""

    entity: Entity
    granularity: Granularity | None = None
    index: int = 0

    @property
    def token(self) -> str:
        """The counter's name inside its channel: the member of the channel's dirty set."""
        return counter_token(self.entity.short, self.granularity, self.index)

    @property
    def retention_seconds(self) -> int:
        return retention_of(self.granularity)


def retention_of(granularity: Granularity | None) -> int:
    """How long Redis keeps a counter: an entity's total (None) or one of its buckets."""
    return STATE_RETENTION_SECONDS if granularity is None else RETENTION_SECONDS[granularity]


_BY_LETTER = {granularity.letter: granularity for granularity in GRANULARITIES}


def token_parts(channel_id: int, token: str) -> tuple[Kind, int, Granularity | None, int]:
    """What a counter's token (`Counter.token`, in the channel `channel_id`) names: kind, entity
    id, granularity and bucket index, without making objects; a roll-up reads tens of
    thousands of tokens a visit."""
    parts = token.split(":")
    if parts[0] == "s":
        kind, entity_id, rest = Kind.STREAM, int(parts[1]), parts[2:]
    else:
        kind, entity_id, rest = Kind.CHANNEL, channel_id, parts[1:]
    if rest == ["t"]:
        return kind, entity_id, None, 0
    return kind, entity_id, _BY_LETTER[rest[0]], int(rest[1])


def counter_token(entity_short: str, granularity: Granularity | None, index: int) -> str:
    """`Counter.token`, for callers that name many counters at once without making them."""
    if granularity is None:
        return f"{entity_short}:t"
    return f"{entity_short}:{granularity.letter}:{index}"


def _tag(channel_id: int) -> str:
    return f"{{{channel_id}}}"


def channel_prefix(keys: KeySpace, channel_id: int) -> str:
    """How every key of a channel begins (its hash tag); the rest names the key in the channel."""
    return keys.key("playback", _tag(channel_id), "")


def counter_key(keys: KeySpace, counter: Counter) -> str:
    """A hash: `n` (plays), `peak` (most concurrent viewers), `id` (this key's generation),
    and on a total also `lv`/`v` (the live count last published and its version)."""
    return counter_key_in(channel_prefix(keys, counter.entity.channel), counter.token)


def counter_key_in(prefix: str, token: str) -> str:
    """The key of the counter `token` in the channel whose keys begin with `prefix`."""
    return prefix + token


def live_key(keys: KeySpace, entity: Entity) -> str:
    """A sorted set: session id -> when the server last heard from it (ms)."""
    return live_key_in(channel_prefix(keys, entity.channel), entity.short)


def live_key_in(prefix: str, entity_short: str) -> str:
    return f"{prefix}{entity_short}:live"


def session_key(keys: KeySpace, channel_id: int, session_id: str) -> str:
    """A hash: the session's media and the last minute, hour and day it counted in."""
    return keys.key("playback", _tag(channel_id), "session", session_id)


def session_claim_key(keys: KeySpace, session_id: str) -> str:
    """Which media a session id belongs to, across every channel."""
    return keys.key("playback", "claim", f"{{{session_id}}}")


def churn_key(keys: KeySpace, channel_id: int, address: str) -> str:
    return keys.key("playback", _tag(channel_id), "churn", address)


def dirty_key(keys: KeySpace, channel_id: int) -> str:
    """A set of the channel's counter tokens changed since the roll-up last copied them."""
    return keys.key("playback", _tag(channel_id), "dirty")


def dirty_pattern(keys: KeySpace) -> str:
    return _glob_escape(keys.key("playback", "")) + "{*}:dirty"


def channel_of_dirty_key(keys: KeySpace, key: str) -> int:
    return int(key[len(keys.key("playback", "")) :].split(":")[0].strip("{}"))


def dirty_index_key(keys: KeySpace) -> str:
    """A sorted set: channel id -> when a heartbeat that may have started a play last named
    it (ms). Every channel in it is due for the roll-up."""
    return keys.key("playback", "dirty-channels")


def grown_index_key(keys: KeySpace) -> str:
    """A sorted set: channel id -> when the growth its heartbeats left (watch time, peaks,
    counts of counters already copied) falls due for the roll-up (ms)."""
    return keys.key("playback", "grown-channels")


def watched_key(keys: KeySpace) -> str:
    """A sorted set: entity -> until when some subscription watches its live count (ms)."""
    return keys.key("playback", "watched")


def watched_member(entity: Entity) -> str:
    return f"{entity.kind.value}:{entity.channel}:{entity.id}"


def entity_of_watched(member: str) -> Entity:
    kind, channel, entity_id = member.split(":")
    return Entity(Kind(kind), int(entity_id), int(channel))


def domain_pattern(keys: KeySpace) -> str:
    """Every key of the domain (tests simulate Redis forgetting with it)."""
    return _glob_escape(keys.key("playback", "")) + "*"


def live_channel(keys: KeySpace, entity: Entity) -> str:
    return keys.channel("playback", entity.kind.value, f"{{{entity.id}}}")


def stats_channel(keys: KeySpace, entity: Entity) -> str:
    """A heartbeat counted a play in the entity's total or buckets; listeners re-read the figures."""
    return keys.channel("playback", "stats", entity.kind.value, f"{{{entity.id}}}")


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)
