"""Fixed-window rate limits counted in Redis, shared by every API process."""

from __future__ import annotations

from redis.asyncio import Redis

from mediagraph.errors import RateLimited


async def hit(redis: Redis, key: str, *, limit: int, window_seconds: int) -> None:
    """Count one attempt against `key`; raise RateLimited once `limit` is exceeded."""
    async with redis.pipeline(transaction=True) as pipe:
        # SET NX starts the window; EXPIRE NX would need Redis 7 and the embedded one is 6.2.
        pipe.set(key, 0, ex=window_seconds, nx=True)
        pipe.incr(key)
        pipe.ttl(key)
        _, count, ttl = await pipe.execute()
    if count > limit:
        raise RateLimited("Too many attempts; try again later.", retry_after=max(int(ttl), 1))


async def reset(redis: Redis, key: str) -> None:
    await redis.delete(key)
