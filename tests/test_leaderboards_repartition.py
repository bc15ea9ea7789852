"""Online re-partitioning: a live board moved to new partition bounds while scores keep arriving,
with ranks checked against a brute-force ranking before, during and after the move."""

from __future__ import annotations

import asyncio
import bisect
import random
import time

import pytest

from mediagraph.ids import decode_id
from mediagraph.keys.leaderboards import board_keys
from mediagraph.resolvers.leaderboards import repartition, store
from mediagraph.workers import leaderboards as worker
from tests.support.apps import app_with
from tests.support.factories import create_user, define_leaderboard, service_token, submit_score
from tests.support.graphql import error_extensions
from tests.test_leaderboards import AROUND, ENTRY, ranking
from tests.test_leaderboards_partitions import BruteForce

OLD_BOUNDS = [20.0, 40.0, 60.0, 80.0]
NEW_BOUNDS = [10.0, 30.0, 50.0, 70.0, 85.0, 95.0]

REPARTITION = """
mutation($name: String!, $bounds: [Float!]!) {
  repartitionLeaderboard(name: $name, partitionBounds: $bounds) {
    name partitionBounds repartition { id state partitionBounds previousBounds movedEntries totalEntries finishedAt }
  }
}
"""
DEFINITION = """
query($name: String!) {
  leaderboard(name: $name) { definition { name partitionBounds
    repartition { state partitionBounds previousBounds movedEntries totalEntries startedAt finishedAt } } }
}
"""
# Short steps: processes re-read definitions every 0.2 s and a move waits 0.6 s between steps.
FAST = {
    "leaderboard_definition_refresh_seconds": 0.2,
    "leaderboard_repartition_grace_seconds": 0.6,
    "leaderboard_repartition_lease_seconds": 1.5,
}


@pytest.fixture(scope="module")
def service(settings) -> str:
    return service_token(settings)


@pytest.fixture(scope="module")
async def players(gql) -> list[dict]:
    return [user for _, user in await asyncio.gather(*(create_user(gql) for _ in range(16)))]


async def definition_of(gql, name: str) -> dict:
    return (await gql.ok(DEFINITION, {"name": name}))["leaderboard"]["definition"]


