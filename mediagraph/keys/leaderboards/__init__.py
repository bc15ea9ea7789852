"""Redis layout of a leaderboard period: each partition in a slot of its own, so a board spreads over nodes.

Partitions are in rank order (p0 holds the best scores). Partition i of (board, period)
carries the hash tag `{lb:<board>:<period>:p<i>}`, and all of its keys share that slot:

- `…:entries` sorted set. Members are `<reached snowflake, 16 hex digits>:<user id>`, scores
              stored so that ascending order is rank order (negated on descending boards):
              equal scores then rank by the member, i.e. whoever reached the score first.
- `…:users`   hash user id -> `<record version>:<member>` while the user is in this partition,
              or `<record version>:` once a newer record put them elsewhere; field `n` counts
              the members. It refuses records older than the one seen, so writers, repairs
              and a rebuild may reach a partition in any order and still converge.
- `…:ready`   present once the period was loaded from PostgreSQL.

A record goes to every partition in one pipeline: its own partition adds it, the others
forget the user (keeping the version). A partition is loaded when it has its ready marker
and `n` equals its size; otherwise readers rebuild the period first. The rebuild lock is
the period's own key, `{lb:<board>:<period>}:rebuild`.

Re-partitioning lays a period out again under a new generation: the tags become
`{lb:<board>:<period>:g<n>:p<i>}` (and `{lb:<board>:<period>:g<n>}` for the lock), so two
layouts of one period live side by side while a move copies one into the other.

Ranks are the sizes of the better partitions plus the rank inside one. Every partition
is exact by itself; while a user moves between two partitions (two nodes), a read landing
between the two writes may count them in both or neither, for that instant. A read that
finds a user it asks for in neither reads again a moment later (`store.read_settled_state`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mediagraph.keys import KeySpace


@dataclass(frozen=True)
class PartitionKeys:
    ready: str
    users: str
    entries: str

    @property
    def script_keys(self) -> list[str]:
        """The KEYS every partition script takes, in this order."""
        return [self.ready, self.users, self.entries]


@dataclass(frozen=True)
class BoardKeys:
    rebuild_lock: str
    parts: tuple[PartitionKeys, ...]

    @property
    def partitions(self) -> tuple[str, ...]:
        """Each partition's sorted set, in rank order."""
        return tuple(part.entries for part in self.parts)

    @property
    def script_keys(self) -> list[str]:
        """Every key holding the period's data (not its lock)."""
        return [key for part in self.parts for key in part.script_keys]


def board_keys(keys: KeySpace, *, board_id: int, period: str, partitions: int, generation: int = 0) -> BoardKeys:
    """The keys of one layout of a period: generation 0 is a board's first layout, and each
    re-partitioning lays the period out again under the next generation (`:g<n>` in the tags)."""
    board = f"lb:{board_id}:{period}" if generation == 0 else f"lb:{board_id}:{period}:g{generation}"
    parts = []
    for index in range(partitions):
        tag = f"{{{board}:p{index}}}"
        parts.append(
            PartitionKeys(
                ready=keys.key("lb", tag, "ready"),
                users=keys.key("lb", tag, "users"),
                entries=keys.key("lb", tag, "entries"),
            )
        )
    return BoardKeys(rebuild_lock=keys.key("lb", f"{{{board}}}", "rebuild"), parts=tuple(parts))


def board_changed_channel(keys: KeySpace, board_id: int) -> str:
    """Published by every accepted score; each process's ticker for the board listens."""
    return keys.entity_channel("leaderboard", board_id)
