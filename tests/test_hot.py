"""Daily hot media kept from the engagement stream by the `hot` worker, checked against brute force."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from mediagraph.events import APPEND_CHUNK, EngagementEvent, EngagementKind, publish_engagement, publish_engagements
from mediagraph.ids import decode_id, snowflake_floor, to_global_id
from mediagraph.keys.events import engagement_stream
from mediagraph.keys.hot import day_scores, day_state
from mediagraph.resolvers.hot.days import media_day, rebuild_day, scores_from_database
from mediagraph.workers import hot as worker
from mediagraph.workers import views as views_worker
from tests.support.factories import add_comment, create_media, create_user, record_views
from tests.support.feeds import posting_days_ago

HOT = "query($date: Date) { hotMedia(date: $date) { date final entries { rank score media { id } } } }"
HISTORY = "query($days: Int!) { hotMediaHistory(days: $days) { date final entries { rank } } }"
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { likeCount } }"
UNLIKE = "mutation($id: ID!) { unlikeMedia(mediaId: $id) { likeCount } }"
DELETE_COMMENT = "mutation($id: ID!) { deleteComment(id: $id) { removed } }"
DELETE_MEDIA = "mutation($id: ID!) { deleteMedia(id: $id) { id } }"
WEIGHT = {EngagementKind.LIKE: 3, EngagementKind.COMMENT: 2, EngagementKind.VIEW: 1}


@pytest.fixture(scope="module")
async def owner(gql) -> str:
    token, _ = await create_user(gql)
    return token


@pytest.fixture
async def today(services):
    """Today's board, open and empty, so each test sees only its own media."""
    await worker.ensure_group(services)
    await drain(services)
    day = datetime.now(UTC).date()
    await services.redis.delete(day_scores(services.keys, day), day_state(services.keys, day))
    await worker.open_live_days(services)
    # Opening recomputed what earlier tests left in the database; count only this test's events.
    await services.redis.delete(day_scores(services.keys, day))
    return day


async def drain(services, consumer: str = "test") -> None:
    """Run the worker's steps until the stream has nothing left for the group."""
    for _ in range(100):
        if await worker.consume(services, consumer=consumer, block_ms=None) == 0:
            return
    raise AssertionError("the hot worker never caught up")


async def media_of(http, owner: str, count: int) -> list[str]:
    return [(await create_media(http, token=owner))["id"] for _ in range(count)]


async def publish(services, kind: EngagementKind, media: str, delta: int = 1) -> None:
    await publish_engagement(services.redis, services.keys, EngagementEvent(kind, decode_id(media, "Media"), delta))


def brute_force_top(events: list[tuple[EngagementKind, str, int]]) -> list[tuple[str, float]]:
    scores: Counter[str] = Counter()
    for kind, media, delta in events:
        scores[media] += WEIGHT[kind] * delta
    # Ties: the newer media (larger snowflake) first.
    ranked = sorted(scores.items(), key=lambda item: (-item[1], -decode_id(item[0], "Media")))
    return [(media, float(score)) for media, score in ranked if score > 0][:10]


async def hot_list(gql, day) -> list[tuple[str, float]]:
    data = (await gql.ok(HOT, {"date": day.isoformat()}))["hotMedia"]
    assert [entry["rank"] for entry in data["entries"]] == list(range(1, len(data["entries"]) + 1))
    return [(entry["media"]["id"], entry["score"]) for entry in data["entries"]]


async def test_hot_media_follow_engagement_events_like_a_brute_force_count(gql, http, services, owner, today):
    media = await media_of(http, owner, 14)
    rng = random.Random(11)
    events: list[tuple[EngagementKind, str, int]] = []
    for _ in range(300):
        kind = rng.choice(list(EngagementKind))
        target = rng.choice(media)
        # Likes and comments are also taken back; views only add up.
        delta = rng.choice([1, 1, 1, -1]) if kind is not EngagementKind.VIEW else rng.randint(1, 3)
        events.append((kind, target, delta))
        await publish(services, kind, target, delta)
        if len(events) % 100 == 0:
            await drain(services)
            assert await hot_list(gql, today) == brute_force_top(events)
    assert len(await hot_list(gql, today)) == 10


