"""Limits on websockets: open sockets per client address, operations per socket.

The client address is the one uvicorn put in the scope: the socket's peer, or the address
a trusted proxy (MEDIAGRAPH_FORWARDED_ALLOW_IPS) named in X-Forwarded-For, as for views
and rate limits. Sockets are counted per server process.
"""

from __future__ import annotations

from collections import Counter

from starlette.types import Scope

# Closes a socket past the per-address limit: 4000-4999 are the application's, and 429 says why.
TOO_MANY_CONNECTIONS_CLOSE = 4429
TOO_MANY_CONNECTIONS_REASON = "Too many open websockets from this address"
TOO_MANY_SUBSCRIPTIONS = "TOO_MANY_SUBSCRIPTIONS"


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class OpenSockets:
    """Open websockets per client address in this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        """Count a new socket from `address`, unless it already has `limit` open."""
        if self._open[address] >= self.limit:
            return False
        self._open[address] += 1
        return True

    def release(self, address: str) -> None:
        self._open[address] -= 1
        if self._open[address] <= 0:
            del self._open[address]


def subscription_limit_error(limit: int) -> dict[str, object]:
    """The error (as sent) for an operation past a socket's limit; the socket stays open."""
    return {
        "message": f"This connection already runs {limit} operations: complete one before starting another.",
        "extensions": {"code": TOO_MANY_SUBSCRIPTIONS, "limit": limit},
    }
