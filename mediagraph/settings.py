"""One settings object for the whole service, read from MEDIAGRAPH_* variables and `.env`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEVELOPMENT_SECRET = "mediagraph-development-secret-change-me"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEDIAGRAPH_", env_file=".env", extra="ignore")

    # Empty URLs mean "start the embedded servers under data_dir".
    database_url: str = ""
    shard_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    redis_url: str = ""
    redis_prefix: str = "mg:"
    data_dir: Path = Path(".mediagraph")
    embedded_shards: int = 2

    logical_shards: int = 64
    node_id: int = 0

    environment: str = "development"
    secret_key: str = DEVELOPMENT_SECRET
    access_token_minutes: int = 60 * 24
    graphiql: bool = True

    max_upload_bytes: int = 200 * 1024 * 1024
    max_query_depth: int = 12
    max_query_tokens: int = 2_000
    max_query_aliases: int = 30
    max_page_size: int = 100
    document_cache_size: int = 1_000

    login_attempts_per_username: int = 10
    login_attempts_per_address: int = 30
    login_window_seconds: int = 300
    nickname_change_interval_hours: int = 24

    # A finished leaderboard period stays in Redis this long; afterwards a read rebuilds it
    # from PostgreSQL and keeps it for `leaderboard_history_cache_seconds`.
    leaderboard_history_grace_seconds: int = 3600
    leaderboard_history_cache_seconds: int = 600
    # Live leaderboards: at most one read per board per process every `tick` seconds, and
    # at least one every `refresh` seconds (covers pub/sub messages lost in a reconnect).
    leaderboard_tick_seconds: float = 0.05
    leaderboard_refresh_seconds: float = 5.0

    # Hot media: a day takes engagement events until this long after it ends; then its
    # top 10 is final. Days are kept for `hot_history_days` (today included).
    hot_live_grace_seconds: int = 3600
    hot_history_days: int = 7
    # A consumer's unacknowledged events are claimed by another after this long.
    hot_claim_idle_seconds: int = 30

    # Background workers run inside `serve` unless turned off for separate `mediagraph worker` processes.
    run_workers: bool = True

    db_pool_size: int = 10
    db_max_overflow: int = 10

    @field_validator("shard_urls", mode="before")
    @classmethod
    def split_shard_urls(cls, value: object) -> object:
        if isinstance(value, str):
            return [url.strip() for url in value.split(",") if url.strip()]
        return value

    @field_validator("node_id")
    @classmethod
    def node_id_fits_ten_bits(cls, value: int) -> int:
        if not 0 <= value < 1024:
            raise ValueError("node_id must be between 0 and 1023")
        return value

    @field_validator("logical_shards")
    @classmethod
    def at_least_one_logical_shard(cls, value: int) -> int:
        if value < 1:
            raise ValueError("logical_shards must be at least 1")
        return value

    @model_validator(mode="after")
    def refuse_default_secret_in_production(self) -> Self:
        if self.environment == "production" and self.secret_key == DEVELOPMENT_SECRET:
            raise ValueError("set MEDIAGRAPH_SECRET_KEY before running in production")
        if self.environment == "production" and self.graphiql:
            self.graphiql = False
        return self

    @property
    def embedded(self) -> bool:
        return not (self.database_url and self.redis_url)

    @property
    def media_dir(self) -> Path:
        return self.data_dir / "media"


@lru_cache
def get_settings() -> Settings:
    return Settings()
