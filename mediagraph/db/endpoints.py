"""Where the main database, the shards and Redis are, once configuration is resolved."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import make_url

from mediagraph.settings import Settings


@dataclass(frozen=True)
class Endpoints:
    database_url: str
    shard_urls: tuple[str, ...]
    redis_url: str

    def as_environment(self) -> dict[str, str]:
        """Environment for child processes so they reuse these servers instead of starting new ones."""
        return {
            "MEDIAGRAPH_DATABASE_URL": self.database_url,
            "MEDIAGRAPH_SHARD_URLS": ",".join(self.shard_urls),
            "MEDIAGRAPH_REDIS_URL": self.redis_url,
        }


def async_url(url: str) -> str:
    """Accept plain `postgresql://` URLs from users; the engines need the asyncpg driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    return parsed.render_as_string(hide_password=False)


def derived_shard_urls(database_url: str, count: int) -> tuple[str, ...]:
    """Shard databases beside the main one on the same server: `<main>_shard_<n>`."""
    main = make_url(async_url(database_url))
    return tuple(
        main.set(database=f"{main.database}_shard_{n}").render_as_string(hide_password=False) for n in range(count)
    )


def configured_endpoints(settings: Settings, *, database_url: str = "", redis_url: str = "") -> Endpoints:
    database = async_url(database_url or settings.database_url)
    shards = (
        tuple(async_url(url) for url in settings.shard_urls)
        if settings.shard_urls
        else derived_shard_urls(database, settings.embedded_shards)
    )
    return Endpoints(database, shards, redis_url or settings.redis_url)
