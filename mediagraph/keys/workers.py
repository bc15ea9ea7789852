"""Redis layout of worker heartbeats: which background workers some process is running now.

One string per worker name holding the time (ms) of its last beat, expiring unless
renewed: a key that is there means a process ran the worker within the expiry. The
`{workers}` hash tag keeps them in one Cluster slot, so one MGET reads them all.
"""

from __future__ import annotations

from mediagraph.keys import KeySpace


def worker_heartbeat(keys: KeySpace, name: str) -> str:
    return keys.key("{workers}", "heartbeat", name)
