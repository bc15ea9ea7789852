"""One settings object for the whole service, read from MEDIAGRAPH_* variables and `.env`."""

from __future__ import annotations

import ipaddress
import os
import secrets
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# Signing keys published in the source of earlier versions: anyone could mint tokens with
# them, so they are refused in every environment, however they are configured.
PUBLISHED_SECRETS = frozenset({"mediagraph-development-secret-change-me"})
# Without MEDIAGRAPH_SECRET_KEY, a random key is made once and kept here, under data_dir.
SECRET_KEY_FILE = "secret_key"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEDIAGRAPH_", env_file=".env", extra="ignore")

    # Empty URLs mean "start the embedded servers under data_dir".
    database_url: str = ""
    shard_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    redis_url: str = ""
    # `redis_url` names one node of a Redis Cluster (7+): the cluster client is used for
    # everything, and per-entity channels use sharded pub/sub (keys/ has the slot rules).
    redis_cluster: bool = False
    redis_prefix: str = "mg:"
    data_dir: Path = Path(".mediagraph")
    embedded_shards: int = 2

    logical_shards: int = 64
    node_id: int = 0

    environment: str = "development"
    # Empty: a random key kept in data_dir/secret_key (made on first start); required in production.
    secret_key: str = ""
    access_token_minutes: int = 60 * 24
    graphiql: bool = True
    # The live dashboard at /dashboard: on by default except in production, where only
    # MEDIAGRAPH_DASHBOARD=true turns it on.
    dashboard: bool | None = None

    max_upload_bytes: int = 200 * 1024 * 1024
    max_query_depth: int = 12
    max_query_tokens: int = 2_000
    max_query_aliases: int = 30
    max_page_size: int = 100
    # Estimated nodes a query may return, from first/last along nested connections (serving/cost.py).
    max_query_cost: int = Field(default=50_000, ge=1)
    document_cache_size: int = 1_000
    # Queries run from compiled execution plans (serving/plans.py); off runs every one on graphql-core.
    execution_plans: bool = True
    # Rows read by id are served again from process memory for this long (db/hot.py); 0 turns it off.
    hot_read_seconds: float = 1.0
    hot_read_entries: int = 10_000
    # Automatic persisted queries kept in Redis for every process; least recently used out first.
    persisted_queries_max: int = 10_000

    login_attempts_per_username: int = 10
    login_attempts_per_address: int = 30
    login_window_seconds: int = 300
    nickname_change_interval_hours: int = 24

    # Feeds: authors with at least this many followers are not fanned out; their
    # followers merge their posts in on read instead.
    celebrity_followers: int = 10_000
    # Cached feeds keep only their newest entries (the older ones come from PostgreSQL).
    newsfeed_size: int = 50
    author_feed_size: int = 50
    author_feed_ttl_seconds: int = 7 * 24 * 3600
    newsfeed_ttl_seconds: int = 7 * 24 * 3600
    fanout_max_attempts: int = 5
    fanout_retry_base_ms: int = 200
    # A fan-out message pending this long under one consumer is presumed orphaned and claimed.
    fanout_claim_idle_ms: int = 60_000

    # Views: one counted view per viewer per media per window; pending counts live in
    # `view_buckets` Redis hashes (fixed once views are recorded: a count waits in its bucket)
    # until the flusher moves them to PostgreSQL, and the sync copies them to the sort columns.
    view_dedupe_seconds: int = Field(default=600, ge=1)
    view_buckets: int = Field(default=16, ge=1, le=1024)
    view_flush_interval_seconds: float = Field(default=1.0, gt=0)
    view_flush_lease_seconds: float = Field(default=30.0, gt=0)
    view_sync_interval_seconds: float = Field(default=2.0, gt=0)
    # At most one viewCount push per media per interval, from publishers and to each subscriber.
    view_push_interval_seconds: float = Field(default=0.25, gt=0)
    # A view- or like-sorted list's pagination session ends after this long unused.
    page_session_ttl_seconds: int = Field(default=1800, ge=1)

    # Comments: the longest content accepted, in characters.
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

    # A finished leaderboard period stays in Redis this long; afterwards a read rebuilds it
    # from PostgreSQL and keeps it for `leaderboard_history_cache_seconds`.
    leaderboard_history_grace_seconds: int = 3600
    leaderboard_history_cache_seconds: int = 600
    # Live leaderboards: at most one read per board per process every `tick` seconds, and
    # at least one every `refresh` seconds (covers pub/sub messages lost in a reconnect).
    leaderboard_tick_seconds: float = 0.05
    leaderboard_refresh_seconds: float = 5.0
    # Processes re-read a board's definition (its partition layout) at least this often; a
    # re-partitioning waits `leaderboard_repartition_grace_seconds` (longer) between its
    # steps so that every process has followed it, and renews its lease this often.
    leaderboard_definition_refresh_seconds: float = 1.0
    leaderboard_repartition_grace_seconds: float = 5.0
    leaderboard_repartition_lease_seconds: float = 30.0

    # Hot media: a day takes engagement events until this long after it ends; then its
    # top 10 is final. Days are kept for `hot_history_days` (today included).
    hot_live_grace_seconds: int = 3600
    hot_history_days: int = 7
    # A consumer's unacknowledged events are claimed by another after this long.
    hot_claim_idle_seconds: int = 30

    # Background workers run with `serve` (in a process of their own there) unless turned off for
    # separate `mediagraph worker` processes; an app made in-process (tests) runs them itself.
    run_workers: bool = True

    # Live playback statistics. A session is live while its last heartbeat is
    # this recent; `at` may lead the server clock by the skew and trail it by the age.
    playback_live_window_seconds: int = Field(default=15, ge=1, le=3600)
    playback_max_clock_skew_seconds: int = Field(default=30, ge=0, le=3600)
    playback_max_heartbeat_age_seconds: int = Field(default=60, ge=0, le=3600)
    # A session silent this long starts over as a new play.
    playback_session_idle_hours: int = Field(default=6, ge=1, le=72)
    # New sessions one address may start on one channel per minute.
    playback_new_sessions_per_minute: int = Field(default=60, ge=1)
    # New plays reach PostgreSQL within about this interval.
    playback_rollup_interval_seconds: float = Field(default=5.0, gt=0, le=600)
    # What later heartbeats only grow (watched time, peaks, counts of counters there already)
    # reaches PostgreSQL within about this much longer: reads take it from Redis meanwhile,
    # and a roll-up copies a counter once per delay rather than at every heartbeat.
    playback_rollup_delay_seconds: float = Field(default=60.0, ge=0, le=3600)
    # Play records (one row per session) are kept this many UTC days after the day they
    # started, then their day's partition is dropped; bucket roll-ups stay forever.
    play_history_days: int = Field(default=90, ge=1, le=3650)

    # Where clients reach this API (`https://api.example.com`, or with a path prefix): absolute
    # URLs such as `Media.contentUrl` start with it. Empty: each request's own origin, as
    # uvicorn sees it behind the trusted proxies.
    public_url: str = ""

    # Addresses (or networks, or `*`) of reverse proxies whose X-Forwarded-For names the client;
    # for everyone else the socket's address counts (views, rate limits, playback).
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["127.0.0.1", "::1"])

    # Browser origins allowed to call the API (CORS) and open websockets: exact origins
    # (`https://app.example.com`) or `*`. Unset: the loopback origins in development, none in production.
    cors_origins: Annotated[list[str] | None, NoDecode] = None

    # Websockets: operations one socket may run at once (past it that subscribe gets a coded
    # TOO_MANY_SUBSCRIPTIONS error, the socket stays), and sockets one client address may hold
    # open per server process (past it the socket is closed with 4429).
    max_subscriptions_per_connection: int = Field(default=100, ge=1)
    max_connections_per_address: int = Field(default=256, ge=1)

    db_pool_size: int = 10
    db_max_overflow: int = 10
    # Connections per process for hot reads (db/reads.py). Lookups are merged across requests,
    # so a few carry the load; more only adds PostgreSQL backends competing for the CPUs,
    # which showed as a long latency tail when PostgreSQL shares the machine.
    read_pool_size: int = 3
    # Connections per process for the hot writes (db/writes.py): one statement each, but each
    # a commit that waits for its WAL flush, so more connections than the reads need: commits
    # waiting together are flushed together (likes: 882 req/s with 4, 1,863 with 16; BENCHMARKS.md).
    # Each process may hold this many more backends: mind PostgreSQL's max_connections.
    write_pool_size: int = Field(default=8, ge=1)
    # Redis connections per process; a burst beyond them waits for one (redis_pool.py).
    redis_max_connections: int = Field(default=100, ge=1)

    # Operating (README "Operating"). /metrics: only on `metrics_port` when set, else only to
    # `Authorization: Bearer <metrics_token>` when set, else open in development and off in production.
    metrics_token: str = ""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # Distinct operation names per process kept as metric labels; later ones count as `other`.
    metrics_operation_names: int = Field(default=200, ge=1)
    # How often pool usage and worker lags are measured for /metrics.
    metrics_sample_seconds: float = Field(default=5.0, gt=0)
    # `text` (readable) or `json` (one object per line, with the request id).
    log_format: Literal["text", "json"] = "text"
    log_level: str = "INFO"
    # Operations taking at least this long are logged with their request id; 0 logs every one.
    log_slow_operation_seconds: float = Field(default=1.0, ge=0)

    @field_validator("shard_urls", mode="before")
    @classmethod
    def split_shard_urls(cls, value: object) -> object:
        if isinstance(value, str):
            return [url.strip() for url in value.split(",") if url.strip()]
        return value

    @field_validator("public_url")
    @classmethod
    def public_url_is_an_absolute_http_url(cls, value: str) -> str:
        url = value.strip()
        if not url:
            return ""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            raise ValueError("public_url must be an absolute http(s) URL such as https://api.example.com")
        return url.rstrip("/")

    @field_validator("cors_origins", mode="before")
    @classmethod
    def split_cors_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def origins_or_star(cls, value: list[str] | None) -> list[str] | None:
        for item in value or ():
            parts = urlsplit(item)
            if item != "*" and (
                parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/")
            ):
                raise ValueError(f"{item!r} is not an origin such as https://app.example.com (nor `*`)")
        return value

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def split_forwarded_allow_ips(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("forwarded_allow_ips")
    @classmethod
    def addresses_or_networks(cls, value: list[str]) -> list[str]:
        for item in value:
            if item != "*":
                try:
                    ipaddress.ip_network(item, strict=False)
                except ValueError:
                    raise ValueError(f"{item!r} is neither an IP address, a network nor `*`") from None
        return value

    @field_validator("node_id")
    @classmethod
    def node_id_fits_ten_bits(cls, value: int) -> int:
        if not 0 <= value < 1024:
            raise ValueError("node_id must be between 0 and 1023")
        return value

    @field_validator(
        "newsfeed_size",
        "author_feed_size",
        "fanout_max_attempts",
        "celebrity_followers",
        "nickname_log_queues",
        "nickname_replay_batch",
        "comment_page_block",
        "comment_max_page",
    )
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
    def repartition_outlasts_definition_caches(self) -> Self:
        if self.leaderboard_repartition_grace_seconds <= self.leaderboard_definition_refresh_seconds:
            raise ValueError(
                "MEDIAGRAPH_LEADERBOARD_REPARTITION_GRACE_SECONDS must exceed "
                "MEDIAGRAPH_LEADERBOARD_DEFINITION_REFRESH_SECONDS (every process must see each step in time)"
            )
        return self

    @model_validator(mode="after")
    def cluster_needs_a_node(self) -> Self:
        if self.redis_cluster and not self.redis_url:
            raise ValueError("MEDIAGRAPH_REDIS_CLUSTER needs MEDIAGRAPH_REDIS_URL naming one node of the cluster")
        return self

    @model_validator(mode="after")
    def resolve_secret_key(self) -> Self:
        if not self.secret_key:
            if self.environment == "production":
                # Processes on several hosts must share one key: a per-host file would not do.
                raise ValueError("set MEDIAGRAPH_SECRET_KEY before running in production")
            self.secret_key = data_dir_secret(self.data_dir)
        if self.secret_key in PUBLISHED_SECRETS:
            raise ValueError("this secret key is published in mediagraph's source; set another MEDIAGRAPH_SECRET_KEY")
        if self.environment == "production" and self.graphiql:
            self.graphiql = False
        return self

    @property
    def serves_dashboard(self) -> bool:
        if self.dashboard is None:
            return self.environment != "production"
        return self.dashboard

    @property
    def embedded(self) -> bool:
        return not (self.database_url and self.redis_url)

    @property
    def media_dir(self) -> Path:
        return self.data_dir / "media"


def data_dir_secret(data_dir: Path) -> str:
    """The key kept in `data_dir`, made (random, mode 0600) by whichever process asks first."""
    path = data_dir / SECRET_KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        # Written whole under a temporary name (mkstemp makes it 0600), then linked into place:
        # link fails if the name exists, so processes starting together all end up reading one key.
        descriptor, temporary = tempfile.mkstemp(dir=data_dir, prefix=".secret_key-")
        try:
            with os.fdopen(descriptor, "w") as file:
                file.write(secrets.token_hex(32))
                file.flush()
                os.fsync(file.fileno())
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(temporary)
    if path.stat().st_mode & 0o077:
        raise ValueError(f"{path} is readable by other users: run `chmod 600 {path}` (or set a new key)")
    key = path.read_text().strip()
    if not key:
        raise ValueError(f"{path} is empty: remove it to have a new key made")
    return key


@lru_cache
def get_settings() -> Settings:
    return Settings()
