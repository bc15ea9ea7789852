"""Liveness and readiness: /healthz says the process runs, /readyz that its stores answer."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import JSONResponse

from mediagraph.db.engines import ping
from mediagraph.services import Services

CHECK_TIMEOUT_SECONDS = 2.0


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def _database_ok(engine: AsyncEngine) -> bool:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            await ping(engine)
        return True
    except Exception:
        return False


async def _redis_ok(services: Services) -> bool:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            return bool(await services.redis.ping())
    except Exception:
        return False


async def readyz(request: Request) -> JSONResponse:
    services: Services = request.app.state.services
    main, redis, *shards = await asyncio.gather(
        _database_ok(services.databases.main),
        _redis_ok(services),
        *(_database_ok(engine) for engine in services.databases.shards),
    )
    checks = {"postgres": main, "redis": redis, "shards": shards}
    ready = main and redis and all(shards)
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
