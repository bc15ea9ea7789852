"""Automatic persisted queries: one hash of query texts by SHA-256, and their registration order.

Both keys share the `{persisted}` hash tag, so the script that registers a query and
evicts the oldest stays in one Redis Cluster slot.
"""

from __future__ import annotations

from mediagraph.keys import KeySpace


def persisted_query_texts(keys: KeySpace) -> str:
    return keys.key("apq", "{persisted}", "texts")


def persisted_query_order(keys: KeySpace) -> str:
    return keys.key("apq", "{persisted}", "order")
