"""Keyword-only factories that go through the public API, as a client would."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from mediagraph.demo import png_image
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
