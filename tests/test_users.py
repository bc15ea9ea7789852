from __future__ import annotations

import pytest

from tests.support.factories import PASSWORD, create_user, unique_name

ME = "query { me { id username nickname } }"
LOGIN = "mutation($u: String!, $p: String!) { login(username: $u, password: $p) { token user { username } } }"
CHANGE_NICKNAME = "mutation($n: String!) { changeNickname(nickname: $n) { nickname } }"
USER = "query($u: String!) { user(username: $u) { id username nickname } }"


async def test_register_then_login_then_me(gql):
    name = unique_name()
    token, user = await create_user(gql, username=name.upper(), nickname="Alice")
    assert user["username"] == name
    assert (await gql.ok(ME, token=token))["me"] == user
    login = await gql.ok(LOGIN, {"u": name, "p": PASSWORD})
    assert login["login"]["user"]["username"] == name
    assert (await gql.ok(ME, token=login["login"]["token"]))["me"]["nickname"] == "Alice"


async def test_me_is_null_without_token(gql):
    assert (await gql.ok(ME))["me"] is None


async def test_duplicate_username_is_a_conflict(gql):
    name = unique_name()
    await create_user(gql, username=name)
    code = await gql.error_code(
        'mutation($u: String!) { register(username: $u, password: "long enough") { token } }', {"u": name}
    )
    assert code == "CONFLICT"


async def test_wrong_password_is_unauthenticated(gql):
    name = unique_name()
    await create_user(gql, username=name)
    assert await gql.error_code(LOGIN, {"u": name, "p": "not the password"}) == "UNAUTHENTICATED"
    assert await gql.error_code(LOGIN, {"u": unique_name(), "p": "whatever!!"}) == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    "header",
    ["Bearer not-a-jwt", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "Basic abc", "Bearer "],
)
async def test_bad_tokens_are_unauthenticated(http, header):
    response = await http.post("/graphql", json={"query": ME}, headers={"authorization": header})
    body = response.json()
    assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


async def test_token_signed_with_another_secret_is_rejected(gql):
    import jwt

    forged = jwt.encode({"sub": "1", "exp": 4102444800}, "someone-elses-secret", algorithm="HS256")
    assert await gql.error_code(ME, token=forged) == "UNAUTHENTICATED"


async def test_a_token_verified_before_is_refused_once_it_expires(gql, settings, monkeypatch):
    import time

    import jwt

    from mediagraph import security
    from mediagraph.ids import decode_id

    _, user = await create_user(gql)
    expires = int(time.time()) + 60
    token = jwt.encode(
        {"sub": str(decode_id(user["id"], "User")), "ver": 0, "exp": expires}, settings.secret_key, algorithm="HS256"
    )
    assert (await gql.ok(ME, token=token))["me"]["id"] == user["id"]
    # Verified once, the token is now known to this process; its expiry still holds.
    monkeypatch.setattr(security.time, "time", lambda: expires + 1)
    response = await gql(ME, token=token)
    assert response["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert response["errors"][0]["message"] == "The access token has expired."


async def test_login_is_rate_limited_per_username(gql):
    name = unique_name()
    await create_user(gql, username=name)
    codes = [await gql.error_code(LOGIN, {"u": name, "p": "wrong password"}) for _ in range(6)]
    assert codes[:5] == ["UNAUTHENTICATED"] * 5
    assert codes[5] == "RATE_LIMITED"
    # Even the right password waits out the window.
    assert await gql.error_code(LOGIN, {"u": name, "p": PASSWORD}) == "RATE_LIMITED"


async def test_login_is_rate_limited_per_address(gql, services, settings):
    from mediagraph import ratelimit
    from mediagraph.keys.users import login_attempts_by_address

    key = login_attempts_by_address(services.keys, "203.0.113.7")
    await services.redis.set(key, settings.login_attempts_per_address, ex=60)
    try:
        assert await gql.error_code(LOGIN, {"u": unique_name(), "p": "whatever!!"}) == "RATE_LIMITED"
    finally:
        await ratelimit.reset(services.redis, key)


@pytest.mark.parametrize(
    ("username", "password"),
    [
        ("ab", "long enough"),
        ("has space", "long enough"),
        ("ok_name", "short"),
        ("x" * 33, "long enough"),
        ("ok_name", "p" * 129),
    ],
)
async def test_invalid_registration_is_bad_user_input(gql, username, password):
    code = await gql.error_code(
        "mutation($u: String!, $p: String!) { register(username: $u, password: $p) { token } }",
        {"u": username, "p": password},
    )
    assert code == "BAD_USER_INPUT"


async def test_nickname_changes_at_most_once_a_day(gql):
    token, user = await create_user(gql)
    assert (await gql.ok(CHANGE_NICKNAME, {"n": "First"}, token=token))["changeNickname"]["nickname"] == "First"
    assert await gql.error_code(CHANGE_NICKNAME, {"n": "Second"}, token=token) == "RATE_LIMITED"
    assert (await gql.ok(USER, {"u": user["username"]}))["user"]["nickname"] == "First"


@pytest.mark.parametrize("nickname", ["", "   ", "x" * 41, "bad\x00char"])
async def test_invalid_nickname_is_bad_user_input(gql, nickname):
    token, _ = await create_user(gql)
    assert await gql.error_code(CHANGE_NICKNAME, {"n": nickname}, token=token) == "BAD_USER_INPUT"


async def test_change_nickname_requires_login(gql):
    assert await gql.error_code(CHANGE_NICKNAME, {"n": "Nobody"}) == "UNAUTHENTICATED"


async def test_unknown_or_malformed_username_is_null(gql):
    assert (await gql.ok(USER, {"u": unique_name()}))["user"] is None
    assert (await gql.ok(USER, {"u": "../../etc"}))["user"] is None
