"""Writer nicknames on comments kept current: the log, its replay, creation's re-check, repair and resync."""

from __future__ import annotations

import asyncio
from itertools import combinations

import pytest
from sqlalchemy import text

from mediagraph.context import Context
from mediagraph.db.nicknames import queue_of
from mediagraph.ids import decode_id, to_global_id
from mediagraph.resolvers.comments import CommentDraft, confirm_comment, insert_comment, read_writer_nickname
from mediagraph.workers.nicknames.replay import (
    prune_logs,
    queue_heads,
    repair_unconfirmed,
    replay_shard,
    shard_offsets,
)
from tests.support.comments import physical_of, raw_media_id, shard_execute, stored_comment, stored_comments
from tests.support.factories import add_comment, create_media, create_user

CHANGE_NICKNAME = "mutation($n: String!) { changeNickname(nickname: $n) { nickname } }"
THREAD = "query($id: ID!) { media(id: $id) { comments(first: 100) { edges { node { id writerNickname } } } } }"


def interleavings() -> list[str]:
    """The seed's 15 orders of creation steps 1-4 with A (nickname change commits) before B (its replay)."""
    orders = []
    for a, b in combinations(range(6), 2):
        steps = iter("1234")
        orders.append("".join("A" if slot == a else "B" if slot == b else next(steps) for slot in range(6)))
    return orders


@pytest.fixture(scope="module")
async def media(http, gql):
    token, _ = await create_user(gql)
    return await create_media(http, token=token)


async def allow_another_change(services, user_id: int) -> None:
    """The once-a-day rule, lifted for one user (to stage two changes close together)."""
    async with services.databases.main_session() as session:
        await session.execute(text("UPDATE users SET nickname_changed_at = NULL WHERE id = :id"), {"id": user_id})
        await session.commit()


async def catch_up(services) -> None:
    for physical in range(len(services.databases.shards)):
        await replay_shard(services, physical)


def test_there_are_fifteen_interleavings():
    orders = interleavings()
    assert len(set(orders)) == 15
    assert orders[0] == "AB1234"
    assert orders[-1] == "1234AB"


@pytest.mark.parametrize("order", interleavings())
async def test_every_interleaving_ends_with_the_current_nickname_confirmed(order, gql, services, media):
    token, user = await create_user(gql, nickname="Before")
    writer_id = decode_id(user["id"], "User")
    media_id = raw_media_id(media["id"])
    physical = physical_of(services, media_id)
    context = Context(services, None)
    draft = CommentDraft(media_id=media_id, parent_id=None, writer_id=writer_id, content=f"order {order}")
    seen: dict[str, str] = {}
    comment = None
    try:
        for step in order:
            if step == "1":
                seen["first"] = await read_writer_nickname(context, writer_id)
            elif step == "2":
                comment = await insert_comment(context, draft, nickname=seen["first"])
            elif step == "3":
                seen["again"] = await read_writer_nickname(context, writer_id)
            elif step == "4":
                assert comment is not None
                await confirm_comment(context, comment, inserted=seen["first"], current=seen["again"])
            elif step == "A":
                await gql.ok(CHANGE_NICKNAME, {"n": "After"}, token=token)
            else:
                await replay_shard(services, physical)
            if step == "2" and order.index("1") < order.index("A") < order.index("B") < order.index("2"):
                # The case steps 3 and 4 exist for: the replay ran before the insert, so the
                # comment holds the old nickname and no replay will ever fix it.
                stale = await stored_comment(services, _global(comment))
                assert stale.writer_nickname == "Before"
    finally:
        await context.close()
    stored = await stored_comment(services, _global(comment))
    assert (stored.writer_nickname, stored.confirmed) == ("After", True)


def _global(comment) -> str:
    return to_global_id("Comment", comment.media_id, comment.id)


async def test_confirming_keeps_a_newer_nickname_a_replay_wrote_meanwhile(gql, services, media):
    # 1 A 2 3 A' B' 4: two changes around the creation (possible only without the daily limit).
    token, user = await create_user(gql, nickname="First")
    writer_id = decode_id(user["id"], "User")
    media_id = raw_media_id(media["id"])
    context = Context(services, None)
    try:
        first = await read_writer_nickname(context, writer_id)
        await gql.ok(CHANGE_NICKNAME, {"n": "Second"}, token=token)
        comment = await insert_comment(context, CommentDraft(media_id, None, writer_id, "race"), nickname=first)
        again = await read_writer_nickname(context, writer_id)
        await allow_another_change(services, writer_id)
        await gql.ok(CHANGE_NICKNAME, {"n": "Third"}, token=token)
        await replay_shard(services, physical_of(services, media_id))
        await confirm_comment(context, comment, inserted=first, current=again)
    finally:
        await context.close()
    stored = await stored_comment(services, _global(comment))
    assert (stored.writer_nickname, stored.confirmed) == ("Third", True)


