"""Fixed score-range partitions: exact ranks across partitions, checked against a brute-force ranking."""

from __future__ import annotations

import asyncio
import bisect
import random

import pytest

from mediagraph.ids import decode_id
from tests.support.factories import create_user, define_leaderboard, service_token, submit_score
from tests.test_leaderboards import AROUND, ENTRY, ranking
from tests.test_leaderboards_storage import keys_of

BOUNDS = [20.0, 40.0, 60.0, 80.0]


@pytest.fixture(scope="module")
def service(settings) -> str:
    return service_token(settings)


@pytest.fixture(scope="module")
async def players(gql) -> list[dict]:
    return [user for _, user in await asyncio.gather(*(create_user(gql) for _ in range(14)))]


class BruteForce:
    """The ranking a board must show: every score kept in a list, sorted on demand."""

    def __init__(self, *, descending: bool, operator: str) -> None:
        self.descending = descending
        self.operator = operator
        self.scores: dict[str, tuple[float, int]] = {}
        self.clock = 0

    def submit(self, user: str, score: float) -> None:
        self.clock += 1
        held = self.scores.get(user)
        if held is None or self._replaces(held[0], score):
            self.scores[user] = (score, self.clock)

    def _replaces(self, held: float, score: float) -> bool:
        if self.operator == "SET":
            return score != held
        return score > held if self.descending else score < held

    def ranking(self) -> list[tuple[str, float]]:
        sign = -1 if self.descending else 1
        ordered = sorted(self.scores.items(), key=lambda item: (sign * item[1][0], item[1][1]))
        return [(user, score) for user, (score, _) in ordered]


async def assert_matches(gql, services, board: dict, expected: BruteForce) -> None:
    name = board["name"]
    brute = expected.ranking()
    assert await ranking(gql, name) == brute
    for rank, (user, score) in enumerate(brute, start=1):
        entry = (await gql.ok(ENTRY, {"name": name, "user": user}))["leaderboard"]["entry"]
        assert (entry["rank"], entry["score"]) == (rank, score), user
    for user, _ in brute[:: max(len(brute) // 4, 1)]:
        position = [u for u, _ in brute].index(user)
        window = [rank for rank in range(position - 2, position + 3) if 0 <= rank < len(brute)]
        around = (await gql.ok(AROUND, {"name": name, "user": user, "radius": 2}))["leaderboard"]["around"]
        assert [entry["rank"] for entry in around] == [rank + 1 for rank in window]
    await assert_each_user_in_exactly_its_partition(services, board, expected)


async def assert_each_user_in_exactly_its_partition(services, board: dict, expected: BruteForce) -> None:
    keys = keys_of(services, board, "all")
    members: dict[int, list[int]] = {}
    for index, key in enumerate(keys.partitions):
        for member in await services.redis.zrange(key, 0, -1):
            members.setdefault(int(member.decode().split(":")[1]), []).append(index)
    descending = expected.descending
    for user, (score, _) in expected.scores.items():
        ascending_index = bisect.bisect_right(BOUNDS, score)
        wanted = len(BOUNDS) - ascending_index if descending else ascending_index
        assert members.pop(decode_id(user, "User")) == [wanted], (user, score)
    assert not members, "users on the board that never scored"
    if services.settings.redis_cluster:
        # Each partition has a slot of its own: on a cluster they spread over the nodes.
        nodes = {services.redis.get_node_from_key(key).name for key in keys.partitions}
        assert len(keys.partitions) >= 3
        assert len(nodes) >= 2, nodes
    assert await _members_counted(services, keys) == len(expected.scores)


async def _members_counted(services, keys) -> int:
    """What the partitions' counters say they hold (each must match its sorted set to be read)."""
    counted = 0
    for part in keys.parts:
        counted += int(await services.redis.hget(part.users, "n") or 0)
    return counted


@pytest.mark.parametrize(("sort_order", "operator"), [("DESC", "SET"), ("ASC", "SET"), ("DESC", "BEST")])
async def test_ranks_across_partitions_match_a_brute_force_ranking(
    gql, services, service, players, sort_order, operator
):
    board = await define_leaderboard(
        gql,
        token=service,
        sort_order=sort_order,
        operator=operator,
        partition_bounds=BOUNDS,
        min_score=0,
        max_score=100,
    )
    expected = BruteForce(descending=sort_order == "DESC", operator=operator)
    rng = random.Random(f"{sort_order}-{operator}")
    for round_number in range(1, 91):
        user = rng.choice(players)["id"]
        # Scores on the boundaries and repeated values: ties, and moves across every partition.
        score = float(rng.choice([rng.randint(0, 100), rng.choice(BOUNDS), 50.0]))
        await submit_score(gql, token=service, board=board["name"], user_id=user, score=score)
        expected.submit(user, score)
        if round_number % 15 == 0:
            await assert_matches(gql, services, board, expected)


async def test_concurrent_moves_between_partitions_never_duplicate_or_lose_a_user(gql, services, service, players):
    board = await define_leaderboard(
        gql, token=service, operator="SET", partition_bounds=BOUNDS, min_score=0, max_score=100
    )
    movers = players[:3]
    rng = random.Random(7)
    submissions = [(rng.choice(movers)["id"], float(rng.randint(0, 100))) for _ in range(60)]
    await asyncio.gather(
        *(
            submit_score(gql, token=service, board=board["name"], user_id=user, score=score)
            for user, score in submissions
        )
    )
    keys = keys_of(services, board, "all")
    sizes = [await services.redis.zcard(key) for key in keys.partitions]
    assert sum(sizes) == len(movers) == await _members_counted(services, keys)
    ranked = await ranking(gql, board["name"])
    assert sorted(user for user, _ in ranked) == sorted(player["id"] for player in movers)
    # Redis holds what PostgreSQL recorded: a rebuild shows the same board.
    await services.redis.delete(*keys.script_keys)
    assert await ranking(gql, board["name"]) == ranked
