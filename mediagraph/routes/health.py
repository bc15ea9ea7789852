"""Liveness and readiness: /healthz says the process runs, /readyz what each dependency says and why.

/readyz asks the main PostgreSQL, every shard and Redis at once (each within
`CHECK_TIMEOUT_SECONDS`) and answers 503 naming the main PostgreSQL or Redis when they
fail, with the error. A comment shard that fails is a warning, not unreadiness: every
process shares the same shard servers, so taking them all out of a load balancer would
turn comments missing on some media into an outage of everything; the API answers those
comments with SERVICE_UNAVAILABLE meanwhile. The same goes for background workers (their
heartbeats in Redis): an API process serves requests without them. Alert on both
instead (README "Operating").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from mediagraph.db.engines import ping
from mediagraph.services import Services
from mediagraph.workers import Heartbeat, worker_heartbeats

CHECK_TIMEOUT_SECONDS = 2.0
REASON_LENGTH = 300


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


@dataclass(frozen=True)
class Check:
    ok: bool
    reason: str | None = None

    def as_json(self, **more: Any) -> dict[str, Any]:
        answer: dict[str, Any] = {"ok": self.ok, **more}
        if self.reason is not None:
            answer["reason"] = self.reason
        return answer


async def _check(answer: Awaitable[object]) -> Check:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            await answer
    except TimeoutError:
        return Check(False, f"no answer within {CHECK_TIMEOUT_SECONDS:g}s")
    except Exception as error:
        return Check(False, f"{type(error).__name__}: {error}"[:REASON_LENGTH])
    return Check(True)


async def _redis_ping(services: Services) -> None:
    if not await services.redis.ping():
        raise ConnectionError("PING was not answered with PONG")


async def _workers(services: Services, redis: Check) -> dict[str, Any]:
    if not redis.ok:
        return {"ok": False, "reason": "unknown: Redis, which holds the heartbeats, is not answering"}
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            beats = await worker_heartbeats(services)
    except Exception as error:
        return {"ok": False, "reason": f"heartbeats unreadable: {type(error).__name__}: {error}"[:REASON_LENGTH]}
    return {name: _worker(beat) for name, beat in beats.items()}


def _worker(beat: Heartbeat) -> dict[str, Any]:
    if not beat.running:
        return {"ok": False, "reason": "no process has run it recently (no heartbeat)"}
    return {"ok": True, "heartbeatAgeSeconds": round(beat.age_seconds or 0.0, 1)}


async def readyz(request: Request) -> JSONResponse:
    services: Services = request.app.state.services
    main, redis, *shards = await asyncio.gather(
        _check(ping(services.databases.main)),
        _check(_redis_ping(services)),
        *(_check(ping(engine)) for engine in services.databases.shards),
    )
    workers = await _workers(services, redis)
    reasons = [f"postgres: {main.reason}"] if not main.ok else []
    reasons += [f"redis: {redis.reason}"] if not redis.ok else []
    warnings = [f"shard {number}: {shard.reason}" for number, shard in enumerate(shards) if not shard.ok]
    warnings += [f"workers: {workers['reason']}"] if "reason" in workers else []
    warnings += [
        f"worker {name}: {state['reason']}"
        for name, state in workers.items()
        if isinstance(state, dict) and not state["ok"]
    ]
    ready = not reasons
    body = {
        "ready": ready,
        "checks": {
            "postgres": main.as_json(),
            "shards": [shard.as_json(shard=number) for number, shard in enumerate(shards)],
            "redis": redis.as_json(),
            "workers": workers,
        },
        "reasons": reasons,
        "warnings": warnings,
    }
    return JSONResponse(body, status_code=200 if ready else 503)
