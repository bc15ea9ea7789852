"""submitScores: many submissions in one call, applied in order, all or none."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.factories import create_user, define_leaderboard, service_token
from tests.test_leaderboards import ranking

SUBMIT_SCORES = """
mutation($b: String!, $scores: [ScoreInput!]!) {
  submitScores(leaderboard: $b, scores: $scores) { changed entries { rank score userId } }
}
"""


@pytest.fixture(scope="module")
def service(settings) -> str:
    return service_token(settings)


@pytest.fixture(scope="module")
async def players(gql) -> list[dict]:
    return [user for _, user in await asyncio.gather(*(create_user(gql) for _ in range(4)))]


def scores(*pairs) -> list[dict]:
    return [{"userId": player["id"], "score": score} for player, score in pairs]


async def test_a_batch_applies_in_order_including_repeated_users(gql, service, players):
    a, b, c = players[:3]
    board = (await define_leaderboard(gql, token=service, operator="INCREMENT"))["name"]
    batch = scores((a, 1), (b, 5), (a, 2), (c, 0), (a, 3))
    data = (await gql.ok(SUBMIT_SCORES, {"b": board, "scores": batch}, token=service))["submitScores"]
    assert data["changed"] == 5  # a first score of zero still puts c on the board
    assert data["entries"] == [
        {"rank": 1, "score": 6.0, "userId": a["id"]},
        {"rank": 2, "score": 5.0, "userId": b["id"]},
        {"rank": 3, "score": 0.0, "userId": c["id"]},
    ]


async def test_best_in_a_batch_keeps_the_best_and_counts_only_improvements(gql, service, players):
    a, b = players[:2]
    board = (await define_leaderboard(gql, token=service, operator="BEST", sort_order="ASC"))["name"]
    batch = scores((a, 30), (a, 20), (a, 25), (b, 22))
    data = (await gql.ok(SUBMIT_SCORES, {"b": board, "scores": batch}, token=service))["submitScores"]
    assert data["changed"] == 3
    assert await ranking(gql, board) == [(a["id"], 20.0), (b["id"], 22.0)]


@pytest.mark.parametrize(
    ("batch", "code"),
    [
        (lambda p: scores((p[0], 1), (p[1], 1e9)), "BAD_USER_INPUT"),
        (lambda p: [*scores((p[0], 1)), {"userId": "VXNlcjoxMjM0NQ", "score": 1}], "NOT_FOUND"),
        (lambda p: scores((p[0], 60), (p[0], 60)), "BAD_USER_INPUT"),
        (lambda p: [], "BAD_USER_INPUT"),
        (lambda p: scores(*((p[0], 1),) * 101), "BAD_USER_INPUT"),
    ],
)
async def test_an_invalid_batch_is_refused_whole(gql, service, players, batch, code):
    board = (await define_leaderboard(gql, token=service, operator="INCREMENT", min_score=0, max_score=100))["name"]
    assert await gql.error_code(SUBMIT_SCORES, {"b": board, "scores": batch(players)}, token=service) == code
    assert await ranking(gql, board) == []


async def test_users_cannot_submit_batches(gql, players):
    token, _ = await create_user(gql)
    variables = {"b": "any", "scores": scores((players[0], 1))}
    assert await gql.error_code(SUBMIT_SCORES, variables, token=token) == "FORBIDDEN"
