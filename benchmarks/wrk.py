"""HTTP load with wrk: each thread builds its requests in Lua, and responses with `errors` count as failures.

A load is a Lua script made of two parts: `RESULTS_LUA`, shared by every script,
which numbers the threads, counts responses and failures and prints one result
line; and a workload's own `init(args)` and `request()`. `BODIES_LUA` is the
common case: JSON POST bodies cycled from a file, one per line. Writes that must
vary per request (a different user, a fresh playback session) bring their own.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# wrk threads per run, unless a run asks for another number.
THREADS = 2
INSTALL_HINT = "wrk is not installed: `apt-get install -y wrk` (Debian/Ubuntu) or see https://github.com/wg/wrk"

# Threads are numbered in setup (which runs in the main interpreter) so that each
# thread's own interpreter seeds its random numbers differently.
RESULTS_LUA = r"""
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_number", #threads)
end

function seed_random()
  math.randomseed(os.time() * 1000 + thread_number * 7919 + math.floor(os.clock() * 1000000))
  -- LuaJIT's first numbers after seeding are poorly spread.
  for _ = 1, 10 do math.random() end
  responses = 0
  failures = 0
end

function read_lines(path)
  local lines = {}
  for line in io.lines(path) do
    lines[#lines + 1] = line
  end
  return lines
end

JSON_HEADERS = {["Content-Type"] = "application/json"}

function bearer_headers(token)
  return {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token}
end

function response(status, headers, body)
  responses = responses + 1
  if status ~= 200 or string.find(body, '"errors"', 1, true) then
    failures = failures + 1
  end
end

function done(summary, latency, requests)
  local total_responses, total_failures = 0, 0
  for _, thread in ipairs(threads) do
    total_responses = total_responses + thread:get("responses")
    total_failures = total_failures + thread:get("failures")
  end
  local errors = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"responses":%d,"failures":%d,' ..
    '"socket_errors":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    total_responses, total_failures,
    errors.connect + errors.read + errors.write + errors.timeout))
end
"""

# Every thread starts at a random line and walks the bodies in order, so all of
# them are requested and no two threads ask for the same ids in step.
BODIES_LUA = r"""
function init(args)
  seed_random()
  requests = {}
  for _, line in ipairs(read_lines(args[1])) do
    requests[#requests + 1] = wrk.format("POST", nil, JSON_HEADERS, line)
  end
  position = math.random(#requests)
end

function request()
  position = position % #requests + 1
  return requests[position]
end
"""


@dataclass(frozen=True)
class LoadResult:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    failures: int
    socket_errors: int
    # CPU seconds the server spent during the run (see `benchmarks/cpu.py`), when it could be read.
    server_cpu_seconds: float | None = None

    @property
    def server_cpu_us_per_request(self) -> float | None:
        if self.server_cpu_seconds is None or not self.requests:
            return None
        return self.server_cpu_seconds * 1_000_000 / self.requests


@dataclass(frozen=True)
class Load:
    """What wrk runs: a workload's Lua (`init` and `request`) and the files it reads, passed as its arguments."""

    lua: str
    arguments: tuple[Path, ...]
    # Run once against the server's URL before the load's first run: state the load expects
    # to find already there (players already playing, say).
    start: Callable[[str], None] | None = None


def wrk_path() -> str | None:
    return shutil.which("wrk")


def lua_string(text: str) -> str:
    """`text` as a Lua long-bracket literal (no escapes inside)."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def write_lines(path: Path, lines: Sequence[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def write_bodies(path: Path, bodies: Sequence[dict[str, object]]) -> Path:
    return write_lines(path, [json.dumps(body, separators=(",", ":")) for body in bodies])


def bodies_load(bodies: Path) -> Load:
    return Load(BODIES_LUA, (bodies,))


def run_wrk(
    url: str, load: Load, *, connections: int, seconds: float, threads: int = THREADS, timeout: float = 10
) -> LoadResult:
    executable = wrk_path()
    if executable is None:
        raise RuntimeError(INSTALL_HINT)
    folder = load.arguments[0].parent if load.arguments else Path.cwd()
    script = folder / f"load-{hashlib.sha1(load.lua.encode()).hexdigest()[:10]}.lua"
    script.write_text(RESULTS_LUA + load.lua)
    completed = subprocess.run(
        [
            executable,
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            f"--timeout={timeout:g}s",
            "-s",
            str(script),
            url,
            "--",
            *(str(argument) for argument in load.arguments),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((line for line in completed.stdout.splitlines() if line.startswith("WRK_RESULT ")), None)
    if completed.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({completed.returncode}): {completed.stderr or completed.stdout}")
    figures = json.loads(line.removeprefix("WRK_RESULT "))
    return LoadResult(
        requests_per_second=figures["requests"] / (figures["duration_us"] / 1_000_000),
        p50_ms=figures["p50_us"] / 1000,
        p99_ms=figures["p99_us"] / 1000,
        requests=figures["requests"],
        # A request wrk sent but never saw answered (closed, timed out) is a failure too.
        failures=figures["failures"] + max(0, figures["requests"] - figures["responses"]),
        socket_errors=figures["socket_errors"],
    )