async def test_a_like_taken_back_leaves_no_trace(gql, http, services, owner, today):
    liked, viewed = await media_of(http, owner, 2)
    await publish(services, EngagementKind.LIKE, liked)
    await publish(services, EngagementKind.VIEW, viewed)
    await drain(services)
    assert await hot_list(gql, today) == [(liked, 3.0), (viewed, 1.0)]
    await publish(services, EngagementKind.LIKE, liked, -1)
    await drain(services)
    assert await hot_list(gql, today) == [(viewed, 1.0)]


async def test_only_media_created_that_day_count_and_deleted_media_drop_out(gql, http, services, owner, today):
    (kept,) = await media_of(http, owner, 1)
    older_day = today - timedelta(days=3)
    older_media = snowflake_floor(datetime.combine(older_day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=5))
    never_uploaded = snowflake_floor(datetime.now(UTC)) + 12345
    for media_id in (older_media, never_uploaded):
        await publish_engagement(services.redis, services.keys, EngagementEvent(EngagementKind.LIKE, media_id, 1))
    await publish(services, EngagementKind.COMMENT, kept)
    await drain(services)
    assert await hot_list(gql, today) == [(kept, 2.0)]
    assert await hot_list(gql, older_day) == []
    assert media_day(never_uploaded) == today


async def test_an_event_claimed_from_a_dead_consumer_counts_once(gql, http, services, owner, today):
    (media,) = await media_of(http, owner, 1)
    for _ in range(5):
        await publish(services, EngagementKind.VIEW, media)
    stream = engagement_stream(services.keys)
    # A consumer takes the events and dies before applying them.
    taken = await services.redis.xreadgroup(worker.GROUP, "dead", {stream: ">"}, count=100)
    messages = taken[0][1]
    assert len(messages) == 5
    assert await worker.consume(services, consumer="alive", block_ms=None, claim_idle_ms=0) == 5
    assert await hot_list(gql, today) == [(media, 5.0)]
    # The dead consumer was only slow: its late attempt finds the events acknowledged.
    assert await worker.apply(services, messages) == 0
    pending = await services.redis.xpending(stream, worker.GROUP)
    assert pending["pending"] == 0
    assert await hot_list(gql, today) == [(media, 5.0)]


async def test_many_events_are_appended_at_once_in_order(services):
    await worker.ensure_group(services)
    stream = engagement_stream(services.keys)
    [(last, _)] = await services.redis.xrevrange(stream, count=1) or [(b"0-0", None)]
    events = [EngagementEvent(EngagementKind.VIEW, media, media % 7 + 1) for media in range(1, 2 * APPEND_CHUNK + 42)]
    await publish_engagements(services.redis, services.keys, events)
    appended = await services.redis.xrange(stream, min=f"({last.decode()}")
    assert [EngagementEvent.from_fields(fields) for _, fields in appended] == events
    # Those media were never uploaded: their events are dropped, not kept pending.
    await drain(services)
    assert (await services.redis.xpending(stream, worker.GROUP))["pending"] == 0


async def test_a_steady_trickle_of_events_is_applied_in_batches(gql, http, services, owner, today, monkeypatch):
    (media,) = await media_of(http, owner, 1)
    steps: list[int] = []
    consume = worker.consume

    async def counted(*args, **kwargs) -> int:
        taken = await consume(*args, **kwargs)
        if taken:
            steps.append(taken)
        return taken

    monkeypatch.setattr(worker, "consume", counted)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    running = asyncio.create_task(worker.run(services, stop))
    try:
        # 40 events 20 ms apart: a blocking read alone would return with nearly every one.
        for _ in range(40):
            await publish(services, EngagementKind.VIEW, media)
            await asyncio.sleep(0.02)
        for _ in range(100):
            if await hot_list(gql, today) == [(media, 40.0)]:
                break
            await asyncio.sleep(0.05)
        assert await hot_list(gql, today) == [(media, 40.0)]
        elapsed = loop.time() - started
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert sum(steps) == 40
    # A step at most every STEP_SECONDS (however slow the machine made the publishing),
    # plus the one the first event starts and one at the end.
    assert len(steps) <= 2 + elapsed / worker.STEP_SECONDS
    assert elapsed / worker.STEP_SECONDS < 30, "too slow to tell batches from single events"


