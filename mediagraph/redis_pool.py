"""Redis clients whose pool waits for a free connection instead of failing.

redis-py's default pool raises `MaxConnectionsError` the moment a burst needs more
connections than its limit (100): under load some requests failed that a few
milliseconds of waiting would have served. A blocking pool queues them; a request
that still finds none within `POOL_WAIT_SECONDS` fails as Redis being unavailable.
"""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis

POOL_WAIT_SECONDS = 5
SOCKET_TIMEOUT_SECONDS = 5


def redis_client(url: str, *, max_connections: int) -> Redis:
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=POOL_WAIT_SECONDS,
        socket_timeout=SOCKET_TIMEOUT_SECONDS,
        socket_connect_timeout=SOCKET_TIMEOUT_SECONDS,
    )
    return Redis(connection_pool=pool)
