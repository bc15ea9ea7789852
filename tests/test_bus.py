from __future__ import annotations

import asyncio

from tests.support.factories import unique_name


async def _subscribed(services, channel: str) -> None:
    # The Redis SUBSCRIBE is sent from a background listener: wait until it is active.
    for _ in range(100):
        numsub = await services.redis.pubsub_numsub(channel)
        if numsub and numsub[0][1] > 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{channel} never got a Redis subscriber")


async def test_every_event_arrives_in_order_when_the_subscriber_keeps_up(services):
    channel = services.keys.channel("test", unique_name())
    async with services.bus.subscribe(channel) as events:
        await _subscribed(services, channel)
        for n in range(20):
            await services.bus.publish(channel, {"n": n})
        received = [(await asyncio.wait_for(anext(events), 5))["n"] for _ in range(20)]
    assert received == list(range(20))


async def test_a_subscriber_that_never_reads_holds_at_most_keep_events(services):
    channel = services.keys.channel("test", unique_name())
    async with services.bus.subscribe(channel, keep=8) as events:
        await _subscribed(services, channel)
        for n in range(500):
            await services.bus.publish(channel, {"n": n})
        (mailbox,) = services.bus._broadcast._subscribers[channel]
        for _ in range(500):
            if mailbox.qsize() + mailbox.dropped == 500:
                break
            await asyncio.sleep(0.01)
        assert mailbox.qsize() == 8
        assert [(await anext(events))["n"] for _ in range(8)] == list(range(492, 500))
    mailboxes = services.bus._broadcast._subscribers.get(channel, set())
    assert not mailboxes, "the channel is released when its last subscriber leaves"


async def test_state_subscriptions_coalesce_bursts_and_end_on_the_latest(services):
    channel = services.keys.channel("test", unique_name())
    async with services.bus.subscribe(channel, keep=1, min_interval=0.2) as events:
        await _subscribed(services, channel)
        assert services.bus.local_subscribers(channel) == 1
        for n in range(1_000):
            await services.bus.publish(channel, {"n": n})
        received = []
        while not received or received[-1] != 999:
            received.append((await asyncio.wait_for(anext(events), 5))["n"])
    assert len(received) < 20, received
    assert received == sorted(received)
