"""A batch goes a turn of the event loop after its first ask: a request whose first step runs
in the next turn (its bytes came with the next poll of the sockets) joins it, and a lone
ask is still answered."""

from __future__ import annotations

import asyncio

from mediagraph.db.writes import StepWrites
from mediagraph.turns import after_next_turn


async def _recorded(batches: list[list[int]], items: list[int]) -> list[int | Exception]:
    batches.append(list(items))
    return [item * 10 for item in items]


async def test_a_request_starting_in_the_next_turn_joins_the_batch() -> None:
    batches: list[list[int]] = []
    writes: StepWrites[int, int] = StepWrites(lambda items: _recorded(batches, items))
    first = asyncio.create_task(writes.ask(1))
    await asyncio.sleep(0)  # the first request asks in this turn ...
    second = asyncio.create_task(writes.ask(2))  # ... and the second first runs in the next
    assert await first == 10
    assert await second == 20
    assert batches == [[1, 2]]


async def test_a_batch_sent_within_the_turn_would_have_split_them() -> None:
    # The same two requests against a batch sent at the end of the first ask's turn: the
    # send runs before the second request's first step, which the test above relies on.
    loop = asyncio.get_running_loop()
    order: list[str] = []
    loop.call_soon(order.append, "send at the end of the turn")
    after_next_turn(loop, lambda: order.append("send a turn later"))
    loop.call_soon(order.append, "second request asks")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["send at the end of the turn", "second request asks", "send a turn later"]


async def test_a_lone_ask_is_answered() -> None:
    batches: list[list[int]] = []
    writes: StepWrites[int, int] = StepWrites(lambda items: _recorded(batches, items))
    assert await asyncio.wait_for(writes.ask(7), 5) == 70
    assert batches == [[7]]
