from __future__ import annotations

from mediagraph.keys import KeySpace


def shard_routing_channel(keys: KeySpace) -> str:
    """Notices that the shard map changed: every process reloads its cached routing."""
    return keys.channel("shards", "routing")
