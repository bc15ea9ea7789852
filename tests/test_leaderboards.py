from __future__ import annotations

import asyncio

import pytest

from mediagraph.ids import to_global_id
from tests.support.factories import (
    SUBMIT_SCORE,
    create_user,
    define_leaderboard,
    service_token,
    submit_score,
    unique_name,
)

BOARD = """
query($name: String!, $period: String, $first: Int, $after: String) {
  leaderboard(name: $name, period: $period) {
    name period size
    top(first: $first, after: $after) {
      totalCount
      edges { cursor node { rank score userId } }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"""
ENTRY = """
query($name: String!, $user: ID!, $period: String) {
  leaderboard(name: $name, period: $period) { entry(userId: $user) { rank score userId user { username } } }
}
"""
AROUND = """
query($name: String!, $user: ID!, $radius: Int!) {
  leaderboard(name: $name) { around(userId: $user, radius: $radius) { rank score userId } }
}
"""
LEADERBOARDS = "query($first: Int, $after: String) { leaderboards(first: $first, after: $after) { edges { node { name } } pageInfo { hasNextPage endCursor } } }"
TOP_WITH_USERS = "query($name: String!) { leaderboard(name: $name) { top(first: 50) { edges { node { rank user { username } } } } } }"


@pytest.fixture(scope="module")
def service(settings) -> str:
    return service_token(settings)


@pytest.fixture(scope="module")
async def players(gql) -> list[dict]:
    users = await asyncio.gather(*(create_user(gql) for _ in range(12)))
    return [user for _, user in users]


async def board_with(gql, service, players, scores: list[float], **definition) -> str:
    board = await define_leaderboard(gql, token=service, **definition)
    for player, score in zip(players, scores, strict=False):
        await submit_score(gql, token=service, board=board["name"], user_id=player["id"], score=score)
    return board["name"]


async def ranking(gql, name: str, *, period: str | None = None) -> list[tuple[str, float]]:
    """The whole board in rank order, through `top` pages of 5."""
    entries, ranks, after = [], [], None
    while True:
        data = await gql.ok(BOARD, {"name": name, "period": period, "first": 5, "after": after})
        top = data["leaderboard"]["top"]
        entries += [(edge["node"]["userId"], edge["node"]["score"]) for edge in top["edges"]]
        ranks += [edge["node"]["rank"] for edge in top["edges"]]
        if not top["pageInfo"]["hasNextPage"]:
            assert ranks == list(range(1, top["totalCount"] + 1)) == list(range(1, data["leaderboard"]["size"] + 1))
            return entries
        after = top["pageInfo"]["endCursor"]


async def test_only_service_tokens_define_leaderboards(gql, service):
    user_token, _ = await create_user(gql)
    variables = {"name": unique_name("b").lower(), "token": None}
    mutation = "mutation($name: String!) { defineLeaderboard(name: $name) { name } }"
    assert await gql.error_code(mutation, {"name": variables["name"]}) == "UNAUTHENTICATED"
    assert await gql.error_code(mutation, {"name": variables["name"]}, token=user_token) == "FORBIDDEN"
    assert (await gql.ok(mutation, {"name": variables["name"]}, token=service))["defineLeaderboard"]["name"]


async def test_identical_redefinition_returns_the_board_and_a_different_one_is_a_conflict(gql, service):
    name = unique_name("b").lower()
    board = await define_leaderboard(gql, token=service, name=name, operator="INCREMENT", partition_bounds=[10, 20])
    again = await define_leaderboard(gql, token=service, name=name, operator="INCREMENT", partition_bounds=[10, 20])
    assert again == board
    result = await gql(
        "mutation($n: String!) { defineLeaderboard(name: $n, operator: SET, partitionBounds: [10, 30]) { name } }",
        {"n": name},
        token=service,
    )
    error = result["errors"][0]
    assert error["extensions"]["code"] == "CONFLICT"
    assert error["extensions"]["fields"] == ["operator", "partitionBounds"]


