"""Redis key layouts, one module per domain; every key and channel carries the prefix.

Slots (Redis Cluster). A key's `{…}` hash tag decides its slot. Each domain tags its keys
per entity, so everything one script, transaction or multi-key command touches shares one
slot, and different entities spread over the nodes:

| family | tag | module |
| --- | --- | --- |
| views: pending counts, batches, dedupe and push keys | `{b<bucket>}` (media id mod `view_buckets`) | `keys/views.py` |
| pagination sessions | `{<session id>}` | `keys/paging.py` |
| feeds: an author's posts, a user's news feed | `{<author id>}`, `{<user id>}` | `keys/feeds.py` |
| feed fan-out stream and its dead letters | `{fanout}` | `keys/feeds.py` |
| leaderboard period: ready, users, lock; each partition | `{lb:<board>:<period>}`; `{lb:<board>:<period>:p<i>}` | `keys/leaderboards/` |
| hot media days, with the engagement stream | `{<engagement stream>}` | `keys/hot/` |
| playback: one channel's counters, live sets, sessions | `{<channel id>}` | `keys/playback/` |
| persisted queries | `{persisted}` | `keys/persisted_queries.py` |
| worker heartbeats | `{workers}` | `keys/workers.py` |
| login rate limits | `{<username>}`, `{<address>}` | `keys/users.py` |

Channels. A channel of one entity (`entity_channel`: a media's counts, a user's news
feed, a board) carries the entity's tag too; on a cluster it is a *sharded* channel
(SPUBLISH/SSUBSCRIBE, Redis 7), carried only by the node owning its slot. The few
process-wide channels (`channel`: uploads, the shard map, a hot day) stay classic
PUBLISH, which a cluster sends to every node.
"""

from __future__ import annotations

from typing import Any


class KeySpace:
    """The configured prefix. Domain modules build their keys from it and nowhere else.

    Keys take a `{...}` hash tag around the entity id so a Redis Cluster keeps one
    entity's keys in one slot and multi-key scripts stay legal. `sharded_pubsub` (a
    cluster) makes entity channels sharded.
    """

    def __init__(self, prefix: str, *, sharded_pubsub: bool = False) -> None:
        self.prefix = prefix
        self.sharded_pubsub = sharded_pubsub

    def key(self, *parts: object) -> str:
        return self.prefix + ":".join(map(str, parts))

    def channel(self, *parts: object) -> str:
        """A process-wide channel (classic pub/sub everywhere)."""
        return self.prefix + "channel:" + ":".join(map(str, parts))

    def entity_channel(self, kind: str, entity: object, *parts: object) -> str:
        """The channel of one entity, tagged with it: `channel:<kind>:{<entity>}[:parts]`."""
        return self.channel(kind, f"{{{entity}}}", *parts)

    def is_sharded(self, channel: str) -> bool:
        """Whether `channel` travels by sharded pub/sub here (an entity channel on a cluster)."""
        return self.sharded_pubsub and "{" in channel

    def publish_command(self, channel: str) -> str:
        return "SPUBLISH" if self.is_sharded(channel) else "PUBLISH"

    def publish(self, target: Any, channel: str, message: Any) -> Any:
        """PUBLISH or SPUBLISH `message` through `target`, a client (awaitable) or a pipeline (queued)."""
        return target.execute_command(self.publish_command(channel), channel, message)
