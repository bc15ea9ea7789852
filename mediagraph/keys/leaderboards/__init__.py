"""Redis layout of a leaderboard period: one hash tag per (board, period), so a script may touch all of it.

- `…:p<i>`   sorted set of partition i, partitions in rank order (p0 holds the best scores).
             Members are `<reached snowflake, 16 hex digits>:<user id>` and scores are stored
             so that ascending order is rank order (negated on descending boards): equal
             scores then rank by the member, i.e. whoever reached the score first.
- `…:users`  hash user id -> `<record version>:<partition>:<reached hex>`: finds a user's
             member in O(1) and refuses records older than the one applied.
- `…:ready`  present once the period was loaded from PostgreSQL; without it (or when the
             hash and partitions disagree in size) readers rebuild the period first.
- `…:rebuild` the lock that lets one reader rebuild while the others wait.

The partitions share the slot on purpose: a user moving between them is one atomic
script, so they never appear twice or vanish. They bound the size of each sorted set,
not the memory of one Redis node.
"""

from __future__ import annotations

from dataclasses import dataclass

from mediagraph.keys import KeySpace


@dataclass(frozen=True)
class BoardKeys:
    ready: str
    users: str
    rebuild_lock: str
    partitions: tuple[str, ...]

    @property
    def script_keys(self) -> list[str]:
        """The KEYS every board script takes, in this order."""
        return [self.ready, self.users, *self.partitions]


def board_keys(keys: KeySpace, *, board_id: int, period: str, partitions: int) -> BoardKeys:
    tag = f"{{lb:{board_id}:{period}}}"
    return BoardKeys(
        ready=keys.key("lb", tag, "ready"),
        users=keys.key("lb", tag, "users"),
        rebuild_lock=keys.key("lb", tag, "rebuild"),
        partitions=tuple(keys.key("lb", tag, f"p{index}") for index in range(partitions)),
    )


def board_changed_channel(keys: KeySpace, board_id: int) -> str:
    """Published by every accepted score; each process's ticker for the board listens.

    A process-wide channel on purpose: the apply script publishes it, and a script may
    only SPUBLISH to a channel of its own keys' slot (boards are few; each gets a ticker).
    """
    return keys.channel("leaderboard", board_id)