@pytest.mark.parametrize(
    "definition",
    [
        {"name": "Not a name!"},
        {"min_score": 10, "max_score": 10},
        {"partition_bounds": [5, 5]},
        {"partition_bounds": [3, 2]},
        {"partition_bounds": [100], "max_score": 50},
        {"max_score": 2.0**60},
        {"partition_bounds": list(range(1, 40))},
    ],
)
async def test_invalid_definitions_are_refused(gql, service, definition):
    variables = {
        "name": definition.get("name", unique_name("b").lower()),
        "sortOrder": "DESC",
        "operator": "BEST",
        "period": "ALL_TIME",
        "bounds": definition.get("partition_bounds"),
        "min": definition.get("min_score"),
        "max": definition.get("max_score"),
    }
    from tests.support.factories import DEFINE_LEADERBOARD

    assert await gql.error_code(DEFINE_LEADERBOARD, variables, token=service) == "BAD_USER_INPUT"


async def test_users_cannot_submit_scores_not_even_their_own(gql, service):
    name = (await define_leaderboard(gql, token=service))["name"]
    token, user = await create_user(gql)
    mutation = "mutation($b: String!, $u: ID!) { submitScore(leaderboard: $b, userId: $u, score: 10) { changed } }"
    assert await gql.error_code(mutation, {"b": name, "u": user["id"]}) == "UNAUTHENTICATED"
    assert await gql.error_code(mutation, {"b": name, "u": user["id"]}, token=token) == "FORBIDDEN"
    assert (await gql.ok(ENTRY, {"name": name, "user": user["id"]}))["leaderboard"]["entry"] is None


async def test_submissions_are_validated(gql, service, players):
    name = (await define_leaderboard(gql, token=service, min_score=0, max_score=1000))["name"]
    mutation = (
        "mutation($b: String!, $u: ID!, $s: Float!) { submitScore(leaderboard: $b, userId: $u, score: $s) { changed } }"
    )
    user = players[0]["id"]
    ghost = "VXNlcjoxMjM0NQ"  # User:12345, never registered
    assert await gql.error_code(mutation, {"b": name, "u": ghost, "s": 1}, token=service) == "NOT_FOUND"
    assert await gql.error_code(mutation, {"b": "no-such-board", "u": user, "s": 1}, token=service) == "NOT_FOUND"
    assert await gql.error_code(mutation, {"b": name, "u": user, "s": 1001}, token=service) == "BAD_USER_INPUT"
    assert await gql.error_code(mutation, {"b": name, "u": user, "s": -0.5}, token=service) == "BAD_USER_INPUT"
    infinite = "mutation($b: String!, $u: ID!) { submitScore(leaderboard: $b, userId: $u, score: 1e400) { changed } }"
    assert await gql.error_code(infinite, {"b": name, "u": user}, token=service) == "BAD_USER_INPUT"
    media_id = "TWVkaWE6MQ"  # Media:1
    assert await gql.error_code(mutation, {"b": name, "u": media_id, "s": 1}, token=service) == "BAD_USER_INPUT"


async def test_set_replaces_the_score_even_with_a_worse_one(gql, service, players):
    name = await board_with(gql, service, players[:2], [50, 40], operator="SET")
    result = await submit_score(gql, token=service, board=name, user_id=players[0]["id"], score=10)
    assert result == {"changed": True, "entry": {"rank": 2, "score": 10.0}}
    assert await ranking(gql, name) == [(players[1]["id"], 40.0), (players[0]["id"], 10.0)]


@pytest.mark.parametrize(("sort_order", "scores", "worse", "better"), [("DESC", [5, 7], 4, 9), ("ASC", [5, 7], 6, 1)])
async def test_best_keeps_the_better_score(gql, service, players, sort_order, scores, worse, better):
    name = await board_with(gql, service, players[:2], scores, operator="BEST", sort_order=sort_order)
    user = players[0]["id"]
    assert (await submit_score(gql, token=service, board=name, user_id=user, score=worse))["changed"] is False
    assert (await gql.ok(ENTRY, {"name": name, "user": user}))["leaderboard"]["entry"]["score"] == scores[0]
    improved = await submit_score(gql, token=service, board=name, user_id=user, score=better)
    assert improved == {"changed": True, "entry": {"rank": 1, "score": float(better)}}


