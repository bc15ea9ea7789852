"""When work that concurrent requests asked for is sent as one batch: a turn of the event loop later.

Reads, hot writes and Redis calls of concurrent requests go out together (`db/reads.py`,
`db/writes.py`, `lua.run_batched`). A batch started by the first ask of a turn used to go
at the end of that turn, holding only the requests whose bytes one poll of the sockets
brought in. Sent one turn later, it also holds the requests of the next poll, which reach
their first read in the turn between: under load the batches are about twice as large
and each request's share of a round trip half as much (measured in BENCHMARKS.md, "One turn
later"). An idle loop turns in microseconds, so a lone request barely waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def after_next_turn(loop: asyncio.AbstractEventLoop, send: Callable[[], None]) -> None:
    """Call `send` once the loop has run what is ready now and, after it, what the next poll brings."""
    loop.call_soon(loop.call_soon, send)
