"""The Redis side of view counting: its keys, and the scripts that keep their invariants.

Pending counts are spread over buckets (media id mod `view_buckets`). Every key of a
bucket carries the bucket's hash tag, so each script below touches one Cluster slot:

- `pending`  hash media id -> views counted and not yet taken by a flusher;
- `batch:<id>` hash media id -> views a flusher took (a batch in flight, immutable);
- `batches`  sorted set batch id -> lease expiry (ms, Redis clock);
- `seen:<media>:<viewer>` the dedupe key of one viewer (SET NX EX);
- `push:<media>` whether a process is announcing this media's count, and how many
  views arrived since it last looked.

A counted view is always in exactly one of: `pending`, one in-flight batch, or (once a
batch is applied) `media_view_count` in PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from mediagraph.keys import KeySpace
from mediagraph.lua import Lua, run_batched

# ARGV[4] is the media's `viewCount` channel. Nobody subscribed to it (PUBSUB NUMSUB,
# which a script may ask) means nobody to announce to: the view leaves the announcer's
# claim free and costs this one round trip. A subscriber reads the count after
# subscribing, so it still sees this view; the next view after it subscribed announces.
# On a cluster the channel is sharded and shares the bucket's slot (so this node knows
# its subscribers): ARGV[5] is SHARDNUMSUB there. ARGV[4] '' skips the check.
COUNT_VIEW = """
if not redis.call('SET', KEYS[1], 1, 'NX', 'EX', ARGV[1]) then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
if redis.call('EXISTS', KEYS[3]) == 0 then
  if ARGV[4] ~= '' and redis.call('PUBSUB', ARGV[5], ARGV[4])[2] == 0 then return 1 end
  redis.call('SET', KEYS[3], 1, 'PX', ARGV[3])
  return 2
end
redis.call('INCR', KEYS[3])
return 1
"""
COUNT_VIEW_SCRIPT = Lua(COUNT_VIEW)

# The announcing process looks again after an interval: views that arrived meanwhile
# (n > 1) mean one more push; otherwise it steps down and the next view takes over.
FOLLOW_UP_PUSH = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 1 then
  redis.call('SET', KEYS[1], 1, 'PX', ARGV[1])
  return 1
end
redis.call('DEL', KEYS[1])
return 0
"""

NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

TAKE_BATCH = (
    NOW_MS
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('RENAME', KEYS[1], KEYS[3])
redis.call('ZADD', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
return redis.call('HGETALL', KEYS[3])
"""
)

RECLAIM_BATCHES = (
    NOW_MS
    + """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now), 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[1])), id)
