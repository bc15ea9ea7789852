"""Automatic Persisted Queries: clients send a query's SHA-256 instead of its text.

A client first sends only `extensions.persistedQuery.sha256Hash`; on
PERSISTED_QUERY_NOT_FOUND it sends the text with the hash, which registers it once
the hash matches and the document validates. Registered texts live in Redis, so a
hash registered through one process is served by every other; each process keeps a
bounded local copy of the ones it has seen. Redis keeps at most
`persisted_queries_max` texts, the least recently registered or fetched out first.
Redis being unavailable only costs a round trip: lookups miss (clients resend the
text) and registrations are skipped.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections import OrderedDict
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mediagraph.errors import BadUserInput, PersistedQueryNotFound
from mediagraph.keys import KeySpace
from mediagraph.keys.persisted_queries import REGISTER_SCRIPT, persisted_query_order, persisted_query_texts
from mediagraph.observability import metrics

log = logging.getLogger(__name__)

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
SUPPORTED_VERSION = 1

def requested_hash(extensions: dict[str, Any] | None) -> str | None:
    """The SHA-256 a request names in `extensions.persistedQuery`, checked; None when it names none."""
    if not extensions or "persistedQuery" not in extensions:
        return None
    persisted = extensions["persistedQuery"]
    if not isinstance(persisted, dict):
        raise BadUserInput("`extensions.persistedQuery` must be an object.")
    if persisted.get("version", SUPPORTED_VERSION) != SUPPORTED_VERSION:
        raise BadUserInput(f"Only version {SUPPORTED_VERSION} of persisted queries is supported.")
    digest = persisted.get("sha256Hash")
    if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest.lower()):
        raise BadUserInput("`extensions.persistedQuery.sha256Hash` must be a SHA-256 in hexadecimal.")
    return digest.lower()


def query_hash(query: str) -> str:
    return hashlib.sha256(query.encode()).hexdigest()


class PersistedQueries:
    def __init__(self, *, local_size: int, max_stored: int) -> None:
        self.local_size = local_size
        self.max_stored = max_stored
        self._local: OrderedDict[str, str] = OrderedDict()

    def _remember(self, digest: str, query: str) -> None:
        self._local[digest] = query
        self._local.move_to_end(digest)
        if len(self._local) > self.local_size:
            self._local.popitem(last=False)

    def known(self, digest: str) -> bool:
        return digest in self._local

    async def lookup(self, redis: Redis, keys: KeySpace, digest: str) -> str:
        """The text registered under `digest`; PersistedQueryNotFound when no process registered it."""
        query = self._local.get(digest)
        if query is not None:
            metrics.count_persisted_query(hit=True)
            self._local.move_to_end(digest)
            return query
        try:
            async with redis.pipeline(transaction=False) as pipe:
                pipe.hget(persisted_query_texts(keys), digest)
                # Fetching counts as use: a query clients still send is not the next evicted.
                pipe.zadd(persisted_query_order(keys), {digest: time.time()}, xx=True)
                stored, _ = await pipe.execute()
        except (RedisError, OSError) as error:
            log.warning("persisted query lookup failed: %s", error)
            stored = None
        metrics.count_persisted_query(hit=stored is not None)
        if stored is None:
            raise PersistedQueryNotFound("PersistedQueryNotFound")
        query = stored.decode() if isinstance(stored, bytes) else str(stored)
        self._remember(digest, query)
        return query

    async def register(self, redis: Redis, keys: KeySpace, digest: str, query: str) -> None:
        """Store a text whose hash matched and whose document validated, for every process."""
        if self.known(digest):
            return
        try:
            await redis.eval(
                REGISTER_SCRIPT,
                2,
                persisted_query_texts(keys),
                persisted_query_order(keys),
                digest,
                query,
                str(time.time()),
                str(self.max_stored),
            )
        except (RedisError, OSError) as error:
            # The request still runs; the next process to need the hash asks for the text again.
            log.warning("persisted query registration failed: %s", error)
        self._remember(digest, query)
