"""HTTP load with wrk: JSON POST bodies cycled from a file, and responses with `errors` counted as failures."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = "wrk is not installed: `apt-get install -y wrk` (Debian/Ubuntu) or see https://github.com/wg/wrk"

# Every thread starts at a random line and walks the bodies in order, so all of
# them are requested and no two threads ask for the same ids in step.
LUA_SCRIPT = r"""
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  requests = {}
  for line in io.lines(args[1]) do
    requests[#requests + 1] = wrk.format("POST", nil, {["Content-Type"] = "application/json"}, line)
  end
  math.randomseed(os.time() + #threads * 7919 + math.floor(os.clock() * 1000000))
  position = math.random(#requests)
  responses = 0
  failures = 0
end

function request()
  position = position % #requests + 1
  return requests[position]
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


@dataclass(frozen=True)
class LoadResult:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    failures: int
    socket_errors: int


def wrk_path() -> str | None:
    return shutil.which("wrk")


def write_bodies(path: Path, bodies: Sequence[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(body, separators=(",", ":")) + "\n" for body in bodies))
    return path


def run_wrk(
    url: str, bodies: Path, *, connections: int, seconds: float, threads: int = 2, timeout: float = 10
) -> LoadResult:
    executable = wrk_path()
    if executable is None:
        raise RuntimeError(INSTALL_HINT)
    script = bodies.parent / "post_bodies.lua"
    script.write_text(LUA_SCRIPT)
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
            str(bodies),
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
