"""The flusher loses and doubles nothing: killed between any two steps, or racing another flusher."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from functools import partial

import httpx
from sqlalchemy import text

from mediagraph.dataloaders.views import live_view_totals, view_buffer
from mediagraph.ids import from_global_id
from mediagraph.workers import views as worker
from tests.support.factories import create_media, create_user, record_views, unique_name

LONG_LEASE_MS = 60_000


async def _media_ids(http, gql, count):
    token, _ = await create_user(gql)
    return [from_global_id((await create_media(http, token=token))["id"])[1] for _ in range(count)]


async def _count_views(services, media_id, views):
    buffer = view_buffer(services)
    prefix = unique_name("viewer")
    outcomes = [
        await buffer.count_view(media_id, f"{prefix}-{n}", dedupe_seconds=600, push_hold_ms=1) for n in range(views)
    ]
    return sum(1 for outcome in outcomes if outcome)


async def _durable(services, media_ids):
    async with services.databases.main_session() as session:
        rows = await session.execute(
            text("SELECT media_id, view_count FROM media_view_count WHERE media_id = ANY(:ids)"), {"ids": media_ids}
        )
        counts = dict(rows.all())
    return {media_id: counts.get(media_id, 0) for media_id in media_ids}


async def _live(services, media_ids):
    return await live_view_totals(services, media_ids)


async def _let_lease_run_out(services, batch):
    # As if the lease time had passed: the batch's expiry moves into the past.
    await services.redis.zadd(view_buffer(services).batches_key(batch.bucket), {str(batch.id): 0})


async def _drain(services):
    buffer = view_buffer(services)
    for bucket in range(services.settings.view_buckets):
        for batch_id in await buffer.in_flight(bucket):
            await services.redis.zadd(buffer.batches_key(bucket), {str(batch_id): 0})
    await worker.flush(services)


async def test_batch_of_a_flusher_that_died_after_taking_it_is_applied_once(http, gql, services):
    (media_id,) = await _media_ids(http, gql, 1)
    await _count_views(services, media_id, 10)
    buffer = view_buffer(services)
    bucket = buffer.bucket_of(media_id)

    batch = await buffer.take(bucket, lease_ms=LONG_LEASE_MS)  # ... and the flusher dies here
    assert batch is not None
    assert batch.deltas[media_id] == 10
    assert await _live(services, [media_id]) == {media_id: 10}
    assert batch.id not in {claimed.id for claimed in await buffer.reclaim(bucket, lease_ms=LONG_LEASE_MS)}

    await _let_lease_run_out(services, batch)
    await worker.flush_bucket(services, bucket)
    assert await _durable(services, [media_id]) == {media_id: 10}
    assert batch.id not in await buffer.in_flight(bucket)
    assert await _live(services, [media_id]) == {media_id: 10}


async def test_batch_of_a_flusher_that_died_after_applying_it_is_not_applied_again(http, gql, services):
    (media_id,) = await _media_ids(http, gql, 1)
    await _count_views(services, media_id, 7)
    buffer = view_buffer(services)
    bucket = buffer.bucket_of(media_id)

    batch = await buffer.take(bucket, lease_ms=LONG_LEASE_MS)
    assert batch is not None
    assert await worker.apply_batch(services, batch) is True  # ... and the flusher dies before dropping it
    assert await _durable(services, [media_id]) == {media_id: 7}
    # Counted once while it sits in both places: the in-flight copy is known to be applied.
    assert await _live(services, [media_id]) == {media_id: 7}

    await _let_lease_run_out(services, batch)
    await worker.flush_bucket(services, bucket)
    assert await worker.apply_batch(services, batch) is False
    assert batch.id not in await buffer.in_flight(bucket)
    assert await _durable(services, [media_id]) == {media_id: 7}
    assert await _live(services, [media_id]) == {media_id: 7}


async def test_batch_of_a_flusher_that_died_mid_transaction_is_applied_once(http, gql, services):
    (media_id,) = await _media_ids(http, gql, 1)
    await _count_views(services, media_id, 5)
    buffer = view_buffer(services)
    bucket = buffer.bucket_of(media_id)
    batch = await buffer.take(bucket, lease_ms=LONG_LEASE_MS)
    assert batch is not None

    async with services.databases.main_session() as blocker:
        # Holding the media row makes the apply wait inside its transaction, where it is killed.
        await blocker.execute(text("SELECT id FROM media WHERE id = :id FOR UPDATE"), {"id": media_id})
        applying = asyncio.create_task(worker.apply_batch(services, batch))
        await _until_waiting_on_a_lock(services)
        applying.cancel()
        await asyncio.gather(applying, return_exceptions=True)
        await blocker.rollback()
    async with services.databases.main_session() as session:
        recorded = await session.scalar(
            text("SELECT count(*) FROM media_view_batches WHERE id = :id"), {"id": batch.id}
        )
    assert recorded == 0
    assert await _live(services, [media_id]) == {media_id: 5}

    await _let_lease_run_out(services, batch)
    await worker.flush_bucket(services, bucket)
    assert await _durable(services, [media_id]) == {media_id: 5}


async def _until_waiting_on_a_lock(services):
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(500):
        async with services.databases.main_session() as session:
            if await session.scalar(query):
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the apply never blocked")


async def test_two_flushers_racing_while_views_arrive_count_every_view_once(http, gql, services, settings):
    media_ids = await _media_ids(http, gql, 6)
    # A lease far shorter than an apply: each flusher keeps reclaiming the other's batches.
    hasty = dataclasses.replace(services, settings=settings.model_copy(update={"view_flush_lease_seconds": 0.002}))
    counted = dict.fromkeys(media_ids, 0)
    done = asyncio.Event()

    async def viewers():
        rng = random.Random(3)
        for _ in range(30):
            media_id = rng.choice(media_ids)
            counted[media_id] += await _count_views(services, media_id, rng.randint(1, 12))
            await asyncio.sleep(0)
        done.set()

    async def flusher():
        rounds = 0
        while not done.is_set() or rounds < 3:
            rounds += 1
            await worker.flush(hasty)

    await asyncio.gather(viewers(), flusher(), flusher())
    await _drain(services)
    assert await _durable(services, media_ids) == counted
    assert await _live(services, media_ids) == counted
    assert sum(counted.values()) > 0


async def test_worker_process_killed_again_and_again_loses_and_doubles_nothing(http, gql, services, live_servers):
    media_ids = await _media_ids(http, gql, 4)
    environment = {"MEDIAGRAPH_VIEW_FLUSH_INTERVAL_SECONDS": "0.01", "MEDIAGRAPH_VIEW_FLUSH_LEASE_SECONDS": "1"}
    counted = dict.fromkeys(media_ids, 0)
    rng = random.Random(11)

    async def more_views():
        for _ in range(20):
            media_id = rng.choice(media_ids)
            counted[media_id] += await _count_views(services, media_id, rng.randint(1, 20))

    process = live_servers.spawn("worker", "views", **environment)
    try:
        for _ in range(4):
            before = sum((await _durable(services, media_ids)).values())
            await more_views()
            await _until(partial(_flushed_more_than, services, media_ids, before))  # it is up and flushing
            await more_views()
            await asyncio.sleep(rng.uniform(0, 0.1))
            process.kill()  # SIGKILL, wherever it was
            process.wait()
            process = live_servers.spawn("worker", "views", **environment)
        await _until(partial(_flushed_all, services, counted))
    finally:
        process.terminate()
        process.wait()
    assert await _durable(services, media_ids) == counted
    assert await _live(services, media_ids) == counted


async def _flushed_more_than(services, media_ids, total):
    return sum((await _durable(services, media_ids)).values()) > total


async def _flushed_all(services, counted):
    return await _durable(services, list(counted)) == counted


async def _until(condition, attempts=1200):
    for _ in range(attempts):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never became true")


async def test_serve_runs_the_views_worker_by_default(http, gql, services, live_servers):
    base = live_servers.start(MEDIAGRAPH_VIEW_FLUSH_INTERVAL_SECONDS="0.1", MEDIAGRAPH_VIEW_SYNC_INTERVAL_SECONDS="0.1")
    server = live_servers.processes[-1]
    try:
        token, _ = await create_user(gql)
        media = await create_media(http, token=token)
        async with httpx.AsyncClient(base_url=base) as api:
            assert await record_views(api, media_id=media["id"], count=6) == 6
        media_id = from_global_id(media["id"])[1]
        await _until(partial(_synced, services, media_id, 6))
    finally:
        # Its workers would flush and sync under the other tests' feet.
        server.terminate()
        server.wait()


async def _synced(services, media_id, views):
    async with services.databases.main_session() as session:
        return await session.scalar(text("SELECT view_count FROM media WHERE id = :id"), {"id": media_id}) == views
