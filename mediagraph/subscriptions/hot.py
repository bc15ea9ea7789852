"""Notices that a day's hot media may have changed, for `hotMediaUpdated`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import date

from mediagraph.keys.hot import day_changed_channel
from mediagraph.services import Services

# The top is re-read at most this often however fast events are applied.
MIN_INTERVAL_SECONDS = 1.0
# And at least this often: a notice lost while pub/sub reconnected, or a day that ended
# (a subscription to today then follows the new day), is noticed within this long.
REFRESH_SECONDS = 30.0


async def day_notices(services: Services, day: date) -> AsyncGenerator[None, None]:
    """Once at once, then whenever the day's scores or state may have changed."""
    channel = day_changed_channel(services.keys, day)
    notices = services.bus.notices([channel], min_interval=MIN_INTERVAL_SECONDS, refresh_seconds=REFRESH_SECONDS)
    async with notices as fired_channels:
        async for _ in fired_channels:
            yield None
