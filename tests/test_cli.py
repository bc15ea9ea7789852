from __future__ import annotations

import jwt

from mediagraph.security import SERVICE_ROLE

MEDIA_OF = "query($u: String!) { user(username: $u) { media(first: 100) { edges { node { contentType } } } } }"


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


async def test_demo_loads_users_and_playable_media(live_servers, gql, http):
    result = live_servers.run("demo", "--users", "2", "--media", "4")
    assert result.returncode == 0, result.stderr
    data = await gql.ok(MEDIA_OF, {"u": "demo_0"})
    media = data["user"]["media"]["edges"]
    data_1 = await gql.ok(MEDIA_OF, {"u": "demo_1"})
    assert len(media) + len(data_1["user"]["media"]["edges"]) >= 4
    assert {edge["node"]["contentType"] for edge in media} <= {"image/png"}


def test_unknown_worker_is_refused(live_servers):
    result = live_servers.run("worker", "no-such-worker")
    assert result.returncode != 0
    assert "unknown worker" in result.stderr