async def assert_ranks(gql, name: str, expected: BruteForce) -> None:
    brute = expected.ranking()
    assert await ranking(gql, name) == brute
    for rank, (user, score) in enumerate(brute, start=1):
        entry = (await gql.ok(ENTRY, {"name": name, "user": user}))["leaderboard"]["entry"]
        assert (entry["rank"], entry["score"]) == (rank, score), user
    user = brute[len(brute) // 2][0]
    around = (await gql.ok(AROUND, {"name": name, "user": user, "radius": 3}))["leaderboard"]["around"]
    position = len(brute) // 2
    assert [entry["rank"] for entry in around] == [
        r + 1 for r in range(max(0, position - 3), position + 4) if r < len(brute)
    ]


async def assert_laid_out(services, board: dict, expected: BruteForce, bounds: list[float], generation: int) -> None:
    """Every user in exactly the partition `bounds` put them in, in layout `generation`."""
    keys = board_keys(
        services.keys,
        board_id=decode_id(board["id"], "LeaderboardDefinition"),
        period="all",
        partitions=len(bounds) + 1,
        generation=generation,
    )
    members: dict[int, list[int]] = {}
    for index, key in enumerate(keys.partitions):
        for member in await services.redis.zrange(key, 0, -1):
            members.setdefault(int(member.decode().split(":")[1]), []).append(index)
    for user, (score, _) in expected.scores.items():
        wanted = len(bounds) - bisect.bisect_right(bounds, score)  # descending boards: p0 holds the best
        assert members.pop(decode_id(user, "User")) == [wanted], (user, score)
    assert members == {}


async def old_keys_left(services, board: dict, generation: int, partitions: int) -> int:
    keys = board_keys(
        services.keys,
        board_id=decode_id(board["id"], "LeaderboardDefinition"),
        period="all",
        partitions=partitions,
        generation=generation,
    )
    return sum([await services.redis.exists(key) for key in keys.script_keys])


class Scorer:
    """Submits SET scores one after another (users keep crossing partitions) until stopped;
    a check holds `pause` so it compares a settled board with the brute-force ranking."""

    def __init__(self, gql, token: str, board: str, players: list[dict], expected: BruteForce) -> None:
        self.gql, self.token, self.board, self.players, self.expected = gql, token, board, players, expected
        self.pause = asyncio.Lock()
        self.sent = 0
        self.random = random.Random(7)

    async def one(self) -> None:
        user = self.random.choice(self.players)["id"]
        score = round(self.random.uniform(0, 100), 6)
        await submit_score(self.gql, token=self.token, board=self.board, user_id=user, score=score)
        self.expected.submit(user, score)
        self.sent += 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            async with self.pause:
                await self.one()
            await asyncio.sleep(0)


async def test_a_board_moved_while_scores_arrive_keeps_every_rank_exact(settings, players):
    async with app_with(settings, **FAST) as (services, gql):
        token = service_token(settings)
        board = await define_leaderboard(gql, token=token, operator="SET", partition_bounds=OLD_BOUNDS)
        name = board["name"]
        expected = BruteForce(descending=True, operator="SET")
        scorer = Scorer(gql, token, name, players, expected)
        for player in players:  # everyone on the board before the move
            await submit_score(gql, token=token, board=name, user_id=player["id"], score=99.5 - len(expected.scores))
            expected.submit(player["id"], 99.5 - len(expected.scores))
        await assert_ranks(gql, name, expected)

        stop_scores, stop_worker = asyncio.Event(), asyncio.Event()
        scoring = asyncio.create_task(scorer.run(stop_scores))
        moved = await gql.ok(REPARTITION, {"name": name, "bounds": NEW_BOUNDS}, token=token)
        started = moved["repartitionLeaderboard"]
        assert started["partitionBounds"] == OLD_BOUNDS  # reads keep the old layout while it copies
        assert started["repartition"]["state"] == "COPYING"
        assert started["repartition"]["previousBounds"] == OLD_BOUNDS
        assert started["repartition"]["partitionBounds"] == NEW_BOUNDS
        moving = asyncio.create_task(worker.run(services, stop_worker))
        seen: list[str] = []
        checks = 0
        try:
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, f"the move never finished (states seen: {seen})"
                async with scorer.pause:
                    state = (await definition_of(gql, name))["repartition"]["state"]
                    if not seen or seen[-1] != state:
                        seen.append(state)
                    await assert_ranks(gql, name, expected)
                    checks += 1
                if state == "DONE":
                    break
                await asyncio.sleep(0.05)
        finally:
            stop_scores.set()
            await scoring
            stop_worker.set()
            await moving
        assert seen[0] == "COPYING", seen
        assert "SWITCHED" in seen, seen
        assert seen[-1] == "DONE", seen

        done = await definition_of(gql, name)
        assert done["partitionBounds"] == NEW_BOUNDS
        assert done["repartition"]["finishedAt"] is not None
        assert done["repartition"]["movedEntries"] == done["repartition"]["totalEntries"] > 0
        # Scores keep landing in the new layout only, and every rank stays exact.
        for _ in range(30):
            await scorer.one()
        await assert_ranks(gql, name, expected)
        await assert_laid_out(services, board, expected, NEW_BOUNDS, generation=1)
        assert await old_keys_left(services, board, generation=0, partitions=len(OLD_BOUNDS) + 1) == 0
        assert scorer.sent > 30
        assert checks > 3


async def test_a_move_whose_mover_died_mid_copy_is_resumed_by_a_worker(settings, players, monkeypatch):
    async with app_with(settings, **FAST) as (services, gql):
        token = service_token(settings)
        board = await define_leaderboard(gql, token=token, operator="BEST", partition_bounds=OLD_BOUNDS)
        name = board["name"]
        expected = BruteForce(descending=True, operator="BEST")
        for n, player in enumerate(players):
            score = 3.0 + n * 6.0
            await submit_score(gql, token=token, board=name, user_id=player["id"], score=score)
            expected.submit(player["id"], score)
        await assert_ranks(gql, name, expected)
        await gql.ok(REPARTITION, {"name": name, "bounds": NEW_BOUNDS}, token=token)

        # The first mover copies a few entries into the new layout and dies there, holding its lease.
        monkeypatch.setattr(store, "REBUILD_CHUNK", 4)
        reports = 0
        report = repartition.Move._report

        async def dies_after_first_chunk(self, moved: int) -> None:
            nonlocal reports
            await report(self, moved)
            reports += 1
            if reports == 1:
                raise RuntimeError("the mover's process died")

        monkeypatch.setattr(repartition.Move, "_report", dies_after_first_chunk)
        with pytest.raises(RuntimeError, match="died"):
            await repartition.resume_one(services)
        interrupted = (await definition_of(gql, name))["repartition"]
        assert interrupted["state"] == "COPYING"
        assert 0 < interrupted["movedEntries"] < interrupted["totalEntries"] == len(players)
        # Reads still use the old layout, complete and exact.
        await assert_ranks(gql, name, expected)
        assert not await repartition.resume_one(services)  # its lease has not lapsed yet

        monkeypatch.setattr(repartition.Move, "_report", report)
        stop = asyncio.Event()
        resumed = asyncio.create_task(worker.run(services, stop))
        try:
            deadline = time.monotonic() + 60
            while (await definition_of(gql, name))["repartition"]["state"] != "DONE":
                assert time.monotonic() < deadline, "no worker resumed the move"
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await resumed
        done = (await definition_of(gql, name))["repartition"]
        assert done["movedEntries"] == done["totalEntries"] == len(players)
        await assert_ranks(gql, name, expected)
        await assert_laid_out(services, board, expected, NEW_BOUNDS, generation=1)
        assert await old_keys_left(services, board, generation=0, partitions=len(OLD_BOUNDS) + 1) == 0


async def test_repartitioning_is_for_services_and_refuses_nonsense(gql, service, players):
    board = await define_leaderboard(gql, token=service, partition_bounds=OLD_BOUNDS)
    name = board["name"]
    user_token, _ = await create_user(gql)
    cases = [
        ({"name": name, "bounds": NEW_BOUNDS}, user_token, "FORBIDDEN"),
        ({"name": name, "bounds": [30.0, 10.0]}, service, "BAD_USER_INPUT"),
        ({"name": name, "bounds": [float(2**60)]}, service, "BAD_USER_INPUT"),
        ({"name": name, "bounds": [float(n) for n in range(40)]}, service, "BAD_USER_INPUT"),
        ({"name": "no-such-board", "bounds": NEW_BOUNDS}, service, "NOT_FOUND"),
    ]
    for variables, token, code in cases:
        result = await gql(REPARTITION, variables, token=token)
        assert error_extensions(result)["code"] == code, (variables, result)

    unchanged = await gql.ok(REPARTITION, {"name": name, "bounds": OLD_BOUNDS}, token=service)
    assert unchanged["repartitionLeaderboard"]["repartition"] is None  # already laid out so: nothing to move

    first = (await gql.ok(REPARTITION, {"name": name, "bounds": NEW_BOUNDS}, token=service))["repartitionLeaderboard"]
    again = (await gql.ok(REPARTITION, {"name": name, "bounds": NEW_BOUNDS}, token=service))["repartitionLeaderboard"]
    assert first["repartition"]["state"] == again["repartition"]["state"] == "COPYING"
    assert first["repartition"]["id"] == again["repartition"]["id"]
    node = await gql.ok(
        "query($id: ID!) { node(id: $id) { id ... on LeaderboardRepartition { state partitionBounds } } }",
        {"id": first["repartition"]["id"]},
    )
    assert node["node"] == {"id": first["repartition"]["id"], "state": "COPYING", "partitionBounds": NEW_BOUNDS}
    other = await gql(REPARTITION, {"name": name, "bounds": [50.0]}, token=service)
    assert error_extensions(other)["code"] == "CONFLICT"
    assert "being re-partitioned" in other["errors"][0]["message"]

    redefined = await gql(
        "mutation($name: String!, $bounds: [Float!]) { defineLeaderboard(name: $name, partitionBounds: $bounds) { name } }",
        {"name": name, "bounds": [1.0, 2.0]},
        token=service,
    )
    assert error_extensions(redefined)["code"] == "CONFLICT"
    assert "repartitionLeaderboard" in redefined["errors"][0]["message"]


async def test_the_command_moves_a_board_and_every_process_follows(gql, services, service, players, live_servers):
    board = await define_leaderboard(gql, token=service, operator="BEST", partition_bounds=OLD_BOUNDS)
    name = board["name"]
    expected = BruteForce(descending=True, operator="BEST")
    for n, player in enumerate(players[:8]):
        await submit_score(gql, token=service, board=name, user_id=player["id"], score=7.0 + n * 11.0)
        expected.submit(player["id"], 7.0 + n * 11.0)
    await assert_ranks(gql, name, expected)

    env = {f"MEDIAGRAPH_{key.upper()}": str(value) for key, value in FAST.items()}
    moved = await asyncio.to_thread(
        live_servers.run, "leaderboards", "repartition", name, "--bounds", ",".join(map(str, NEW_BOUNDS)), **env
    )
    assert moved.returncode == 0, moved.stderr
    assert f"{name}: partitions now split at" in moved.stderr
    deadline = time.monotonic() + 30
    while (await definition_of(gql, name))["partitionBounds"] != NEW_BOUNDS:
        assert time.monotonic() < deadline, "this process never saw the new layout"
        await asyncio.sleep(0.1)
    await assert_ranks(gql, name, expected)
    await assert_laid_out(services, board, expected, NEW_BOUNDS, generation=1)

    for args, message in (
        (("no-such-board", "--bounds", "1,2"), "No leaderboard named"),
        ((name, "--bounds", "5,1"), "must increase strictly"),
        ((name, "--bounds", "x"), "numbers separated by commas"),
    ):
        refused = await asyncio.to_thread(live_servers.run, "leaderboards", "repartition", *args)
        assert refused.returncode != 0
        assert message in refused.stderr, refused.stderr
