"""CPU time a server spends, read from /proc: what a request costs it, whatever else runs.

On a shared machine a server's throughput moves with what its neighbours take (other
processes, a hypervisor's steal); the CPU seconds it spent per answered request move
far less, so they show what a change to the request path saves.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return text[text.rindex(")") + 2 :].split()


def tree_cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of `pid` and every live descendant (None without /proc)."""
    if not (PROC / str(pid)).exists():
        return None
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None:
            continue
        # After the name: state, ppid, ..., utime and stime are fields 14 and 15 of the whole line.
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        total += ticks.get(current, 0)
        pending.extend(children.get(current, ()))
    return total / TICKS_PER_SECOND
