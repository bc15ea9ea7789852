"""Lua scripts run by SHA, reloaded when Redis lost them (a restart empties the script cache)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError


@dataclass(frozen=True)
class Lua:
    """A script run by EVALSHA; loaded on demand (after a Redis restart, scripts are gone)."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())

    async def run(self, redis: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await redis.script_load(self.source)
            return await redis.evalsha(self.sha, len(keys), *keys, *args)

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        pipe.evalsha(self.sha, len(keys), *keys, *args)


async def run_pipeline(redis: Redis, scripts: Sequence[Lua], build: Callable[[Pipeline], None]) -> list[Any]:
    """Execute a pipeline of EVALSHAs in one round trip, loading `scripts` once if Redis lost them."""
    for attempt in range(2):
        async with redis.pipeline(transaction=False) as pipe:
            build(pipe)
            try:
                return await pipe.execute()
            except NoScriptError:
                if attempt:
                    raise
        for script in scripts:
            await redis.script_load(script.source)
    raise AssertionError("unreachable")
