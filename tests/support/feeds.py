"""Helpers for feed tests: drive the fan-out worker in-process, post in the past, read feeds."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mediagraph.ids import SnowflakeGenerator, decode_id
from mediagraph.keys.feeds import Entry, newsfeed
from mediagraph.services import Services
from mediagraph.workers import feeds as fanout
from tests.support.graphql import GraphQLClient

NEWSFEED = """
query($first: Int, $after: String) {
  newsfeed(first: $first, after: $after) {
    edges { cursor node { id text author { username } } }
    pageInfo { hasNextPage endCursor }
  }
}
"""

# Node ids no running process uses, one per backdated generator.
_PAST_NODES = itertools.count(900)


async def drain_fanout(services: Services, consumer: str = "tests") -> None:
    """Runs the fan-out worker's steps in this process until the stream has nothing new."""
    await fanout.ensure_group(services)
    while await fanout.consume_once(services, consumer):
        pass


@contextmanager
def posting_days_ago(services: Services, days: float) -> Iterator[None]:
    """Posts created meanwhile get ids (and so times) from `days` ago, as if written then."""
    real = services.ids
    services.ids = SnowflakeGenerator(next(_PAST_NODES), clock=lambda: time.time() - days * 86400)
    try:
        yield
    finally:
        services.ids = real


async def newsfeed_ids(gql: GraphQLClient, *, token: str, first: int = 10) -> list[str]:
    """Every post of the viewer's news feed, scrolling to the end."""
    ids: list[str] = []
    after = None
    while True:
        page = (await gql.ok(NEWSFEED, {"first": first, "after": after}, token=token))["newsfeed"]
        ids += [edge["node"]["id"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return ids
        after = page["pageInfo"]["endCursor"]


async def first_page(gql: GraphQLClient, *, token: str, first: int = 10) -> list[str]:
    page: dict[str, Any] = (await gql.ok(NEWSFEED, {"first": first}, token=token))["newsfeed"]
    return [edge["node"]["id"] for edge in page["edges"]]


async def cached_newsfeed(services: Services, user_global_id: str) -> list[Entry] | None:
    """The viewer's cached news feed, newest first; None when it has none."""
    key = newsfeed(services.keys, decode_id(user_global_id, "User"))
    if not await services.redis.exists(key):
        return None
    return [Entry.parse(member) for member in reversed(await services.redis.zrange(key, 0, -1))]


def post_ids(entries: list[Entry] | None) -> list[int]:
    return [entry.post_id for entry in entries or [] if entry.author_id is not None]


def raw(global_ids: list[str]) -> list[int]:
    return [decode_id(global_id, "Post") for global_id in global_ids]
