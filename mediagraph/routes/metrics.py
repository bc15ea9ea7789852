"""`/metrics`, and the sampler that measures what only this layer can reach: pools and worker lags.

Counters and histograms move as the code they watch runs. Pool usage and worker lags
are states of this process's pools and of the shared stores, read every
`metrics_sample_seconds` by each server process (one round of a few Redis commands and
small queries); gauges of the stores keep the latest reading of any process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from mediagraph.observability import metrics
from mediagraph.observability.exposition import CONTENT_TYPE, MetricsAccess, render
from mediagraph.redis_pool import pool_usage
from mediagraph.services import Services
from mediagraph.workers import measure_lags, worker_heartbeats

log = logging.getLogger(__name__)

SAMPLE_TIMEOUT_SECONDS = 10.0


def local_port(request: Request) -> int | None:
    server = request.scope.get("server")
    return int(server[1]) if server and server[1] is not None else None


async def metrics_endpoint(request: Request) -> Response:
    access: MetricsAccess = request.app.metrics_access
    if not access.serves_on(local_port(request)):
        return PlainTextResponse("Not Found", status_code=404)
    if not access.admits(request.headers.get("authorization")):
        return PlainTextResponse(
            "Unauthorized: /metrics needs the metrics bearer token",
            status_code=401,
            headers={"www-authenticate": 'Bearer realm="metrics"'},
        )
    return Response(render(), media_type=CONTENT_TYPE)


async def sample_once(services: Services) -> None:
    for usage in services.databases.pool_usage():
        metrics.record_postgres_pool(usage.database, usage.pool, usage.in_use, usage.idle)
    metrics.record_redis_pool(*pool_usage(services.redis))
    lags, heartbeats = await asyncio.gather(measure_lags(services), worker_heartbeats(services))
    metrics.record_lags(lags)
    metrics.record_workers_up({name: beat.running for name, beat in heartbeats.items()})


async def _sample_forever(services: Services, interval: float) -> None:
    while True:
        try:
            async with asyncio.timeout(SAMPLE_TIMEOUT_SECONDS):
                await sample_once(services)
        except Exception as error:
            # The stores being away is what the other metrics and /readyz report; keep sampling.
            log.warning("metrics sampling failed: %s", error)
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def sampling(services: Services, *, interval: float, enabled: bool) -> AsyncIterator[None]:
    if not enabled:
        yield
        return
    task = asyncio.create_task(_sample_forever(services, interval), name="metrics-sampler")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
