"""Lua scripts run by SHA, reloaded when Redis lost them (a restart empties the script cache),
and pipelines merged across requests (`run_batched`).

In a pipeline, EVALSHA is queued as a raw command (`queue_evalsha`): redis-py's cluster
pipeline refuses its `evalsha` method, yet routes the raw command by its keys like any
other, and a script's keys always share one slot (keys/).
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from mediagraph.redis_pool import execute_batch
from mediagraph.turns import after_next_turn


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

    async def run_batched(self, redis: Redis, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """`run`, sent in one pipeline with the other batched calls of this moment (`run_batched`)."""
        [reply] = await run_batched(redis, [self], lambda pipe: self.queue(pipe, keys, args))
        return reply


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


@dataclass(frozen=True)
class Lane:
    """How one kind of call is batched: the batches of one Redis under way at once, and the asks
    one batch takes at most (None: all that wait).

    A batch due while its lane's batches are all out waits for one to come back and takes along
    what was asked meanwhile: under load a batch holds what arrived during a round trip, not
    only during one turn of the loop, and each request's share of the socket writes and reads
    shrinks with it. An idle loop sends at once.
    """

    max_in_flight: int
    max_asks: int | None


# Calls Redis runs in a few microseconds (a view counted, a page's step, a score): one batch out
# at a time, holding everything asked meanwhile.
CHEAP = Lane(max_in_flight=1, max_asks=None)
# Calls Redis runs for tens of microseconds (a playback heartbeat's script): a batch's replies
# all come back once Redis has run its last script, so one batch of every request in flight
# leaves the server idle while Redis runs it, then Redis idle while the server answers them all.
# Two smaller batches keep both at work; for cheap calls the smaller batches only cost more
# socket writes (BENCHMARKS.md: reportPlayback, two Redis batches out).
HEAVY = Lane(max_in_flight=2, max_asks=16)


def run_batched(
    redis: Redis, scripts: Sequence[Lua], build: Callable[[Pipeline], None], *, lane: Lane = CHEAP
) -> asyncio.Future[list[Any]]:
    """`run_pipeline`, merged with the other calls of its lane made until the event loop has turned
    once more (`turns.py`).

    Each request's round trip costs a write and a read on the socket, system calls that
    cost more than the commands themselves; concurrent requests' commands go out together
    instead (as `db/reads.py` merges reads). Each caller gets its own commands' replies, or
    the first error among them. A caller whose scripts Redis lost runs alone once they are
    loaded, so `build` must queue commands that may run twice (scripts that are idempotent).
    On one Redis a batch makes its round trip by `redis_pool.execute_batch`, on a cluster by
    redis-py's pipeline.

    The caller awaits the batch's future itself (this is no coroutine): every frame between
    a request and its reply is resumed when the reply comes, once per request.
    """
    lanes = _batchers.get(redis)
    if lanes is None:
        lanes = _batchers[redis] = {}
    batcher = lanes.get(lane)
    if batcher is None:
        batcher = lanes[lane] = _StepPipeline(redis, lane)
    return batcher.ask(scripts, build)


_Waiting = tuple[Sequence[Lua], Callable[[Pipeline], None], "asyncio.Future[list[Any]]"]
_batchers: weakref.WeakKeyDictionary[Redis, dict[Lane, _StepPipeline]] = weakref.WeakKeyDictionary()
_by_pipeline: weakref.WeakSet[Redis] = weakref.WeakSet()
# Batches being sent, held so they are not collected before they finish.
_sending: set[asyncio.Task[None]] = set()


async def run_together(redis: Redis, build: Callable[[Pipeline], None]) -> list[Any]:
    """Commands queued by `build`, sent now in one round trip; a reply per command, error replies in
    place (scripts Redis lost are not loaded again). How every batch goes out (`run_batched`'s, and a
    caller's that is itself a batch of requests): by `execute_batch` on one Redis, by redis-py's
    pipeline on a cluster or where `batch_by_pipeline` asks for it."""
    async with redis.pipeline(transaction=False) as pipe:
        build(pipe)
        if isinstance(redis, RedisCluster) or redis in _by_pipeline:
            return await pipe.execute(raise_on_error=False)
        return await execute_batch(redis, pipe)


def batch_by_pipeline(redis: Redis) -> None:
    """Send `redis`'s batches through redis-py's pipeline instead of `execute_batch`, as on a
    cluster (whose pipeline splits a batch by node): what `mediagraph bench playback` compares
    the round trip with."""
    _by_pipeline.add(redis)


class _StepPipeline:
    def __init__(self, redis: Redis, lane: Lane) -> None:
        self.redis = redis
        self.lane = lane
        self.waiting: list[_Waiting] = []
        self.in_flight = 0

    def ask(self, scripts: Sequence[Lua], build: Callable[[Pipeline], None]) -> asyncio.Future[list[Any]]:
        loop = asyncio.get_running_loop()
        # Asks already waiting have a send coming: a turn later, or when the batch out returns.
        if not self.waiting and self.in_flight < self.lane.max_in_flight:
            after_next_turn(loop, self._dispatch)
        future: asyncio.Future[list[Any]] = loop.create_future()
        self.waiting.append((scripts, build, future))
        return future

    def _dispatch(self) -> None:
        while self.waiting and self.in_flight < self.lane.max_in_flight:
            size = self.lane.max_asks or len(self.waiting)
            waiting = self.waiting[:size]
            del self.waiting[:size]
            self.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._sent(waiting))
            _sending.add(task)
            task.add_done_callback(_sending.discard)

    async def _sent(self, waiting: list[_Waiting]) -> None:
        try:
            await self._send(waiting)
        finally:
            self.in_flight -= 1
            # What was asked while the batch was out goes at once, together.
            self._dispatch()

    async def _send(self, waiting: list[_Waiting]) -> None:
        sizes: list[int] = []

        def build_all(pipe: Pipeline) -> None:
            for _, build, _ in waiting:
                before = len(pipe)
                build(pipe)
                sizes.append(len(pipe) - before)

        try:
            replies = await run_together(self.redis, build_all)
        except Exception as error:
            for _, _, future in waiting:
                if not future.done():
                    future.set_exception(error)
            return
        at = 0
        lost: list[_Waiting] = []
        for entry, size in zip(waiting, sizes, strict=True):
            mine, at = replies[at : at + size], at + size
            errors = [reply for reply in mine if isinstance(reply, Exception)]
            if any(isinstance(error, NoScriptError) for error in errors):
                lost.append(entry)
                continue
            failed = errors[0] if errors else None
            future = entry[2]
            if future.done():
                continue
            if failed is not None:
                future.set_exception(failed)
            else:
                future.set_result(mine)
        for scripts, build, future in lost:
            try:
                result = await run_pipeline(self.redis, scripts, build)
            except Exception as error:
                if not future.done():
                    future.set_exception(error)
            else:
                if not future.done():
                    future.set_result(result)