async def test_mediagraph_worker_hot_keeps_scores_as_a_separate_process(
    gql, http, services, owner, today, live_servers
):
    media = await media_of(http, owner, 3)
    process = live_servers.spawn("worker", "hot")
    try:
        for target, likes in zip(media, (1, 3, 2), strict=True):
            for _ in range(likes):
                await publish(services, EngagementKind.LIKE, target)
        expected = [(media[1], 9.0), (media[2], 6.0), (media[0], 3.0)]
        for _ in range(300):
            if await hot_list(gql, today) == expected:
                break
            await asyncio.sleep(0.1)
        assert await hot_list(gql, today) == expected
    finally:
        process.terminate()
        process.wait(timeout=10)


async def _live_scores(services, day) -> dict[int, int]:
    members = await services.redis.zrange(day_scores(services.keys, day), 0, -1, withscores=True)
    return {int(member): int(score) for member, score in members if score > 0}


async def test_hot_scores_match_a_recomputation_from_the_database(gql, http, services, owner, today):
    # Start from the database's view of today, then engage through the public API only.
    await rebuild_day(services, today)
    media = await media_of(http, owner, 3)
    fans = [token for token, _ in [await create_user(gql) for _ in range(3)]]
    plan = {media[0]: (3, 1, 2), media[1]: (1, 4, 0), media[2]: (0, 2, 7)}  # likes, comments, views
    for target, (likes, comments, views) in plan.items():
        for fan in fans[:likes]:
            await gql.ok(LIKE, {"id": target}, token=fan)
        for n in range(comments):
            await add_comment(gql, token=fans[n % len(fans)], media_id=target, content=f"comment {n}")
        await record_views(http, media_id=target, count=views)
    # Taken back: a like and a comment.
    await gql.ok(UNLIKE, {"id": media[0]}, token=fans[0])
    removed = await add_comment(gql, token=owner, media_id=media[1], content="soon gone")
    await gql.ok(DELETE_COMMENT, {"id": removed["id"]}, token=owner)
    await views_worker.flush(services)
    await drain(services)

    expected = {
        decode_id(target, "Media"): 3 * (likes - (target == media[0])) + 2 * comments + views
        for target, (likes, comments, views) in plan.items()
    }
    live = await _live_scores(services, today)
    assert {media_id: live.get(media_id) for media_id in expected} == expected
    assert live == {
        media_id: score for media_id, score in (await scores_from_database(services, today)).items() if score > 0
    }

    # Redis loses the day: the recomputation gives the same board, and later events add to it.
    await services.redis.delete(day_scores(services.keys, today), day_state(services.keys, today))
    await hot_list(gql, today)
    assert await _live_scores(services, today) == live
    await gql.ok(LIKE, {"id": media[2]}, token=fans[0])
    await drain(services)
    assert (await _live_scores(services, today))[decode_id(media[2], "Media")] == expected[
        decode_id(media[2], "Media")
    ] + 3


async def test_a_finished_day_keeps_its_top_10_and_stops_changing(gql, http, services, owner, today):
    media = await media_of(http, owner, 12)
    for n, target in enumerate(media, start=1):
        await publish(services, EngagementKind.VIEW, target, n)
    await drain(services)
    before = await hot_list(gql, today)
    tomorrow_late = datetime.combine(today + timedelta(days=1), datetime.min.time(), tzinfo=UTC) + timedelta(hours=2)
    try:
        assert today in await worker.finalize_due_days(services, now=tomorrow_late)
        assert await services.redis.zcard(day_scores(services.keys, today)) == 10
        await publish(services, EngagementKind.LIKE, media[0])
        await drain(services)
        data = (await gql.ok(HOT, {"date": today.isoformat()}))["hotMedia"]
        assert data["final"] is True
        assert (
            await hot_list(gql, today) == before == [(m, float(n)) for n, m in reversed(list(enumerate(media, 1)))][:10]
        )
        ttl_days = await services.redis.pttl(day_scores(services.keys, today)) / 86_400_000
        assert 6 < ttl_days <= 7.1
    finally:
        await services.redis.delete(day_scores(services.keys, today), day_state(services.keys, today))


