"""A second in-process app on the same databases, with its own settings (a private Redis
prefix, a low celebrity threshold, small feeds, another Redis), for tests that need them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from mediagraph.app import create_app
from mediagraph.services import Services
from mediagraph.settings import Settings
from tests.support.graphql import GraphQLClient


def private_prefix(settings: Settings, name: str) -> str:
    """A prefix under the run's own, so the run's cleanup removes its keys too."""
    return f"{settings.redis_prefix}{name}-{uuid.uuid4().hex[:6]}:"


def settings_with(settings: Settings, **overrides: Any) -> Settings:
    """The run's settings with `overrides`; a test's private Redis is a single server, even in a
    run on the cluster."""
    if overrides.get("redis_url", settings.redis_url) != settings.redis_url:
        overrides.setdefault("redis_cluster", False)
    return settings.model_copy(update=overrides)


@asynccontextmanager
async def app_with(settings: Settings, **overrides: Any) -> AsyncIterator[tuple[Services, GraphQLClient]]:
    application = create_app(settings_with(settings, **overrides))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application, client=("203.0.113.9", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://mediagraph.test") as http:
            yield application.state.services, GraphQLClient(http)
