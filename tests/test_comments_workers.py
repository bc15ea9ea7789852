"""`mediagraph worker nicknames` as a real process: killed mid-batch, then run to completion."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import text
from sqlalchemy.engine import make_url

from mediagraph.db.nicknames import queue_of
from mediagraph.ids import decode_id
from mediagraph.workers.nicknames.replay import replay_shard, shard_offsets
from tests.support.comments import physical_of, raw_comment_ref, raw_media_id, stored_comment
from tests.support.factories import add_comment, create_media, create_user

CHANGE_NICKNAME = "mutation($n: String!) { changeNickname(nickname: $n) { nickname } }"
DEADLINE_SECONDS = 90


async def eventually(check, *, what: str):
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def blocked_replay(services, database: str) -> int | None:
    async with services.databases.main.connect() as connection:
        return await connection.scalar(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = :db AND wait_event_type = 'Lock' "
                "AND query LIKE 'UPDATE comments AS c SET writer_nickname%'"
            ),
            {"db": database},
        )


async def backend_gone(services, pid: int) -> bool:
    async with services.databases.main.connect() as connection:
        return not await connection.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid})


async def test_a_replay_worker_killed_mid_batch_leaves_nothing_half_applied(
    http, gql, services, settings, live_servers
):
    owner, _ = await create_user(gql)
    media = await create_media(http, token=owner)
    media_id = raw_media_id(media["id"])
    physical = physical_of(services, media_id)
    writers = []
    while len(writers) < 2:
        token, user = await create_user(gql, nickname=f"Old {len(writers)}")
        if queue_of(settings, decode_id(user["id"], "User")) == 0:
            writers.append(token)
    comments = [
        [await add_comment(gql, token=token, media_id=media["id"], content=f"w{n} c{k}") for k in range(3)]
        for n, token in enumerate(writers)
    ]
    # Replay everything pending, so the next batch of queue 0 is exactly our two changes.
    await replay_shard(services, physical)
    offset = (await shard_offsets(services, physical)).get(0, 0)
    for n, token in enumerate(writers):
        await gql.ok(CHANGE_NICKNAME, {"n": f"New {n}"}, token=token)

    database = make_url(settings.shard_urls[physical]).database
    blocked_row = comments[1][1]["id"]
    async with services.databases.shards[physical].connect() as blocker:
        # Hold one comment of the second writer: the worker's batch update stops there, mid-batch.
        ref = raw_comment_ref(blocked_row)
        await blocker.execute(
            text("SELECT 1 FROM comments WHERE media_id = :m AND id = :i FOR UPDATE"), {"m": ref[0], "i": ref[1]}
        )
        worker = live_servers.spawn("worker", "nicknames")
        pid = await eventually(lambda: blocked_replay(services, database), what="the worker to block mid-batch")
        worker.kill()
        worker.wait(timeout=10)
        await blocker.rollback()
    await eventually(lambda: backend_gone(services, pid), what="the killed worker's transaction to end")

    assert (await shard_offsets(services, physical)).get(0, 0) == offset
    for n, written in enumerate(comments):
        for comment in written:
            assert (await stored_comment(services, comment["id"])).writer_nickname == f"Old {n}"

    worker = live_servers.spawn("worker", "nicknames")
    try:

        async def replayed() -> bool:
            rows = [await stored_comment(services, comment["id"]) for written in comments for comment in written]
            return {row.writer_nickname for row in rows[:3]} == {"New 0"} and {
                row.writer_nickname for row in rows[3:]
            } == {"New 1"}

        await eventually(replayed, what="a fresh worker to apply the batch")
        await eventually(lambda: _offset_is(services, physical, offset + 2), what="the offset to move past both logs")
    finally:
        worker.terminate()
        worker.wait(timeout=10)
    assert worker.returncode == 0
    # Each log counted once: the offset sits right after our two.
    assert (await shard_offsets(services, physical)).get(0, 0) == offset + 2


async def _offset_is(services, physical: int, expected: int) -> bool:
    return (await shard_offsets(services, physical)).get(0, 0) >= expected
