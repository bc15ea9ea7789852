"""`benchmarks/cpu.py`: the CPU a server spends counts its worker processes too, and Redis's own is read from it."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.cpu import redis_cpu_seconds, tree_cpu_seconds
from mediagraph.services import Services

# A parent that starts a child spinning for two seconds of CPU, then waits for a line on stdin.
SPINNING_CHILD = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time\\nend = time.process_time() + 2.0\\nwhile time.process_time() < end: pass\\ninput()"], stdin=subprocess.PIPE)
print("started", flush=True)
sys.stdin.readline()
child.communicate(b"\\n")
"""


def test_a_process_tree_counts_the_cpu_its_children_spend() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", SPINNING_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "started"
        own_start = tree_cpu_seconds(parent.pid)
        assert own_start is not None
        deadline = time.monotonic() + 30
        spent = 0.0
        while time.monotonic() < deadline:
            now = tree_cpu_seconds(parent.pid)
            assert now is not None
            spent = now - own_start
            if spent >= 1.0:
                break
            time.sleep(0.05)
        # The parent only waits: what the tree spent is the child's spinning.
        assert spent >= 1.0
    finally:
        parent.communicate("\n", timeout=30)


def test_a_process_that_is_gone_has_no_figure() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    assert tree_cpu_seconds(process.pid) is None


# A script that only spins: Redis spends its time on the CPU, in the server itself.
SPIN = "local n = 0 for i = 1, tonumber(ARGV[1]) do n = n + i end return 1"


async def test_the_cpu_redis_spends_on_a_script_is_read_from_it(services: Services) -> None:
    before = await redis_cpu_seconds(services.redis)
    started = time.monotonic()
    for _ in range(3):
        await services.redis.eval(SPIN, 0, 10_000_000)
    elapsed = time.monotonic() - started
    spent = await redis_cpu_seconds(services.redis) - before
    # The spins take 0.04-0.3 s each as the machine is fast or busy; while they run, Redis's
    # one thread is on the CPU for most of their wall time, at least 0.15 s on a slow machine
    # (idle, Redis spends a few ms a second).
    assert elapsed > 0.05
    assert spent >= min(0.15, 0.5 * elapsed)
