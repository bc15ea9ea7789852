"""Lists sorted by views or likes: sessions in the cursor, omitted items, exactly-once delivery."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mediagraph.dataloaders.views import view_buffer
from mediagraph.db.media import with_tags
from mediagraph.db.reads import MAX_BATCHERS, ReadPool, SameRead
from mediagraph.db.views import pages
from mediagraph.ids import EPOCH_MS, NODE_BITS, SEQUENCE_BITS, from_global_id
from mediagraph.keys.paging import PageSessions
from mediagraph.resolvers.media import TagMatch
from mediagraph.resolvers.views.pagination import MediaSort, SessionCursor, filter_signature
from mediagraph.workers import views as worker
from tests.support.factories import create_media, create_user, record_views, unique_name

RANKED = """
query($tags: [String!], $sort: MediaSort!, $first: Int, $after: String) {
  mediaList(tags: $tags, sort: $sort, first: $first, after: $after) {
    edges { cursor node { id viewCount likeCount } }
    omitted { id viewCount likeCount }
    pageInfo { hasNextPage endCursor }
  }
}
"""
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { id } }"
UNLIKE = "mutation($id: ID!) { unlikeMedia(mediaId: $id) { id } }"
RETAG = "mutation($id: ID!, $tags: [String!]) { updateMedia(id: $id, tags: $tags) { id } }"


async def _page(gql, tag, *, sort="VIEWS", first=2, after=None):
    variables = {"tags": [tag], "sort": sort, "first": first, "after": after}
    return (await gql.ok(RANKED, variables))["mediaList"]


def _ids(page):
    return [edge["node"]["id"] for edge in page["edges"]]


def _omitted(page):
    return [item["id"] for item in page["omitted"]]


async def _settle(services):
    await worker.flush(services)
    await worker.sync(services)


async def test_seed_example_reports_the_media_that_jumped_above_the_cursor(http, gql, services):
    token, _ = await create_user(gql)
    tag = unique_name("seed")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(5)]
    for media_id, views in zip(media, [100, 99, 98, 97, 96], strict=True):
        await record_views(http, media_id=media_id, count=views)
    await _settle(services)

    first = await _page(gql, tag)
    assert _ids(first) == media[:2]
    assert first["omitted"] == []
    assert first["pageInfo"]["hasNextPage"] is True

    # Media 4 and 5 jump to 200 and 199 views.
    await record_views(http, media_id=media[3], count=103)
    await record_views(http, media_id=media[4], count=103)
    await _settle(services)

    second = await _page(gql, tag, after=first["pageInfo"]["endCursor"])
    assert _ids(second) == [media[2]]
    assert second["omitted"] == [
        {"id": media[3], "viewCount": 200, "likeCount": 0},
        {"id": media[4], "viewCount": 199, "likeCount": 0},
    ]
    assert second["pageInfo"]["hasNextPage"] is False


@pytest.mark.parametrize("seed", [20261123, 7, 42])
async def test_every_media_is_delivered_exactly_once_while_counts_move(http, gql, services, seed):
    rng = random.Random(seed)
    tag = unique_name("random")
    owner, _ = await create_user(gql)
    fans = [(await create_user(gql))[0] for _ in range(4)]
    media = [(await create_media(http, token=owner, tags=[tag]))["id"] for _ in range(16)]
    for media_id in media:
        await record_views(http, media_id=media_id, count=rng.randint(0, 4))
    await _settle(services)

    sessions = {sort: {"after": None, "delivered": [], "done": False} for sort in ("VIEWS", "LIKES")}
    uploads = 0
    while not all(session["done"] for session in sessions.values()):
        action = rng.random()
        if action < 0.3:
            await record_views(http, media_id=rng.choice(media), count=rng.randint(1, 12))
        elif action < 0.55:
            await gql.ok(rng.choice([LIKE, UNLIKE]), {"id": rng.choice(media)}, token=rng.choice(fans))
        elif action < 0.7:
            await _settle(services)
        elif action < 0.75 and uploads < 4:
            uploads += 1
            media.append((await create_media(http, token=owner, tags=[tag]))["id"])
        else:
            sort, session = rng.choice([(sort, s) for sort, s in sessions.items() if not s["done"]])
            first = rng.randint(1, 4)
            if session["after"] is not None and rng.random() < 0.2:
                # A retry: the first answer is lost on the way, the cursor is sent again.
                await _page(gql, tag, sort=sort, first=first, after=session["after"])
            page = await _page(gql, tag, sort=sort, first=first, after=session["after"])
            session["delivered"] += _ids(page) + _omitted(page)
            session["after"] = page["pageInfo"]["endCursor"]
            session["done"] = not page["pageInfo"]["hasNextPage"]
            # What exists when the session ends is what it must have delivered.
            session["expected"] = sorted(media)

    for session in sessions.values():
        assert len(session["delivered"]) == len(set(session["delivered"]))
        assert sorted(session["delivered"]) == session["expected"]


async def test_every_media_is_delivered_exactly_once_with_syncs_running_alongside(http, gql, services):
    rng = random.Random(5)
    tag = unique_name("busy")
    owner, _ = await create_user(gql)
    media = [(await create_media(http, token=owner, tags=[tag]))["id"] for _ in range(20)]
    raw_ids = {media_id: from_global_id(media_id)[1] for media_id in media}
    uploading = asyncio.Lock()
    no_more_uploads = asyncio.Event()
    paging_done = asyncio.Event()
    buffer = view_buffer(services)

    async def churn():
        uploads = 0
        while not paging_done.is_set():
            for _ in range(rng.randint(1, 10)):
                media_id = rng.choice(media)
                await buffer.count_view(raw_ids[media_id], unique_name("v"), dedupe_seconds=60, push_hold_ms=1)
            async with uploading:
                if uploads < 4 and not no_more_uploads.is_set():
                    uploads += 1
                    created = (await create_media(http, token=owner, tags=[tag]))["id"]
                    raw_ids[created] = from_global_id(created)[1]
                    media.append(created)
            await _settle(services)

    async def page_through():
        delivered, after = [], None
        try:
            while True:
                # Uploads land between pages (so what is due at the end is known); counts
                # and syncs keep moving during the requests themselves.
                async with uploading:
                    page = await _page(gql, tag, first=1, after=after)
                    if not page["pageInfo"]["hasNextPage"]:
                        no_more_uploads.set()
                delivered += _ids(page) + _omitted(page)
                after = page["pageInfo"]["endCursor"]
                if no_more_uploads.is_set():
                    return delivered
        finally:
            paging_done.set()

    _, delivered = await asyncio.gather(churn(), page_through())
    assert len(delivered) == len(set(delivered))
    assert sorted(delivered) == sorted(media)


async def test_first_page_writes_nothing(http, gql, count_queries):
    token, _ = await create_user(gql)
    tag = unique_name("cheap")
    for _ in range(3):
        await create_media(http, token=token, tags=[tag])
    count_queries.clear()
    page = await _page(gql, tag, first=2)
    assert len(page["edges"]) == 2
    # One statement: the page with the sync generation and each row's counts.
    assert len(count_queries) == 1, count_queries
    assert not [sql for sql in count_queries if sql.split()[0].upper() in {"INSERT", "UPDATE", "DELETE"}]


async def test_repeating_a_cursor_answers_the_same_page_and_paging_goes_on(http, gql):
    token, _ = await create_user(gql)
    tag = unique_name("retry")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(7)]
    newest_first = list(reversed(media))
    first = await _page(gql, tag, first=2)
    second = await _page(gql, tag, first=2, after=first["pageInfo"]["endCursor"])
    again = await _page(gql, tag, first=2, after=first["pageInfo"]["endCursor"])
    assert _ids(second) == _ids(again) == newest_first[2:4]
    # Going on from the middle of a page forgets what that page served after it.
    middle = await _page(gql, tag, first=3, after=again["edges"][0]["cursor"])
    assert _ids(middle) == newest_first[3:6]
    last = await _page(gql, tag, first=3, after=middle["pageInfo"]["endCursor"])
    assert _ids(last) == newest_first[6:]
    assert last["pageInfo"]["hasNextPage"] is False


async def test_a_media_uploaded_during_a_session_is_delivered(http, gql, services):
    token, _ = await create_user(gql)
    tag = unique_name("upload")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(3)]
    first = await _page(gql, tag, first=2)
    assert _ids(first) == [media[2], media[1]]
    # No views, newest id: it sorts above the cursor among the media without views.
    late = (await create_media(http, token=token, tags=[tag]))["id"]
    second = await _page(gql, tag, first=2, after=first["pageInfo"]["endCursor"])
    assert _ids(second) == [media[0]]
    assert _omitted(second) == [late]


async def test_a_media_retagged_into_the_list_during_a_session_is_delivered(http, gql, services):
    token, _ = await create_user(gql)
    tag = unique_name("retag")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(3)]
    outsider = (await create_media(http, token=token, tags=["elsewhere"]))["id"]
    first = await _page(gql, tag, first=2)
    await gql.ok(RETAG, {"id": outsider, "tags": [tag]}, token=token)
    await _settle(services)
    second = await _page(gql, tag, first=2, after=first["pageInfo"]["endCursor"])
    assert _ids(second) == [media[0]]
    assert _omitted(second) == [outsider]


async def test_a_media_that_fell_below_the_cursor_is_not_served_twice(http, gql, services):
    owner, _ = await create_user(gql)
    fans = [(await create_user(gql))[0] for _ in range(2)]
    tag = unique_name("fall")
    a, b, c = [(await create_media(http, token=owner, tags=[tag]))["id"] for _ in range(3)]
    for fan in fans:
        await gql.ok(LIKE, {"id": a}, token=fan)
    await gql.ok(LIKE, {"id": b}, token=fans[0])
    await _settle(services)
    first = await _page(gql, tag, sort="LIKES", first=1)
    assert _ids(first) == [a]
    for fan in fans:
        await gql.ok(UNLIKE, {"id": a}, token=fan)
    await _settle(services)
    rest = await _page(gql, tag, sort="LIKES", first=5, after=first["pageInfo"]["endCursor"])
    assert _ids(rest) == [b, c]
    assert rest["omitted"] == []


async def test_a_long_omitted_list_is_cut_and_continued(http, gql, services, settings):
    token, _ = await create_user(gql)
    tag = unique_name("flood")
    count = settings.max_page_size + 3
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(count)]
    first = await _page(gql, tag, first=1)
    assert _ids(first) == [media[-1]]
    for media_id in media[:-1]:
        await record_views(http, media_id=media_id, count=1)
    await _settle(services)

    second = await _page(gql, tag, first=1, after=first["pageInfo"]["endCursor"])
    assert second["edges"] == []
    assert len(second["omitted"]) == settings.max_page_size
    assert second["pageInfo"]["hasNextPage"] is True
    third = await _page(gql, tag, first=1, after=second["pageInfo"]["endCursor"])
    assert third["edges"] == []
    assert len(third["omitted"]) == 2
    assert third["pageInfo"]["hasNextPage"] is False
    assert sorted(_omitted(second) + _omitted(third)) == sorted(media[:-1])


def _session_key(services, settings, cursor, *, sort="VIEWS"):
    decoded = SessionCursor.decode(settings.secret_key, MediaSort[sort], cursor)
    return page_sessions_of(services).delivered_key(decoded.session_id, sort, decoded.filter)


def page_sessions_of(services):
    return PageSessions(services.redis, services.keys, ttl_seconds=services.settings.page_session_ttl_seconds)


async def test_a_session_lives_in_redis_with_its_ttl_and_later_pages_write_nothing(
    http, gql, services, settings, count_queries
):
    token, _ = await create_user(gql)
    tag = unique_name("soft")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(5)]
    first = await _page(gql, tag, first=2)
    count_queries.clear()
    second = await _page(gql, tag, first=2, after=first["pageInfo"]["endCursor"])
    assert _ids(second) == [media[2], media[1]]
    # One statement: the page with its counts, the omitted candidates and the generation.
    assert len(count_queries) == 1, count_queries
    assert all(sql.lstrip().upper().startswith("SELECT") for sql in count_queries), count_queries
    key = _session_key(services, settings, second["pageInfo"]["endCursor"])
    delivered = await services.redis.zrange(key, 0, -1, withscores=True)
    assert sorted((int(member), int(score)) for member, score in delivered) == sorted(
        (from_global_id(media_id)[1], seq) for seq, media_id in enumerate([media[4], media[3], media[2], media[1]])
    )
    assert 0 < await services.redis.ttl(key) <= settings.page_session_ttl_seconds


@pytest.mark.parametrize("sort", ["VIEWS", "LIKES"])
async def test_a_session_gone_from_redis_answers_cursor_expired(http, gql, services, settings, sort):
    token, _ = await create_user(gql)
    tag = unique_name("gone")
    for _ in range(5):
        await create_media(http, token=token, tags=[tag])
    first = await _page(gql, tag, sort=sort, first=1)
    second = await _page(gql, tag, sort=sort, first=1, after=first["pageInfo"]["endCursor"])
    # Expired, evicted, or lost with a Redis restart: the key is gone either way.
    assert await services.redis.delete(_session_key(services, settings, second["pageInfo"]["endCursor"], sort=sort))
    variables = {"tags": [tag], "sort": sort, "first": 1, "after": second["pageInfo"]["endCursor"]}
    response = await gql(RANKED, variables)
    [error] = response["errors"]
    assert error["extensions"]["code"] == "CURSOR_EXPIRED"
    assert "start again without `after`" in error["message"]
    assert response["data"] is None
    # Starting again works, and a new session pages on.
    again = await _page(gql, tag, sort=sort, first=1)
    assert len(_ids(await _page(gql, tag, sort=sort, first=1, after=again["pageInfo"]["endCursor"]))) == 1


async def test_concurrent_requests_of_one_session_never_both_serve_an_item(http, gql, services):
    token, _ = await create_user(gql)
    tag = unique_name("race")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(12)]
    newest_first = list(reversed(media))
    # One view each (the order stays newest first) and a sync: no media counts as changed
    # since the pages' generation, so no request has anything to report as omitted.
    for media_id in media:
        await record_views(http, media_id=media_id, count=1)
    await _settle(services)
    for _ in range(5):
        first = await _page(gql, tag, first=1)
        # A stored session's page: cursors after each of its edges.
        page = await _page(gql, tag, first=4, after=first["pageInfo"]["endCursor"])
        edges = [edge["cursor"] for edge in page["edges"]]
        answers = await asyncio.gather(
            _page(gql, tag, first=1, after=edges[0]),
            _page(gql, tag, first=1, after=edges[1]),
            _page(gql, tag, first=3, after=edges[3]),
        )
        served = [_ids(answer) + _omitted(answer) for answer in answers]
        # Each goes on from its own cursor: none serves what another serves, whatever the order.
        assert served == [newest_first[2:3], newest_first[3:4], newest_first[5:8]]


async def test_concurrent_repeats_of_a_cursor_answer_alike_and_paging_goes_on_exactly_once(http, gql, services):
    owner, _ = await create_user(gql)
    fans = [(await create_user(gql))[0] for _ in range(3)]
    tag = unique_name("twice")
    media = [(await create_media(http, token=owner, tags=[tag]))["id"] for _ in range(10)]
    for _ in range(4):
        first = await _page(gql, tag, sort="LIKES", first=3)
        # Items move between the pages: the repeats all have omitted items to report.
        for fan in fans:
            await gql.ok(LIKE, {"id": media[0]}, token=fan)
        await _settle(services)
        answers = await asyncio.gather(
            *(_page(gql, tag, sort="LIKES", first=3, after=first["pageInfo"]["endCursor"]) for _ in range(4))
        )
        # Repeats of one cursor are retries: every one answers what the first would have.
        assert all(answer == answers[0] for answer in answers)
        delivered = _ids(first) + _ids(answers[0]) + _omitted(answers[0])
        after = answers[0]["pageInfo"]["endCursor"]
        while after is not None:
            page = await _page(gql, tag, sort="LIKES", first=3, after=after)
            delivered += _ids(page) + _omitted(page)
            after = page["pageInfo"]["endCursor"] if page["pageInfo"]["hasNextPage"] else None
        assert sorted(delivered) == sorted(media)
        for fan in fans:
            await gql.ok(UNLIKE, {"id": media[0]}, token=fan)
        await _settle(services)


async def test_a_first_page_cursor_expires_with_its_session(gql, settings):
    tag = unique_name("old")
    then = datetime.now(UTC) - timedelta(seconds=settings.page_session_ttl_seconds + 60)
    old_id = (int(then.timestamp() * 1000) - EPOCH_MS) << (NODE_BITS + SEQUENCE_BITS)
    cursor = SessionCursor(old_id, 1, 0, 0, 1, filter_signature([tag], TagMatch.ALL), (1,))
    variables = {"tags": [tag], "sort": "VIEWS", "after": cursor.encode(settings.secret_key, MediaSort.VIEWS)}
    assert await gql.error_code(RANKED, variables) == "CURSOR_EXPIRED"


async def test_cursors_from_another_list_or_forged_are_refused(http, gql):
    token, _ = await create_user(gql)
    tag = unique_name("mine")
    for _ in range(3):
        await create_media(http, token=token, tags=[tag])
    cursor = (await _page(gql, tag, first=1))["pageInfo"]["endCursor"]
    cases = [
        {"tags": ["other"], "sort": "VIEWS", "after": cursor},
        {"tags": [tag], "sort": "LIKES", "after": cursor},
        {"tags": [tag], "sort": "NEWEST", "after": cursor},
        {"tags": [tag], "sort": "VIEWS", "after": cursor[:-3] + "abc"},
        {"tags": [tag], "sort": "VIEWS", "after": "%%%"},
        {"tags": [tag], "sort": "VIEWS", "first": 101},
        {"tags": [tag], "sort": "VIEWS", "first": 0},
        {"tags": ["not a tag"], "sort": "VIEWS"},
    ]
    for variables in cases:
        assert await gql.error_code(RANKED, variables) == "BAD_USER_INPUT", variables


async def test_omitted_is_empty_when_sorting_by_newest(http, gql):
    token, _ = await create_user(gql)
    tag = unique_name("newest")
    await create_media(http, token=token, tags=[tag])
    page = await _page(gql, tag, sort="NEWEST")
    assert page["omitted"] == []
    assert from_global_id(page["edges"][0]["node"]["id"])[0] == "Media"


WITH_UPLOADERS = """
query($tags: [String!], $after: String) {
  mediaList(tags: $tags, sort: VIEWS, first: 2, after: $after) {
    edges { node { id uploader { id username } } }
    omitted { id uploader { id username } }
    pageInfo { endCursor }
  }
}
"""


async def test_a_ranked_page_reads_its_items_uploaders_at_once(http, gql, services):
    tag = unique_name("uploaders")
    owners = []
    for name in ("first", "second"):
        token, user = await create_user(gql, username=unique_name(name))
        owners.append((token, {"id": user["id"], "username": user["username"]}))
    media = []
    for views, (token, owner) in zip([30, 20, 10], [owners[0], owners[1], owners[0]], strict=True):
        created = await create_media(http, token=token, tags=[tag])
        await record_views(http, media_id=created["id"], count=views)
        media.append((created["id"], owner))
    await _settle(services)

    first = (await gql.ok(WITH_UPLOADERS, {"tags": [tag]}))["mediaList"]
    assert [(edge["node"]["id"], edge["node"]["uploader"]) for edge in first["edges"]] == media[:2]

    # The third media jumps above the cursor: reported in `omitted`, with its uploader.
    await record_views(http, media_id=media[2][0], count=40)
    await _settle(services)
    after = first["pageInfo"]["endCursor"]
    second = (await gql.ok(WITH_UPLOADERS, {"tags": [tag], "after": after}))["mediaList"]
    assert second["edges"] == []
    assert [(item["id"], item["uploader"]) for item in second["omitted"]] == [media[2]]


async def test_later_pages_asked_at_once_share_one_statement_and_each_gets_its_own(http, gql, services, count_queries):
    token, _ = await create_user(gql)
    tag = unique_name("batch")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(9)]
    for media_id, views in zip(media, range(9, 0, -1), strict=True):
        await record_views(http, media_id=media_id, count=views)
    await _settle(services)
    where = with_tags([tag], all_of=True)
    raw = [from_global_id(media_id)[1] for media_id in media]
    # Positions of three sessions at different depths, two of them with a scan that still has changes ahead.
    asks = [((9 - at, raw[at]), (0, 0) if at % 2 else (1 << 40, 0)) for at in (0, 3, 6)]

    async def read(position, scan_after):
        return await pages.later_page(
            services.databases.main_reads,
            pages.RankedBy.VIEWS,
            where,
            position=position,
            scan_after=scan_after,
            limit=3,
            scan_limit=100,
        )

    alone = [await read(position, scan_after) for position, scan_after in asks]
    count_queries.clear()
    together = await asyncio.gather(*(read(position, scan_after) for position, scan_after in asks))
    assert len(count_queries) == 1, count_queries
    for mine, theirs in zip(together, alone, strict=True):
        assert [row["id"] for row in mine.rows] == [row["id"] for row in theirs.rows]
        assert mine.omitted == theirs.omitted
    assert [[row["id"] for row in read.rows] for read in together] == [raw[1:4], raw[4:7], raw[7:9]]
    scans = [read.omitted.ids if read.omitted is not None else None for read in together]
    assert [sorted(ids) if ids is not None else None for ids in scans] == [[], sorted(raw[:3]), []]


async def test_first_pages_asked_at_once_are_read_once(http, gql, services, count_queries):
    token, _ = await create_user(gql)
    tag = unique_name("tops")
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(3)]
    where = with_tags([tag], all_of=True)
    reads = services.databases.main_reads
    count_queries.clear()
    together = await asyncio.gather(*(pages.first_page(reads, pages.RankedBy.LIKES, where, limit=2) for _ in range(3)))
    assert len(count_queries) == 1, count_queries
    newest_first = [from_global_id(media_id)[1] for media_id in reversed(media)]
    assert [[row["id"] for row in read.rows] for read in together] == [newest_first[:2]] * 3


def test_a_later_pages_edge_cursors_are_each_what_its_cursor_encodes():
    base = SessionCursor(7, 40, 3, 100, 55, "signature", (), 12)
    positions = [(99, 54), (98, 53), (98, 50)]
    encoded = base.encode_edges("a secret", MediaSort.LIKES, positions)
    edges = [
        replace(base, served=40 + at, count=count, media_id=media) for at, (count, media) in enumerate(positions, 1)
    ]
    assert encoded == [edge.encode("a secret", MediaSort.LIKES) for edge in edges]
    assert [SessionCursor.decode("a secret", MediaSort.LIKES, cursor) for cursor in encoded] == edges
    with pytest.raises(ValueError, match="served ids"):
        replace(base, inline=(1, 2)).encode_edges("a secret", MediaSort.LIKES, positions)


def test_a_full_set_of_batchers_forgets_an_idle_one_never_one_gathering_asks(settings):
    reads = ReadPool(settings.database_url, settings)
    made = [reads.batches(("statement", n), lambda: SameRead(reads, "SELECT 1", ())) for n in range(MAX_BATCHERS)]
    gathering = made[0]
    gathering._waiting.append((None, None))  # an ask of this step, not sent yet
    reads.batches(("statement", "new"), lambda: SameRead(reads, "SELECT 1", ()))
    assert reads.batches(("statement", 0), lambda: SameRead(reads, "SELECT 1", ())) is gathering
    assert reads.batches(("statement", 1), lambda: SameRead(reads, "SELECT 1", ())) is not made[1]
    assert len(reads._batches) == MAX_BATCHERS
