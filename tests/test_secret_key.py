"""The token signing key: configured, or random and kept in the data directory; never a published one."""

from __future__ import annotations

import stat
import threading

import httpx
import jwt
import pytest
from pydantic import ValidationError

from mediagraph import security
from mediagraph.settings import PUBLISHED_SECRETS, SECRET_KEY_FILE, Settings

PUBLISHED = "mediagraph-development-secret-change-me"

DEFINE = """
mutation { defineLeaderboard(name: "stolen", sortOrder: DESC, operator: BEST, period: ALL_TIME) { name } }
"""
REGISTER = """
mutation($username: String!) { register(username: $username, password: "correct horse battery") { token } }
"""
ME = "{ me { username } }"


def test_the_key_from_the_old_source_is_listed_as_published():
    assert PUBLISHED in PUBLISHED_SECRETS


def test_without_a_key_one_is_made_once_and_kept_private(tmp_path):
    first = Settings(data_dir=tmp_path, secret_key="")
    key_file = tmp_path / SECRET_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text() == first.secret_key
    assert len(bytes.fromhex(first.secret_key)) == 32
    assert Settings(data_dir=tmp_path, secret_key="").secret_key == first.secret_key
    assert Settings(data_dir=tmp_path / "elsewhere", secret_key="").secret_key != first.secret_key


def test_processes_starting_together_share_one_key(tmp_path):
    keys: list[str] = []
    threads = [
        threading.Thread(target=lambda: keys.append(Settings(data_dir=tmp_path, secret_key="").secret_key))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 8
    assert len(set(keys)) == 1
    assert [path.name for path in tmp_path.iterdir()] == [SECRET_KEY_FILE]


def test_a_key_file_others_can_read_is_refused(tmp_path):
    Settings(data_dir=tmp_path, secret_key="")
    (tmp_path / SECRET_KEY_FILE).chmod(0o644)
    with pytest.raises(ValidationError, match="chmod 600"):
        Settings(data_dir=tmp_path, secret_key="")


@pytest.mark.parametrize("environment", ["development", "production", "test"])
def test_the_published_key_is_refused_in_every_environment(tmp_path, monkeypatch, environment):
    with pytest.raises(ValidationError, match="published"):
        Settings(data_dir=tmp_path, environment=environment, secret_key=PUBLISHED)
    monkeypatch.setenv("MEDIAGRAPH_SECRET_KEY", PUBLISHED)
    monkeypatch.setenv("MEDIAGRAPH_ENVIRONMENT", environment)
    with pytest.raises(ValidationError, match="published"):
        Settings(data_dir=tmp_path)


def test_the_published_key_is_refused_from_the_key_file_too(tmp_path):
    key_file = tmp_path / SECRET_KEY_FILE
    key_file.write_text(PUBLISHED)
    key_file.chmod(0o600)
    with pytest.raises(ValidationError, match="published"):
        Settings(data_dir=tmp_path, secret_key="")


def test_production_needs_a_configured_key(tmp_path):
    with pytest.raises(ValidationError, match="MEDIAGRAPH_SECRET_KEY"):
        Settings(data_dir=tmp_path, environment="production", secret_key="")
    assert not (tmp_path / SECRET_KEY_FILE).exists()


def test_a_server_started_without_a_key_refuses_tokens_signed_with_the_published_one(live_servers, tmp_path):
    data_dir = tmp_path / "data"
    base = live_servers.start(MEDIAGRAPH_SECRET_KEY="", MEDIAGRAPH_DATA_DIR=str(data_dir))
    key = (data_dir / SECRET_KEY_FILE).read_text()
    assert stat.S_IMODE((data_dir / SECRET_KEY_FILE).stat().st_mode) == 0o600

    forged = security.issue_token(
        Settings(data_dir=tmp_path, secret_key="x" * 64).model_copy(update={"secret_key": PUBLISHED}),
        user_id=1,
        role=security.SERVICE_ROLE,
        token_version=0,
    )
    refused = httpx.post(f"{base}/graphql", json={"query": DEFINE}, headers={"authorization": f"Bearer {forged}"})
    assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"

    registered = httpx.post(f"{base}/graphql", json={"query": REGISTER, "variables": {"username": "keyholder"}})
    token = registered.json()["data"]["register"]["token"]
    assert jwt.decode(token, key, algorithms=["HS256"])["sub"]
    me = httpx.post(f"{base}/graphql", json={"query": ME}, headers={"authorization": f"Bearer {token}"})
    assert me.json()["data"]["me"] == {"username": "keyholder"}
