"""Lua scripts run by SHA, reloaded when Redis lost them (a restart empties the script cache).

In a pipeline, EVALSHA is queued as a raw command (`queue_evalsha`): redis-py's cluster
pipeline refuses its `evalsha` method, yet routes the raw command by its keys like any
other, and a script's keys always share one slot (keys/).
"""

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
        queue_evalsha(pipe, self.sha, keys, args)


def queue_evalsha(pipe: Pipeline, sha: str, keys: Sequence[str], args: Sequence[Any]) -> None:
    """Queue EVALSHA on a pipeline of one Redis or of a cluster."""
    pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)


async def reload_if_lost(redis: Redis, scripts: Sequence[Lua], replies: Sequence[Any]) -> bool:
    """After a pipeline run with `raise_on_error=False`: loads `scripts` again when a reply says
    Redis lost them (so retrying the failed calls works); whether it did."""
    if not any(isinstance(reply, NoScriptError) for reply in replies):
        return False
    for script in scripts:
        await redis.script_load(script.source)
    return True


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
