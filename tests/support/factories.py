"""Keyword-only factories that go through the public API, as a client would."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from mediagraph import security
from mediagraph.demo import png_image
from mediagraph.settings import Settings
from tests.support.graphql import GraphQLClient

REGISTER = """
mutation Register($username: String!, $password: String!, $nickname: String) {
  register(username: $username, password: $password, nickname: $nickname) {
    token
    user { id username nickname }
  }
}
"""

UPLOAD = """
mutation Upload($file: Upload!, $title: String!, $tags: [String!]) {
  uploadMedia(file: $file, title: $title, tags: $tags) { id title tags contentType sizeBytes contentUrl }
}
"""

PASSWORD = "correct horse battery"


def unique_name(prefix: str = "u") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


async def create_user(
    gql: GraphQLClient, *, username: str | None = None, nickname: str | None = None
) -> tuple[str, dict[str, Any]]:
    data = await gql.ok(REGISTER, {"username": username or unique_name(), "password": PASSWORD, "nickname": nickname})
    return data["register"]["token"], data["register"]["user"]


async def upload(
    http: httpx.AsyncClient,
    *,
    token: str,
    title: str = "A title",
    tags: list[str] | None = None,
    content: bytes | None = None,
    content_type: str = "image/png",
    filename: str = "picture.png",
) -> httpx.Response:
    """A GraphQL multipart request (the spec's `operations` + `map` + file parts)."""
    operations = {"query": UPLOAD, "variables": {"file": None, "title": title, "tags": tags or []}}
    return await http.post(
        "/graphql",
        headers={"authorization": f"Bearer {token}"},
        data={"operations": json.dumps(operations), "map": json.dumps({"0": ["variables.file"]})},
        files={"0": (filename, content if content is not None else png_image(8, 8, (10, 20, 30)), content_type)},
    )


async def create_media(
    http: httpx.AsyncClient, *, token: str, title: str = "A title", tags: list[str] | None = None
) -> dict[str, Any]:
    response = await upload(http, token=token, title=title, tags=tags)
    body = response.json()
    assert not body.get("errors"), body
    return body["data"]["uploadMedia"]  # type: ignore[no-any-return]


FOLLOW = "mutation($id: ID!) { follow(userId: $id) { id followerCount } }"
CREATE_POST = (
    "mutation($text: String!, $mediaId: ID) { createPost(text: $text, mediaId: $mediaId) { id text createdAt } }"
)


async def follow(gql: GraphQLClient, *, token: str, user_id: str) -> None:
    await gql.ok(FOLLOW, {"id": user_id}, token=token)


async def create_post(gql: GraphQLClient, *, token: str, text: str = "Hello", media_id: str | None = None) -> str:
    """Posts as the token's user; returns the post's global id."""
    data = await gql.ok(CREATE_POST, {"text": text, "mediaId": media_id}, token=token)
    return data["createPost"]["id"]  # type: ignore[no-any-return]


User = tuple[str, dict[str, Any]]


async def followed_author(gql: GraphQLClient, *, followers: int = 1) -> tuple[User, list[User]]:
    """An author and `followers` users following them, each as (token, user)."""
    author = await create_user(gql)
    fans = [await create_user(gql) for _ in range(followers)]
    for token, _ in fans:
        await follow(gql, token=token, user_id=author[1]["id"])
    return author, fans


RECORD_VIEW = "mutation($id: ID!) { recordView(mediaId: $id) { counted } }"


async def record_views(
    http: httpx.AsyncClient, *, media_id: str, count: int, agent: str | None = None, concurrency: int = 16
) -> int:
    """`count` views of one media by distinct anonymous viewers (each its own user agent); returns how many counted."""
    base = agent or unique_name("agent")
    counted = 0
    for start in range(0, count, concurrency):
        responses = await asyncio.gather(
            *(
                http.post(
                    "/graphql",
                    json={"query": RECORD_VIEW, "variables": {"id": media_id}},
                    headers={"user-agent": f"{base}-{n}"},
                )
                for n in range(start, min(start + concurrency, count))
            )
        )
        for response in responses:
            body = response.json()
            assert not body.get("errors"), body
            counted += body["data"]["recordView"]["counted"]
    return counted


ADD_COMMENT = """
mutation AddComment($mediaId: ID!, $content: String!, $parentId: ID) {
  addComment(mediaId: $mediaId, content: $content, parentId: $parentId) {
    id depth content deleted writerNickname createdAt
  }
}
"""


async def add_comment(
    gql: GraphQLClient, *, token: str, media_id: str, content: str = "A comment", parent_id: str | None = None
) -> dict[str, Any]:
    data = await gql.ok(ADD_COMMENT, {"mediaId": media_id, "content": content, "parentId": parent_id}, token=token)
    return data["addComment"]  # type: ignore[no-any-return]


DEFINE_LEADERBOARD = """
mutation Define($name: String!, $sortOrder: LeaderboardSortOrder!, $operator: ScoreOperator!,
                $period: LeaderboardPeriod!, $bounds: [Float!], $min: Float, $max: Float) {
  defineLeaderboard(name: $name, sortOrder: $sortOrder, operator: $operator, period: $period,
                    partitionBounds: $bounds, minScore: $min, maxScore: $max) {
    id name sortOrder operator period partitionBounds minScore maxScore
  }
}
"""

SUBMIT_SCORE = """
mutation Submit($board: String!, $user: ID!, $score: Float!) {
  submitScore(leaderboard: $board, userId: $user, score: $score) { changed entry { rank score } }
}
"""


def service_token(settings: Settings) -> str:
    """What `mediagraph token --service` prints: a token for trusted callers."""
    return security.issue_token(settings, user_id=1, role=security.SERVICE_ROLE, token_version=0)


async def define_leaderboard(
    gql: GraphQLClient,
    *,
    token: str,
    name: str | None = None,
    sort_order: str = "DESC",
    operator: str = "BEST",
    period: str = "ALL_TIME",
    partition_bounds: list[float] | None = None,
    min_score: float | None = None,
    max_score: float | None = None,
) -> dict[str, Any]:
    variables = {
        "name": name or unique_name("board").lower(),
        "sortOrder": sort_order,
        "operator": operator,
        "period": period,
        "bounds": partition_bounds,
        "min": min_score,
        "max": max_score,
    }
    return (await gql.ok(DEFINE_LEADERBOARD, variables, token=token))["defineLeaderboard"]  # type: ignore[no-any-return]


async def submit_score(gql: GraphQLClient, *, token: str, board: str, user_id: str, score: float) -> dict[str, Any]:
    data = await gql.ok(SUBMIT_SCORE, {"board": board, "user": user_id, "score": score}, token=token)
    return data["submitScore"]  # type: ignore[no-any-return]
