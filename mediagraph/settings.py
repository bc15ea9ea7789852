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

    comment_max_length: int = 2_000
    # Page-number navigation: buttons per block, and the deepest page served (the seed's policy).
    comment_page_block: int = 10
    comment_max_page: int = 10_000
    # Unconfirmed comments older than this are repaired (their creation crashed before confirming).
    comment_confirm_grace_seconds: float = 60.0

    # Nickname-change log: queues let unrelated changes be logged in parallel.
    nickname_log_queues: int = 4
    nickname_replay_batch: int = 500
    nickname_replay_interval_seconds: float = 1.0
    # A shard further behind than this (in logs of one queue) is resynced from the users table.
    nickname_resync_lag: int = 100_000

    # Processes reload the shard map on a pub/sub notice, and at least this often.
    routing_refresh_seconds: float = 10.0
    # After a move switches routing, old copies stay readable this long before deletion.
    shard_move_grace_seconds: float = 15.0

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

    @field_validator("nickname_log_queues", "nickname_replay_batch", "comment_page_block", "comment_max_page")
    @classmethod
    def at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
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
