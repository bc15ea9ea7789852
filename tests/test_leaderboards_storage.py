"""Where leaderboard scores live: PostgreSQL as the record, Redis rebuilt from it, periods expiring."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta

import pytest

from mediagraph.db.leaderboards import Leaderboard, Period, Submission, record_scores
from mediagraph.ids import decode_id
from mediagraph.keys.leaderboards import board_keys
from mediagraph.resolvers.leaderboards.periods import parse_window, window_of_day
from tests.support.factories import create_user, define_leaderboard, service_token, submit_score
from tests.test_leaderboards import BOARD, ENTRY, ranking

HOUR_MS = 3_600_000
# Redis counts TTLs on its own clock.
CLOCK_SLACK_MS = 5_000


@pytest.fixture(scope="module")
def service(settings) -> str:
    return service_token(settings)


@pytest.fixture(scope="module")
async def players(gql) -> list[dict]:
    return [user for _, user in await asyncio.gather(*(create_user(gql) for _ in range(8)))]


def keys_of(services, board: dict, period: str):
    return board_keys(
        services.keys,
        board_id=decode_id(board["id"], "LeaderboardDefinition"),
        period=period,
        partitions=len(board["partitionBounds"]) + 1,
    )


async def scored_board(gql, service, players, **definition) -> dict:
    board = await define_leaderboard(gql, token=service, **definition)
    for n, player in enumerate(players):
        await submit_score(gql, token=service, board=board["name"], user_id=player["id"], score=(n * 37) % 100)
    return board


async def test_a_board_lost_by_redis_is_rebuilt_once_from_postgresql(gql, services, service, players, count_queries):
    board = await scored_board(gql, service, players, partition_bounds=[25, 50, 75])
    before = await ranking(gql, board["name"])
    await services.redis.delete(*keys_of(services, board, "all").script_keys)

    count_queries.clear()
    pages = await asyncio.gather(*(gql.ok(BOARD, {"name": board["name"], "first": 100}) for _ in range(8)))
    rebuilds = [statement for statement in count_queries if "FROM leaderboard_scores" in statement]
    assert len(rebuilds) == 1, rebuilds
    expected = [[user, score] for user, score in before]
    for page in pages:
        edges = page["leaderboard"]["top"]["edges"]
        assert [[edge["node"]["userId"], edge["node"]["score"]] for edge in edges] == expected
    assert await ranking(gql, board["name"]) == before


async def test_losing_one_partition_is_noticed_and_repaired(gql, services, service, players):
    board = await scored_board(gql, service, players, partition_bounds=[50])
    before = await ranking(gql, board["name"])
    await services.redis.delete(keys_of(services, board, "all").partitions[0])
    assert await ranking(gql, board["name"]) == before


async def test_scores_submitted_while_redis_lacks_the_board_are_kept(gql, services, service, players):
    board = await scored_board(gql, service, players[:3], operator="INCREMENT")
    await services.redis.delete(*keys_of(services, board, "all").script_keys)
    await submit_score(gql, token=service, board=board["name"], user_id=players[0]["id"], score=1000)
    await submit_score(gql, token=service, board=board["name"], user_id=players[5]["id"], score=1)
    ranked = await ranking(gql, board["name"])
    assert ranked[0] == (players[0]["id"], 1000.0)
    assert (players[5]["id"], 1.0) in ranked
    assert len(ranked) == 4


async def test_ties_survive_a_rebuild(gql, services, service, players):
    board = await define_leaderboard(gql, token=service, operator="SET")
    order = [players[3]["id"], players[1]["id"], players[2]["id"]]
    for user in order:
        await submit_score(gql, token=service, board=board["name"], user_id=user, score=5)
    await services.redis.delete(*keys_of(services, board, "all").script_keys)
    assert [user for user, _ in await ranking(gql, board["name"])] == order


async def test_all_time_keys_never_expire(gql, services, service, players):
    board = await scored_board(gql, service, players[:2])
    keys = keys_of(services, board, "all")
    for key in keys.script_keys:
        assert await services.redis.pttl(key) == -1


async def test_a_daily_board_keeps_each_day_under_its_own_keys_until_it_is_history(
    gql, services, settings, service, players
):
    board = await scored_board(gql, service, players[:3], period="DAILY")
    today = datetime.now(UTC).date()
    data = await gql.ok(BOARD, {"name": board["name"], "first": 10})
    assert data["leaderboard"]["period"] == today.isoformat()
    keys = keys_of(services, board, today.isoformat())
    until_history = window_of_day(Period.DAILY, today).ends_at + timedelta(
        seconds=settings.leaderboard_history_grace_seconds
    )
    expected_ms = (until_history - datetime.now(UTC)).total_seconds() * 1000
    for key in keys.script_keys:
        ttl = await services.redis.pttl(key)
        assert expected_ms - HOUR_MS < ttl <= expected_ms + CLOCK_SLACK_MS, key


async def test_a_past_day_is_read_back_from_postgresql_and_cached_briefly(gql, services, settings, service, players):
    board = await define_leaderboard(gql, token=service, period="DAILY", operator="INCREMENT")
    board_id = decode_id(board["id"], "LeaderboardDefinition")
    day = datetime.now(UTC).date() - timedelta(days=3)
    async with services.databases.main_session() as session:
        definition = await session.get(Leaderboard, board_id)
        submissions = [
            Submission(decode_id(player["id"], "User"), score, services.ids.next_id())
            for player, score in ((players[0], 4.0), (players[1], 9.0))
        ]
        await record_scores(session, board=definition, period=day.isoformat(), submissions=submissions)
        await session.commit()
    await submit_score(gql, token=service, board=board["name"], user_id=players[2]["id"], score=1)

    assert await ranking(gql, board["name"], period=day.isoformat()) == [
        (players[1]["id"], 9.0),
        (players[0]["id"], 4.0),
    ]
    assert await ranking(gql, board["name"]) == [(players[2]["id"], 1.0)]
    entry = await gql.ok(ENTRY, {"name": board["name"], "user": players[0]["id"], "period": day.isoformat()})
    assert entry["leaderboard"]["entry"] == {
        "rank": 2,
        "score": 4.0,
        "userId": players[0]["id"],
        "user": {"username": players[0]["username"]},
    }
    ttl = await services.redis.pttl(keys_of(services, board, day.isoformat()).parts[0].users)
    assert 0 < ttl <= settings.leaderboard_history_cache_seconds * 1000


@pytest.mark.parametrize(
    ("period", "text", "key", "starts", "ends"),
    [
        (Period.DAILY, "2026-11-23", "2026-11-23", date(2026, 11, 23), date(2026, 11, 24)),
        (Period.WEEKLY, "2026-11-23", "2026-W48", date(2026, 11, 23), date(2026, 11, 30)),
        (Period.WEEKLY, "2027-01-01", "2026-W53", date(2026, 12, 28), date(2027, 1, 4)),
        (Period.WEEKLY, "2026-W01", "2026-W01", date(2025, 12, 29), date(2026, 1, 5)),
        (Period.MONTHLY, "2026-12-31", "2026-12", date(2026, 12, 1), date(2027, 1, 1)),
        (Period.MONTHLY, "2024-02", "2024-02", date(2024, 2, 1), date(2024, 3, 1)),
    ],
)
def test_periods_are_utc_days_iso_weeks_and_months(period, text, key, starts, ends):
    window = parse_window(period, text)
    assert window.key == key
    assert window.starts_at == datetime.combine(starts, datetime.min.time(), tzinfo=UTC)
    assert window.ends_at == datetime.combine(ends, datetime.min.time(), tzinfo=UTC)


def test_all_time_has_one_period():
    window = parse_window(Period.ALL_TIME, "all")
    assert (window.key, window.starts_at, window.ends_at) == ("all", None, None)
