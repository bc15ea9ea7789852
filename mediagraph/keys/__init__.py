"""Redis key layouts, one module per domain; every key and channel carries the prefix."""

from __future__ import annotations


class KeySpace:
    """The configured prefix. Domain modules build their keys from it and nowhere else.

    Keys take a `{...}` hash tag around the entity id so a Redis Cluster keeps one
    entity's keys in one slot and multi-key scripts stay legal.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def key(self, *parts: object) -> str:
        return self.prefix + ":".join(str(part) for part in parts)

    def channel(self, *parts: object) -> str:
        return self.prefix + "channel:" + ":".join(str(part) for part in parts)