async def test_a_nickname_change_reaches_existing_comments_on_every_shard(http, gql, services):
    token, _ = await create_user(gql, nickname="Old name")
    owner, _ = await create_user(gql)
    media = []
    while {physical_of(services, raw_media_id(item["id"])) for item in media} != {0, 1}:
        media.append(await create_media(http, token=owner))
    for item in media:
        await add_comment(gql, token=token, media_id=item["id"])
    await gql.ok(CHANGE_NICKNAME, {"n": "New name"}, token=token)
    await catch_up(services)
    for item in media:
        nicknames = {
            edge["node"]["writerNickname"]
            for edge in (await gql.ok(THREAD, {"id": item["id"]}))["media"]["comments"]["edges"]
        }
        assert nicknames == {"New name"}
    heads = await queue_heads(services)
    for physical in (0, 1):
        assert await shard_offsets(services, physical) == heads


async def test_concurrent_changes_on_one_queue_get_consecutive_log_ids(gql, services, settings):
    users = []
    while len(users) < 6:
        token, user = await create_user(gql)
        if queue_of(settings, decode_id(user["id"], "User")) == 0:
            users.append(token)
    before = (await queue_heads(services)).get(0, 0)
    await asyncio.gather(*(gql.ok(CHANGE_NICKNAME, {"n": f"Name {n}"}, token=token) for n, token in enumerate(users)))
    async with services.databases.main_session() as session:
        ids = list(
            (
                await session.execute(
                    text("SELECT id FROM nickname_logs WHERE queue_id = 0 AND id >= :b ORDER BY id"), {"b": before}
                )
            ).scalars()
        )
    assert ids == list(range(before, before + 6))
    assert (await queue_heads(services))[0] == before + 6


async def test_the_repair_pass_finishes_comments_whose_creation_stopped_before_confirming(gql, services, media):
    token, user = await create_user(gql, nickname="Before")
    writer_id = decode_id(user["id"], "User")
    media_id = raw_media_id(media["id"])
    physical = physical_of(services, media_id)
    context = Context(services, None)
    try:
        first = await read_writer_nickname(context, writer_id)
        await gql.ok(CHANGE_NICKNAME, {"n": "After"}, token=token)
        await replay_shard(services, physical)
        comment = await insert_comment(context, CommentDraft(media_id, None, writer_id, "crashed"), nickname=first)
    finally:
        await context.close()
    # Steps 3 and 4 never run (the process died). Within the grace period nothing happens...
    await repair_unconfirmed(services, physical, grace_seconds=3600)
    stored = await stored_comment(services, _global(comment))
    assert (stored.writer_nickname, stored.confirmed) == ("Before", False)
    # ...after it, the comment is fixed and confirmed.
    assert await repair_unconfirmed(services, physical, grace_seconds=-1) >= 1
    stored = await stored_comment(services, _global(comment))
    assert (stored.writer_nickname, stored.confirmed) == ("After", True)


async def test_a_shard_too_far_behind_is_resynced_from_the_users_table(gql, services, media):
    token, _ = await create_user(gql, nickname="Current")
    media_id = raw_media_id(media["id"])
    physical = physical_of(services, media_id)
    comment = await add_comment(gql, token=token, media_id=media["id"], content="drifted")
    await gql.ok(CHANGE_NICKNAME, {"n": "Latest"}, token=token)
    await catch_up(services)
    # The shard lost track: a wrong nickname no log will fix, and offsets far behind.
    await shard_execute(
        services, physical, "UPDATE comments SET writer_nickname = 'Drifted' WHERE media_id = :m", m=media_id
    )
    await shard_execute(services, physical, "UPDATE nickname_offsets SET applied_offset = 0")
    report = await replay_shard(services, physical, resync_lag=0)
    assert report.resynced
    assert (await stored_comment(services, comment["id"])).writer_nickname == "Latest"
    assert await shard_offsets(services, physical) == await queue_heads(services)


async def test_a_shard_whose_logs_were_pruned_is_resynced(gql, services, media):
    token, user = await create_user(gql, nickname="Before")
    writer_id = decode_id(user["id"], "User")
    media_id = raw_media_id(media["id"])
    physical = physical_of(services, media_id)
    queue = queue_of(services.settings, writer_id)
    await add_comment(gql, token=token, media_id=media["id"])
    await gql.ok(CHANGE_NICKNAME, {"n": "After"}, token=token)
    await catch_up(services)
    await prune_logs(services)
    async with services.databases.main_session() as session:
        remaining = await session.scalar(text("SELECT count(*) FROM nickname_logs WHERE queue_id = :q"), {"q": queue})
    assert remaining == 0  # every shard had applied them
    head = (await queue_heads(services))[queue]
    await shard_execute(
        services, physical, "UPDATE nickname_offsets SET applied_offset = :o WHERE queue_id = :q", o=head - 1, q=queue
    )
    await shard_execute(
        services, physical, "UPDATE comments SET writer_nickname = 'Lost' WHERE media_id = :m", m=media_id
    )
    report = await replay_shard(services, physical)
    assert report.resynced
    mine = [row for row in await stored_comments(services, media_id) if row.writer_id == writer_id]
    assert {row.writer_nickname for row in mine} == {"After"}
    assert (await shard_offsets(services, physical))[queue] == head
