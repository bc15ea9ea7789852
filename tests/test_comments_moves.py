"""Moving a logical shard to another physical shard while comments are written and read."""

from __future__ import annotations

import asyncio
import time
from collections import deque

from sqlalchemy import text

from mediagraph.db.shards.moves import ShardMove, move_logical_shard
from mediagraph.ids import decode_id
from mediagraph.workers.nicknames.replay import shard_offsets
from tests.support.comments import raw_comment_ref, raw_media_id, seed_root_comments, shard_execute
from tests.support.factories import ADD_COMMENT, create_media, create_user

READ = """
query($id: ID!) {
  media(id: $id) {
    commentCount
    comments(first: 20) { edges { node { id } } }
    commentPage(page: 30, size: 20) { comments { id } }
  }
}
"""
# A reply is replaced this many writer rounds after it was written, so copies of it often
# reach the target before it is removed.
REPLACE_AFTER = 8
DELETE = "mutation($id: ID!) { deleteComment(id: $id) { removed } }"
THREAD = """
query($id: ID!, $after: String) {
  media(id: $id) { comments(first: 100, after: $after) { edges { node { id depth parent { id } } } pageInfo { hasNextPage endCursor } } }
}
"""


async def whole_thread(gql, media_id: str) -> list[dict]:
    nodes, after = [], None
    while True:
        page = (await gql.ok(THREAD, {"id": media_id, "after": after}))["media"]["comments"]
        nodes += [edge["node"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return nodes
        after = page["pageInfo"]["endCursor"]


async def rows_of_logical(services, physical: int, logical: int) -> int:
    result = await shard_execute(
        services, physical, "SELECT count(*) FROM comments WHERE logical_shard = :l", l=logical
    )
    return int(result.scalar())


async def hosts(services, physical: int, logical: int) -> bool:
    result = await shard_execute(
        services, physical, "SELECT count(*) FROM hosted_logical_shards WHERE logical_shard = :l", l=logical
    )
    return bool(result.scalar())


class Traffic:
    """Writers adding, replying and deleting, and a reader, until stopped; every failure is kept."""

    def __init__(self, gql, token: str, media_id: str) -> None:
        self.gql, self.token, self.media_id = gql, token, media_id
        self.live: set[str] = set()
        self.errors: list[object] = []
        self.writes = 0
        self.wrote = asyncio.Event()
        self.stop = asyncio.Event()

    async def until(self, writes: int) -> None:
        while self.writes < writes:
            self.wrote.clear()
            await self.wrote.wait()

    async def add(self, content: str, parent: str | None = None) -> str | None:
        variables = {"mediaId": self.media_id, "content": content, "parentId": parent}
        result = await self.gql(ADD_COMMENT, variables, token=self.token)
        if result.get("errors"):
            self.errors.append(result["errors"])
            return None
        comment_id: str = result["data"]["addComment"]["id"]
        self.live.add(comment_id)
        self.writes += 1
        self.wrote.set()
        return comment_id

    async def writer(self, name: str) -> None:
        older: deque[tuple[str, str]] = deque()
        n = 0
        while not self.stop.is_set():
            n += 1
            root = await self.add(f"{name} {n}")
            reply = await self.add(f"{name} {n} reply", root) if root else None
            if root and reply:
                older.append((root, reply))
            if len(older) > REPLACE_AFTER:
                # Removing an older root's only reply frees its path, and the next reply to
                # that root takes the same path: a move must not trip over the two.
                root, reply = older.popleft()
                deleted = await self.gql(DELETE, {"id": reply}, token=self.token)
                if deleted.get("errors"):
                    self.errors.append(deleted["errors"])
                    continue
                self.live.discard(reply)
                await self.add(f"{name} {n} replacement", root)

    async def reader(self) -> None:
        while not self.stop.is_set():
            result = await self.gql(READ, {"id": self.media_id})
            if result.get("errors"):
                self.errors.append(result["errors"])
            await asyncio.sleep(0.01)


async def fresh_media(http, gql, services, **user_fields):
    """A user and a new media, with the media's logical shard, its home and the other physical shard."""
    token, user = await create_user(gql, **user_fields)
    media = await create_media(http, token=token)
    media_id = raw_media_id(media["id"])
    logical = services.databases.router.logical_shard(media_id)
    source = services.databases.router.physical_of_logical(logical)
    return token, user, media, media_id, logical, source, 1 - source


async def test_a_move_under_concurrent_writes_and_reads_loses_and_duplicates_nothing(http, gql, services):
    token, user, media, media_id, logical, source, target = await fresh_media(http, gql, services, nickname="Mover")
    router = services.databases.router
    await seed_root_comments(
        services, media_id=media_id, writer_id=decode_id(user["id"], "User"), nickname="Mover", count=1500
    )
    seeded = {node["id"] for node in await whole_thread(gql, media["id"])}
    offsets_before = [await shard_offsets(services, physical) for physical in (0, 1)]

    traffic = Traffic(gql, token, media["id"])
    tasks = [asyncio.create_task(traffic.writer(f"w{n}")) for n in range(3)] + [asyncio.create_task(traffic.reader())]
    await traffic.until(3)
    writes_before = traffic.writes
    report = await move_logical_shard(services, logical=logical, target=target, batch_size=200, grace_seconds=0.5)
    writes_at_switch = traffic.writes
    assert writes_at_switch > writes_before  # the move really ran under writes
    await traffic.until(writes_at_switch + 6)  # and some more after it, at the new home
    traffic.stop.set()
    await asyncio.gather(*tasks)

    assert traffic.errors == []
    assert (report.source, report.target) == (source, target)
    assert report.copied >= 1500
    assert router.physical_of_logical(logical) == target
    assert await hosts(services, target, logical)
    assert not await hosts(services, source, logical)
    assert await rows_of_logical(services, source, logical) == 0

    thread = await whole_thread(gql, media["id"])
    ids = [node["id"] for node in thread]
    assert len(ids) == len(set(ids))
    assert set(ids) == seeded | traffic.live
    stored = await shard_execute(
        services,
        target,
        "SELECT count(*), count(*) FILTER (WHERE NOT deleted) FROM comments WHERE media_id = :m",
        m=media_id,
    )
    assert tuple(stored.one()) == (len(ids), len(ids))
    count = (await gql.ok(READ, {"id": media["id"]}))["media"]["commentCount"]
    assert count == len(ids)
    # Replies still hang under their parents.
    by_id = {node["id"]: node for node in thread}
    for node in thread:
        if node["parent"]:
            assert by_id[node["parent"]["id"]]["depth"] == node["depth"] - 1
    # The seed: offsets of both shards unified to the smaller one.
    unified = {
        queue: min(offsets_before[0].get(queue, 0), offsets_before[1].get(queue, 0))
        for queue in offsets_before[0].keys() | offsets_before[1].keys()
    }
    assert await shard_offsets(services, target) == unified
    assert await shard_offsets(services, source) == unified
    async with services.databases.main_session() as session:
        mapped = await session.scalar(
            text("SELECT physical_shard FROM shard_map WHERE logical_shard = :l"), {"l": logical}
        )
    assert mapped == target


async def test_a_move_discards_what_an_interrupted_move_left_on_the_target(http, gql, services):
    token, _, media, media_id, logical, _, target = await fresh_media(http, gql, services)
    kept = [
        (await gql.ok(ADD_COMMENT, {"mediaId": media["id"], "content": f"kept {n}"}, token=token))["addComment"]["id"]
        for n in range(3)
    ]
    # A stale copy with a comment the source no longer has, and a residency row the map never confirmed.
    stray = services.ids.next_id()
    await shard_execute(
        services,
        target,
        "INSERT INTO comments (media_id, id, logical_shard, path, writer_id, writer_nickname, confirmed, content, created_at) "
        "VALUES (:m, :i, :l, 'zzzzz', 1, 'ghost', true, 'stray', now())",
        m=media_id,
        i=stray,
        l=logical,
    )
    await shard_execute(services, target, "INSERT INTO hosted_logical_shards VALUES (:l)", l=logical)
    await move_logical_shard(services, logical=logical, target=target, grace_seconds=0)
    assert [node["id"] for node in await whole_thread(gql, media["id"])] == kept
    stored = await shard_execute(
        services, target, "SELECT id FROM comments WHERE media_id = :m ORDER BY path", m=media_id
    )
    assert list(stored.scalars()) == [raw_comment_ref(comment)[1] for comment in kept]


def test_the_shards_command_lists_the_map_and_refuses_nonsense(live_servers, services):
    listed = live_servers.run("shards", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("│")[1:3] for line in listed.stdout.splitlines() if line.startswith("│")]
    placement = {int(logical): int(physical) for logical, physical in rows}
    router = services.databases.router
    assert placement == {logical: router.physical_of_logical(logical) for logical in range(64)}
    for args, message in (
        (("9999", "--to", "0"), "logical shard must be between 0 and 63"),
        (("3", "--to", "7"), "physical shard must be between 0 and 1"),
    ):
        refused = live_servers.run("shards", "move", *args)
        assert refused.returncode != 0
        assert message in refused.stderr


async def test_every_process_follows_a_move_made_by_the_command(http, gql, services, live_servers):
    token, _, media, _, logical, home, destination = await fresh_media(http, gql, services)
    first = (await gql.ok(ADD_COMMENT, {"mediaId": media["id"], "content": "before"}, token=token))["addComment"]

    moved = await asyncio.to_thread(
        live_servers.run, "shards", "move", str(logical), "--to", str(destination), "--grace", "0.5", "--batch", "10"
    )
    assert moved.returncode == 0, moved.stderr
    assert f"moved logical shard {logical} from physical shard {home} to {destination}" in moved.stderr
    assert "logical shard" in moved.stderr  # the progress bar's label

    deadline = time.monotonic() + 30
    while services.databases.router.physical_of_logical(logical) != destination:
        assert time.monotonic() < deadline, "this process never learned of the move"
        await asyncio.sleep(0.1)
    second = (await gql.ok(ADD_COMMENT, {"mediaId": media["id"], "content": "after"}, token=token))["addComment"]
    assert [node["id"] for node in await whole_thread(gql, media["id"])] == [first["id"], second["id"]]
    assert await rows_of_logical(services, home, logical) == 0

    again = await asyncio.to_thread(live_servers.run, "shards", "move", str(logical), "--to", str(destination))
    assert again.returncode != 0
    assert "already on physical shard" in again.stderr


async def test_a_path_freed_and_taken_again_between_copy_rounds_moves_cleanly(http, gql, services):
    token, _, media, media_id, logical, _, target = await fresh_media(http, gql, services)
    root = (await gql.ok(ADD_COMMENT, {"mediaId": media["id"], "content": "root"}, token=token))["addComment"]
    reply = {"mediaId": media["id"], "content": "reply", "parentId": root["id"]}
    first = (await gql.ok(ADD_COMMENT, reply, token=token))["addComment"]
    move = ShardMove(services, logical=logical, target=target, batch_size=50)
    async with move.claimed():
        await move.copy_round()  # the first reply now has a copy on the target
        await gql.ok(DELETE, {"id": first["id"]}, token=token)
        second = (await gql.ok(ADD_COMMENT, reply, token=token))["addComment"]
        paths = await shard_execute(
            services, move.source, "SELECT path FROM comments WHERE media_id = :m ORDER BY path", m=media_id
        )
        assert len(set(paths.scalars())) == 2  # the new reply took the removed one's path
        await move.copy_round()
        await move.switch()
        await move.drop_old_copies()
    assert [node["id"] for node in await whole_thread(gql, media["id"])] == [root["id"], second["id"]]
    assert (await gql.ok(READ, {"id": media["id"]}))["media"]["commentCount"] == 2