async def test_concurrent_submissions_keep_the_best_and_refuse_only_the_unknown_user(gql, service, players):
    # Submissions arriving together are written together: repeats of one user, several users
    # and one user who does not exist, who must fail alone.
    name = await board_with(gql, service, players[:1], [5], operator="BEST")
    scores = [3, 11, 7, 19, 13]
    results = await asyncio.gather(
        *(gql(SUBMIT_SCORE, {"board": name, "user": players[0]["id"], "score": s}, token=service) for s in scores),
        *(
            gql(SUBMIT_SCORE, {"board": name, "user": player["id"], "score": 8}, token=service)
            for player in players[1:4]
        ),
        gql(SUBMIT_SCORE, {"board": name, "user": to_global_id("User", 999_999_999), "score": 8}, token=service),
    )
    assert [result["errors"][0]["extensions"]["code"] for result in results if result.get("errors")] == ["NOT_FOUND"]
    assert sum(result["data"]["submitScore"]["changed"] for result in results[: len(scores)]) >= 1
    ranked = await ranking(gql, name)
    assert ranked[0] == (players[0]["id"], 19.0)
    # Equal scores rank by who reached them first, which concurrent requests leave open.
    assert sorted(ranked[1:]) == sorted((player["id"], 8.0) for player in players[1:4])


async def test_increment_keeps_a_running_total_inside_the_range(gql, service, players):
    name = await board_with(gql, service, players[:1], [5], operator="INCREMENT", min_score=0, max_score=100)
    user = players[0]["id"]
    await submit_score(gql, token=service, board=name, user_id=user, score=2.5)
    assert (await submit_score(gql, token=service, board=name, user_id=user, score=-7.5))["entry"]["score"] == 0.0
    mutation = (
        "mutation($b: String!, $u: ID!, $s: Float!) { submitScore(leaderboard: $b, userId: $u, score: $s) { changed } }"
    )
    assert await gql.error_code(mutation, {"b": name, "u": user, "s": -1}, token=service) == "BAD_USER_INPUT"
    # A step larger than the whole range can still move an existing total back inside it.
    await submit_score(gql, token=service, board=name, user_id=user, score=100)
    assert (await submit_score(gql, token=service, board=name, user_id=user, score=-100))["entry"]["score"] == 0.0
    assert (
        await gql.error_code(mutation, {"b": name, "u": players[1]["id"], "s": 101}, token=service) == "BAD_USER_INPUT"
    )
    totals = await asyncio.gather(
        *(submit_score(gql, token=service, board=name, user_id=user, score=1) for _ in range(20))
    )
    assert sorted(total["entry"]["score"] for total in totals)[-1] == 20.0


async def test_equal_scores_rank_by_who_reached_them_first(gql, service, players):
    a, b, c = (player["id"] for player in players[:3])
    name = (await define_leaderboard(gql, token=service, operator="SET"))["name"]
    for user in (b, a, c):
        await submit_score(gql, token=service, board=name, user_id=user, score=100)
    assert [user for user, _ in await ranking(gql, name)] == [b, a, c]
    # Submitting the score one already holds does not make the time it was reached later.
    await submit_score(gql, token=service, board=name, user_id=b, score=100)
    # Leaving and coming back does.
    await submit_score(gql, token=service, board=name, user_id=a, score=99)
    await submit_score(gql, token=service, board=name, user_id=a, score=100)
    assert [user for user, _ in await ranking(gql, name)] == [b, c, a]


async def test_top_pages_through_every_entry_in_rank_order(gql, service, players):
    scores = [float(n * 7 % 11) for n in range(len(players))]
    name = await board_with(gql, service, players, scores)
    expected = sorted(zip((p["id"] for p in players), scores, strict=True), key=lambda pair: -pair[1])
    assert [score for _, score in await ranking(gql, name)] == [score for _, score in expected]
    data = await gql.ok(BOARD, {"name": name, "first": 100})
    assert data["leaderboard"]["size"] == len(players)


async def test_a_page_resumes_after_its_last_entry_when_entries_above_it_move(gql, service, players):
    name = await board_with(gql, service, players[:6], [60, 50, 40, 30, 20, 10], operator="SET")
    first = (await gql.ok(BOARD, {"name": name, "first": 3}))["leaderboard"]["top"]
    # The leader drops to the bottom: with plain offsets the next page would skip an entry.
    await submit_score(gql, token=service, board=name, user_id=players[0]["id"], score=0)
    after = first["pageInfo"]["endCursor"]
    rest = (await gql.ok(BOARD, {"name": name, "first": 10, "after": after}))["leaderboard"]["top"]
    assert [edge["node"]["score"] for edge in rest["edges"]] == [30, 20, 10, 0]
    assert [edge["node"]["rank"] for edge in rest["edges"]] == [3, 4, 5, 6]