end
return ids
"""
)

# Batch keys are derived from the bucket's own prefix, so they share its slot.
READ_UNFLUSHED = """
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local out = {redis.call('HMGET', KEYS[1], unpack(ids))}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HMGET', ARGV[1] .. id, unpack(ids))
end
return out
"""

READ_UNFLUSHED_SCRIPT = Lua(READ_UNFLUSHED)

# READ_UNFLUSHED of several buckets in one call, on one Redis (on a cluster each bucket is a
# slot of its own): a page's twenty media fall in up to `view_buckets` buckets, and the
# client spent more on a reply per bucket than Redis on reading them.
# KEYS: per bucket `pending` and `batches`. ARGV: per bucket its batch key prefix, how many
# media ids follow, and the ids. Returns per bucket what READ_UNFLUSHED returns.
READ_UNFLUSHED_MANY = """
local out = {}
local a = 1
for b = 1, #KEYS / 2 do
  local prefix = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  local ids = {}
  for i = 1, n do ids[i] = ARGV[a + 1 + i] end
  a = a + 2 + n
  local one = {redis.call('HMGET', KEYS[2 * b - 1], unpack(ids))}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2 * b], 0, -1)) do
    one[#one + 1] = id
    one[#one + 1] = redis.call('HMGET', prefix .. id, unpack(ids))
  end
  out[b] = one
end
return out
"""

READ_UNFLUSHED_MANY_SCRIPT = Lua(READ_UNFLUSHED_MANY)
# What a read of unflushed views may run, for a caller's pipeline to load if Redis lost it.
UNFLUSHED_SCRIPTS = (READ_UNFLUSHED_SCRIPT, READ_UNFLUSHED_MANY_SCRIPT)

# Lua's unpack() has a stack limit; a loader batch is split into chunks below it.
READ_CHUNK = 1_000


def view_count_channel(keys: KeySpace, media_id: int, buckets: int) -> str:
    """The media's `viewCount` channel, in its view bucket's slot: COUNT_VIEW asks who listens."""
    return keys.entity_channel("views", f"b{media_id % buckets}", media_id)


class Counted(IntEnum):
    """What COUNT_VIEW returns."""

    ALREADY_SEEN = 0
    YES = 1
    YES_AND_ANNOUNCE = 2  # nobody was announcing this media's count: the caller does


@dataclass(frozen=True)
class Batch:
    bucket: int
    id: uuid.UUID
    deltas: dict[int, int]


@dataclass
class Unflushed:
    """What Redis holds for some media: pending views, and each in-flight batch's share."""

    pending: dict[int, int]
    in_flight: dict[uuid.UUID, dict[int, int]]


# Each key space's bucket keys for reads (`ViewBuffer._read_keys`); a process has one key
# space, tests a few, so the bound only guards against a caller making key spaces freely.
READ_KEYS_KEPT = 10_000
_READ_KEYS: dict[tuple[str, int], tuple[str, str, str]] = {}


@dataclass(frozen=True, slots=True)
class _CountNames:
    seen_prefix: str  # the viewer's dedupe key is this and the viewer
    pending: str
    push: str
    channel: str
    numsub: str


# Each media's names for counting a view (`ViewBuffer._count_names`), by key space; bounded,
# the oldest media go first.
COUNT_NAMES_KEPT = 50_000
_COUNT_NAMES: OrderedDict[tuple[str, bool, int, int], _CountNames] = OrderedDict()


class ViewBuffer:
    def __init__(self, redis: Redis, keys: KeySpace, buckets: int) -> None:
        self.redis = redis
        self.keys = keys
        self.buckets = buckets

    def bucket_of(self, media_id: int) -> int:
        return media_id % self.buckets

    def _key(self, bucket: int, *parts: object) -> str:
        return self.keys.key("views", f"{{b{bucket}}}", *parts)

    def pending_key(self, bucket: int) -> str:
        return self._key(bucket, "pending")

    def batches_key(self, bucket: int) -> str:
        return self._key(bucket, "batches")

    def batch_key(self, bucket: int, batch_id: uuid.UUID | str) -> str:
        return self._key(bucket, "batch", batch_id)

    def _read_keys(self, bucket: int) -> tuple[str, str, str]:
        """The bucket's `pending` and `batches` keys and its batch key prefix, built once: a page
        reads up to every bucket, and naming them cost more than the rest of its read."""
        cache_key = (self.keys.prefix, bucket)
        names = _READ_KEYS.get(cache_key)
        if names is None:
            if len(_READ_KEYS) >= READ_KEYS_KEPT:
                _READ_KEYS.clear()
            names = _READ_KEYS[cache_key] = (
                self.pending_key(bucket),
                self.batches_key(bucket),
                self.batch_key(bucket, ""),
            )
        return names

    def seen_key(self, media_id: int, viewer: str) -> str:
        return self._key(self.bucket_of(media_id), "seen", media_id, viewer)

    def push_key(self, media_id: int) -> str:
        return self._key(self.bucket_of(media_id), "push", media_id)

    def _count_names(self, media_id: int) -> _CountNames:
        """What counting a view of the media names besides its viewer, built once per media: views
        come to the same media again and again, and naming them cost a fifth of counting one."""
        cache_key = (self.keys.prefix, self.keys.sharded_pubsub, self.buckets, media_id)
        names = _COUNT_NAMES.get(cache_key)
        if names is None:
            if len(_COUNT_NAMES) >= COUNT_NAMES_KEPT:
                _COUNT_NAMES.popitem(last=False)  # constant time, unlike a dict's first entry
            channel = view_count_channel(self.keys, media_id, self.buckets)
            names = _COUNT_NAMES[cache_key] = _CountNames(
                seen_prefix=self.seen_key(media_id, ""),
                pending=self.pending_key(self.bucket_of(media_id)),
                push=self.push_key(media_id),
                channel=channel,
                numsub="SHARDNUMSUB" if self.keys.is_sharded(channel) else "NUMSUB",
            )
        return names

    async def count_view(self, media_id: int, viewer: str, *, dedupe_seconds: int, push_hold_ms: int) -> Counted:
        """One round trip: YES_AND_ANNOUNCE only when someone watches the count and nobody announces it."""
        names = self._count_names(media_id)
        keys = [names.seen_prefix + viewer, names.pending, names.push]
        args = [dedupe_seconds, media_id, push_hold_ms, names.channel, names.numsub]
        return Counted(await COUNT_VIEW_SCRIPT.run_batched(self.redis, keys, args))

    async def follow_up_push(self, media_id: int, *, push_hold_ms: int) -> bool:
        script = self.redis.register_script(FOLLOW_UP_PUSH)
        return bool(await script(keys=[self.push_key(media_id)], args=[push_hold_ms]))

    async def take(self, bucket: int, *, lease_ms: int) -> Batch | None:
        """Move the bucket's pending counts into a new in-flight batch, leased to the caller."""
        batch_id = uuid.uuid4()
        script = self.redis.register_script(TAKE_BATCH)
        keys = [self.pending_key(bucket), self.batches_key(bucket), self.batch_key(bucket, batch_id)]
        flat = await script(keys=keys, args=[str(batch_id), lease_ms])
        if not flat:
            return None
        return Batch(bucket, batch_id, _pairs(flat))

    async def reclaim(self, bucket: int, *, lease_ms: int, limit: int = 100) -> list[Batch]:
        """In-flight batches whose lease ran out (their flusher died or stalled), leased anew to the caller."""
        script = self.redis.register_script(RECLAIM_BATCHES)
        ids = await script(keys=[self.batches_key(bucket)], args=[lease_ms, limit])
        batches = []
        for raw in ids:
            batch_id = uuid.UUID(raw.decode())
            flat = await self.redis.hgetall(self.batch_key(bucket, batch_id))
            if flat:
                batches.append(Batch(bucket, batch_id, {int(k): int(v) for k, v in flat.items()}))
            else:
                # Dropped by another flusher between the two calls: nothing left to do.
                await self.redis.zrem(self.batches_key(bucket), str(batch_id))
        return batches

    async def drop(self, batch: Batch) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.batch_key(batch.bucket, batch.id))
            pipe.zrem(self.batches_key(batch.bucket), str(batch.id))
            await pipe.execute()

    async def backlog(self) -> int:
        """Media with views waiting for a flusher, plus batches taken and not yet applied, over all buckets."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for bucket in range(self.buckets):
                pipe.hlen(self.pending_key(bucket))
                pipe.zcard(self.batches_key(bucket))
            counts: list[int] = await pipe.execute()
        return sum(int(count) for count in counts)

    async def in_flight(self, bucket: int) -> list[uuid.UUID]:
        members: list[Any] = await self.redis.zrange(self.batches_key(bucket), 0, -1)
        return [uuid.UUID(raw.decode()) for raw in members]

    async def read_unflushed(self, media_ids: Sequence[int]) -> Unflushed:
        """Pending and in-flight counts of `media_ids`, in one pipelined round trip."""
        replies: list[Any] = []
        read = self.queue_unflushed(None, media_ids)
        if read.calls:
            # Merged with the other Redis calls of this batch (concurrent pages' and
            # loaders' reads): one write and one read on the socket for all of them.
            replies = await run_batched(self.redis, UNFLUSHED_SCRIPTS, lambda pipe: read.queue(pipe))
        return read.parse(replies)

    def queue_unflushed(self, pipe: Pipeline | None, media_ids: Sequence[int]) -> UnflushedRead:
        """The reads of `media_ids`' pending and in-flight counts, to run in a caller's pipeline
        (queued on `pipe` now, or by `queue` later); `parse` turns their replies into counts."""
        by_bucket: dict[int, list[int]] = {}
        for media_id in dict.fromkeys(media_ids):
            by_bucket.setdefault(self.bucket_of(media_id), []).append(media_id)
        read = UnflushedRead([], together=not self.keys.sharded_pubsub)
        for bucket, ids in by_bucket.items():
            for start in range(0, len(ids), READ_CHUNK):
                chunk = ids[start : start + READ_CHUNK]
                pending, batches, batch_prefix = self._read_keys(bucket)
                read.calls.append(([pending, batches], [batch_prefix, *chunk], chunk))
        if pipe is not None:
            read.queue(pipe)
        return read


@dataclass
class UnflushedRead:
    """READ_UNFLUSHED calls, one per bucket (chunk): keys, arguments and the media ids asked."""

    calls: list[tuple[list[str], list[Any], list[int]]]
    # Whether several calls go as one READ_UNFLUSHED_MANY (one Redis, not a cluster).
    together: bool = False

    @property
    def in_one_call(self) -> bool:
        return self.together and len(self.calls) > 1

    def queue(self, pipe: Pipeline) -> None:
        if self.in_one_call:
            keys: list[str] = []
            args: list[Any] = []
            for call_keys, (batch_prefix, *_), chunk in self.calls:
                keys += call_keys
                args += [batch_prefix, len(chunk), *chunk]
            READ_UNFLUSHED_MANY_SCRIPT.queue(pipe, keys, args)
            return
        for keys, args, _ in self.calls:
            READ_UNFLUSHED_SCRIPT.queue(pipe, keys, args)

    def parse(self, replies: Sequence[Any]) -> Unflushed:
        """The counts, from the replies of what `queue` queued (one, or one per call)."""
        if self.in_one_call:
            [replies] = replies
        unflushed = Unflushed(pending={}, in_flight={})
        for (_, _, chunk), reply in zip(self.calls, replies, strict=True):
            _add(unflushed.pending, chunk, reply[0])
            for at in range(1, len(reply), 2):
                _add(unflushed.in_flight.setdefault(uuid.UUID(reply[at].decode()), {}), chunk, reply[at + 1])
        return unflushed


def _pairs(flat: list[Any]) -> dict[int, int]:
    return {int(flat[at]): int(flat[at + 1]) for at in range(0, len(flat), 2)}


def _add(into: dict[int, int], media_ids: list[int], values: list[Any]) -> None:
    for media_id, value in zip(media_ids, values, strict=True):
        if value is not None:
            into[media_id] = into.get(media_id, 0) + int(value)
