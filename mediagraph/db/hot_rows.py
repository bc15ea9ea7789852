"""Rows read in the last moment, served again for at most `hot_read_seconds`.

Hot items are read by thousands of requests a second (a popular clip, its
uploader): within the bound they come from this process's memory. What this
process writes it forgets at once, so its own requests read their writes; a
write by another process shows within the bound. Only rows that exist are kept
(a row created elsewhere is never hidden behind a cached absence), only for
display: authentication reads past it. The cache holds at most
`hot_read_entries` rows, the oldest out first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any


class HotRows:
    def __init__(self, *, seconds: float, max_entries: int) -> None:
        self.seconds = seconds
        self.max_entries = max_entries
        self._rows: OrderedDict[tuple[str, Hashable], tuple[float, Any]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.seconds > 0 and self.max_entries > 0

    def get(self, table: str, key: Hashable) -> Any:
        entry = self._rows.get((table, key))
        if entry is None:
            return None
        expires, row = entry
        if expires < time.monotonic():
            del self._rows[(table, key)]
            return None
        return row

    def put_all(self, table: str, rows: Mapping[Hashable, Any]) -> None:
        if not self.enabled:
            return
        expires = time.monotonic() + self.seconds
        for key, row in rows.items():
            self._rows[(table, key)] = (expires, row)
            self._rows.move_to_end((table, key))
        while len(self._rows) > self.max_entries:
            self._rows.popitem(last=False)

    def forget(self, table: str, key: Hashable) -> None:
        self._rows.pop((table, key), None)