async def test_history_lists_the_kept_days_today_first(gql, services):
    days = (await gql.ok(HISTORY, {"days": 7}))["hotMediaHistory"]
    today = datetime.now(UTC).date()
    assert [day["date"] for day in days] == [(today - timedelta(days=n)).isoformat() for n in range(7)]
    assert all(day["final"] for day in days[2:])
    for days_asked in (0, 8):
        assert await gql.error_code(HISTORY, {"days": days_asked}) == "BAD_USER_INPUT"
    for day in (today - timedelta(days=7), today + timedelta(days=1)):
        assert await gql.error_code(HOT, {"date": day.isoformat()}) == "BAD_USER_INPUT"


async def test_rebuilding_a_past_day_keeps_only_its_top_10(services):
    day = datetime.now(UTC).date() - timedelta(days=2)
    await rebuild_day(services, day)
    assert await services.redis.get(day_state(services.keys, day)) == b"final"


HOT_DAY_ID = "query($date: Date) { hotMedia(date: $date) { id date } }"
NODE = "query($id: ID!) { node(id: $id) { __typename id ... on HotMediaDay { date entries { media { id } } } } }"


async def test_a_hot_media_day_is_a_node_named_by_its_date(gql, http, services, owner, today):
    (liked,) = await media_of(http, owner, 1)
    await publish(services, EngagementKind.LIKE, liked)
    await drain(services)
    day = (await gql.ok(HOT_DAY_ID, {"date": today.isoformat()}))["hotMedia"]
    assert day["id"] == (await gql.ok(HOT_DAY_ID))["hotMedia"]["id"]
    found = (await gql.ok(NODE, {"id": day["id"]}))["node"]
    assert found == {
        "__typename": "HotMediaDay",
        "id": day["id"],
        "date": today.isoformat(),
        "entries": [{"media": {"id": liked}}],
    }

    long_ago = to_global_id("HotMediaDay", 20200101)
    not_a_date = to_global_id("HotMediaDay", 20261341)
    for missing in (long_ago, not_a_date):
        assert (await gql.ok(NODE, {"id": missing}))["node"] is None


async def test_deleting_a_top_media_refills_today_to_10_as_soon_as_the_delete_commits(gql, http, services, owner, today):
    media = await media_of(http, owner, 12)
    for n, target in enumerate(media, start=1):
        await publish(services, EngagementKind.VIEW, target, n)
    await drain(services)
    ranked = [(m, float(n)) for n, m in reversed(list(enumerate(media, 1)))]
    assert await hot_list(gql, today) == ranked[:10]
    for deleted in (media[-1], media[5]):
        await gql.ok(DELETE_MEDIA, {"id": deleted}, token=owner)
        ranked = [entry for entry in ranked if entry[0] != deleted]
        assert await hot_list(gql, today) == ranked[:10]
    # The board itself no longer holds them: other processes read it right too.
    board = await services.redis.zrange(day_scores(services.keys, today), 0, -1)
    assert {decode_id(m, "Media") for m in (media[-1], media[5])}.isdisjoint({int(member) for member in board})


async def test_deleting_a_media_of_a_final_day_refills_its_top_10_from_the_database(gql, http, services, owner):
    day = datetime.now(UTC).date() - timedelta(days=2)
    with posting_days_ago(services, 2):
        media = await media_of(http, owner, 11)
    fans = [token for token, _ in [await create_user(gql) for _ in range(len(media))]]
    for n, target in enumerate(media, start=1):
        for fan in fans[:n]:
            await gql.ok(LIKE, {"id": target}, token=fan)
    await services.redis.delete(day_scores(services.keys, day), day_state(services.keys, day))
    ranked = [(m, 3.0 * n) for n, m in reversed(list(enumerate(media, 1)))]
    data = (await gql.ok(HOT, {"date": day.isoformat()}))["hotMedia"]
    assert data["final"] is True
    assert await hot_list(gql, day) == ranked[:10]
    assert await services.redis.zcard(day_scores(services.keys, day)) == 10
    await gql.ok(DELETE_MEDIA, {"id": media[-1]}, token=owner)
    assert await hot_list(gql, day) == ranked[1:11]
