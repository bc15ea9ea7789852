from __future__ import annotations

import jwt

from mediagraph.security import SERVICE_ROLE


def test_schema_prints_the_sdl(live_servers):
    result = live_servers.run("schema")
    assert result.returncode == 0, result.stderr
    assert "type Query {" in result.stdout
    assert "interface Node {" in result.stdout
    assert "uploadMedia(file: Upload!" in result.stdout


def test_migrate_is_repeatable(live_servers):
    for _ in range(2):
        result = live_servers.run("migrate")
        assert result.returncode == 0, result.stderr


def test_service_token_carries_the_service_role(live_servers, settings):
    result = live_servers.run("token", "--service")
    assert result.returncode == 0, result.stderr
    claims = jwt.decode(result.stdout.strip(), settings.secret_key, algorithms=["HS256"])
    assert claims["role"] == SERVICE_ROLE


def test_token_needs_exactly_one_subject(live_servers):
    assert live_servers.run("token").returncode != 0


DEMO_USER = """
query($u: String!) {
  user(username: $u) {
    followingCount
    posts(first: 5) { edges { node { text } } }
    media(first: 10) { edges { node { contentType likeCount commentCount viewCount playbackStats { total } } } }
  }
}
"""
DEMO_BOARD = '{ leaderboard(name: "demo-points") { size top(first: 3) { edges { node { rank } } } } }'


async def test_demo_loads_every_kind_of_data_through_the_api_once(live_servers, gql):
    result = live_servers.run("demo", "--users", "3", "--media", "4")
    assert result.returncode == 0, result.stderr
    users = [(await gql.ok(DEMO_USER, {"u": f"demo_{n}"}))["user"] for n in range(3)]
    media = [edge["node"] for user in users for edge in user["media"]["edges"]]
    assert len(media) == 4
    assert {item["contentType"] for item in media} == {"image/png"}
    assert all(item["likeCount"] >= 1 and item["commentCount"] >= 1 for item in media)
    assert all(item["viewCount"] >= 1 and item["playbackStats"]["total"] == 1 for item in media)
    assert all(len(user["posts"]["edges"]) == 2 for user in users)
    assert sum(user["followingCount"] for user in users) >= 1
    assert (await gql.ok(DEMO_BOARD))["leaderboard"]["size"] == 3

    again = live_servers.run("demo", "--users", "3", "--media", "4")
    assert again.returncode == 0, again.stderr
    assert "already loaded" in again.stderr
    users_after = [(await gql.ok(DEMO_USER, {"u": f"demo_{n}"}))["user"] for n in range(3)]
    assert sum(len(user["media"]["edges"]) for user in users_after) == 4


def test_unknown_worker_is_refused(live_servers):
    result = live_servers.run("worker", "no-such-worker")
    assert result.returncode != 0
    assert "unknown worker" in result.stderr