async def test_around_is_clipped_at_the_top_and_the_bottom(gql, service, players):
    ids = [player["id"] for player in players[:7]]
    name = await board_with(gql, service, players[:7], [70, 60, 50, 40, 30, 20, 10])

    async def around(user: str, radius: int) -> list[int]:
        data = await gql.ok(AROUND, {"name": name, "user": user, "radius": radius})
        return [entry["rank"] for entry in data["leaderboard"]["around"]]

    assert await around(ids[0], 2) == [1, 2, 3]
    assert await around(ids[1], 2) == [1, 2, 3, 4]
    assert await around(ids[3], 2) == [2, 3, 4, 5, 6]
    assert await around(ids[6], 2) == [5, 6, 7]
    assert await around(ids[6], 0) == [7]
    assert await around(ids[3], 50) == [1, 2, 3, 4, 5, 6, 7]
    assert await around(players[8]["id"], 2) == []
    assert await gql.error_code(AROUND, {"name": name, "user": ids[0], "radius": 51}) == "BAD_USER_INPUT"


async def test_entry_ranks_from_one_and_is_null_without_a_score(gql, service, players):
    name = await board_with(gql, service, players[:2], [3, 9])
    entry = (await gql.ok(ENTRY, {"name": name, "user": players[0]["id"]}))["leaderboard"]["entry"]
    assert entry == {"rank": 2, "score": 3.0, "userId": players[0]["id"], "user": {"username": players[0]["username"]}}
    assert (await gql.ok(ENTRY, {"name": name, "user": players[5]["id"]}))["leaderboard"]["entry"] is None
    assert (await gql.ok(ENTRY, {"name": "no-such-board", "user": players[0]["id"]}))["leaderboard"] is None


async def test_bad_arguments_get_bad_user_input(gql, service, players):
    name = await board_with(gql, service, players[:2], [1, 2])
    other = await board_with(gql, service, players[:2], [1, 2])
    daily = (await define_leaderboard(gql, token=service, period="DAILY"))["name"]
    cursor = (await gql.ok(BOARD, {"name": other, "first": 1}))["leaderboard"]["top"]["pageInfo"]["endCursor"]
    for variables in (
        {"name": name, "first": 0},
        {"name": name, "first": 101},
        {"name": name, "after": "forged"},
        {"name": name, "after": cursor},
        {"name": name, "period": "2026-13-01"},
        {"name": name, "period": "yesterday"},
        {"name": daily, "period": "9999-12-31"},
        {"name": daily, "period": "2999-01-01"},
    ):
        assert await gql.error_code(BOARD, variables) == "BAD_USER_INPUT", variables


async def test_leaderboards_lists_definitions_by_name(gql, service):
    prefix = unique_name("list").lower()
    for suffix in ("c", "a", "b"):
        await define_leaderboard(gql, token=service, name=f"{prefix}-{suffix}")
    names, after = [], None
    while True:
        page = (await gql.ok(LEADERBOARDS, {"first": 2, "after": after}))["leaderboards"]
        names += [edge["node"]["name"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert [name for name in names if name.startswith(prefix)] == [f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"]
    assert names == sorted(names)


async def test_top_with_users_costs_one_sql_query(gql, service, players, count_queries):
    name = await board_with(gql, service, players, list(range(len(players))))
    await gql.ok(TOP_WITH_USERS, {"name": name})
    count_queries.clear()
    data = await gql.ok(TOP_WITH_USERS, {"name": name})
    assert len(data["leaderboard"]["top"]["edges"]) == len(players)
    assert len(count_queries) == 1, count_queries


RENAMED = """
query($name: String!) { leaderboard(name: $name) { periodKey period entryCount size definition { period } } }
"""
SUBMIT_SCORES_COUNTED = """
mutation($b: String!, $scores: [ScoreInput!]!) { submitScores(leaderboard: $b, scores: $scores) { changedCount changed } }
"""


async def test_renamed_fields_answer_beside_their_deprecated_names(gql, service, players):
    name = await board_with(gql, service, players[:2], [4, 6], period="MONTHLY")
    board = (await gql.ok(RENAMED, {"name": name}))["leaderboard"]
    assert board["periodKey"] == board["period"]
    assert board["definition"]["period"] == "MONTHLY"
    assert board["entryCount"] == board["size"] == 2
    scores = [{"userId": players[0]["id"], "score": 9}, {"userId": players[2]["id"], "score": 1}]
    counted = (await gql.ok(SUBMIT_SCORES_COUNTED, {"b": name, "scores": scores}, token=service))["submitScores"]
    assert counted == {"changedCount": 2, "changed": 2}
