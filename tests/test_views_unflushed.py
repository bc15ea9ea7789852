"""Views not flushed yet, read for many media at once: pending counts and in-flight batches
come back the same whether each bucket is read in its own script call or (on one Redis)
all buckets in one."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import replace

import pytest

from mediagraph.keys import KeySpace, views
from mediagraph.keys.views import UNFLUSHED_SCRIPTS, Counted, ViewBuffer
from mediagraph.lua import run_pipeline
from mediagraph.services import Services

BUCKETS = 16


async def test_unflushed_views_read_alike_bucket_by_bucket_and_together(services: Services) -> None:
    # A key space of its own: the server's flusher must not take these counts meanwhile.
    keys = KeySpace(
        f"{services.keys.prefix}unflushed-{uuid.uuid4().hex[:8]}:", sharded_pubsub=services.keys.sharded_pubsub
    )
    buffer = ViewBuffer(services.redis, keys, BUCKETS)
    media_ids = [1_024 + n for n in range(3 * BUCKETS)]  # every bucket, three media each; [n] in bucket n
    counted: dict[int, int] = {}

    async def view(media_id: int, times: int) -> None:
        for _ in range(times):
            await buffer.count_view(media_id, f"u{uuid.uuid4().hex}", dedupe_seconds=600, push_hold_ms=0)
        counted[media_id] = counted.get(media_id, 0) + times

    for n, media_id in enumerate(media_ids):
        await view(media_id, n % 3 + 1)
    # Two buckets' counts go in flight (one of them twice), and more views arrive after.
    taken = [await buffer.take(bucket, lease_ms=600_000) for bucket in (0, 5)]
    await view(media_ids[0], 2)
    taken.append(await buffer.take(0, lease_ms=600_000))
    await view(media_ids[0], 1)
    await view(media_ids[5], 4)
    assert all(batch is not None for batch in taken)

    read = buffer.queue_unflushed(None, [*media_ids, 999_999])  # one media with nothing
    apart = replace(read, together=False)
    replies = await run_pipeline(services.redis, list(UNFLUSHED_SCRIPTS), apart.queue)
    bucket_by_bucket = apart.parse(replies)
    together = await buffer.read_unflushed([*media_ids, 999_999])

    assert together == bucket_by_bucket
    assert read.in_one_call is not services.keys.sharded_pubsub  # one call on one Redis, per bucket on a cluster
    assert set(together.in_flight) == {batch.id for batch in taken if batch is not None}
    for media_id in media_ids:
        in_flight = sum(batch.get(media_id, 0) for batch in together.in_flight.values())
        assert together.pending.get(media_id, 0) + in_flight == counted[media_id]
    assert 999_999 not in together.pending


async def test_a_view_is_counted_under_the_names_of_its_own_key_space_and_buckets(services: Services) -> None:
    # Two key spaces with different bucket counts count the same media: names built once per
    # media must not be shared between them.
    buffers = [
        ViewBuffer(
            services.redis,
            KeySpace(
                f"{services.keys.prefix}names-{uuid.uuid4().hex[:8]}:", sharded_pubsub=services.keys.sharded_pubsub
            ),
            buckets,
        )
        for buckets in (BUCKETS, BUCKETS + 1)
    ]
    media_id = 4_242
    for buffer in buffers:
        assert await buffer.count_view(media_id, "viewer", dedupe_seconds=600, push_hold_ms=0) is Counted.YES
        assert await buffer.count_view(media_id, "viewer", dedupe_seconds=600, push_hold_ms=0) is Counted.ALREADY_SEEN
        assert 0 < await services.redis.ttl(buffer.seen_key(media_id, "viewer")) <= 600
        pending = await services.redis.hget(buffer.pending_key(buffer.bucket_of(media_id)), str(media_id))
        assert pending == b"1"


async def test_names_kept_per_media_stay_bounded_the_oldest_going_first(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "COUNT_NAMES_KEPT", 3)
    monkeypatch.setattr(views, "_COUNT_NAMES", OrderedDict())
    keys = KeySpace(f"{services.keys.prefix}bound-{uuid.uuid4().hex[:8]}:", sharded_pubsub=services.keys.sharded_pubsub)
    buffer = ViewBuffer(services.redis, keys, BUCKETS)
    for media_id in range(100, 105):
        await buffer.count_view(media_id, "viewer", dedupe_seconds=600, push_hold_ms=0)
    assert [cache_key[-1] for cache_key in views._COUNT_NAMES] == [102, 103, 104]
