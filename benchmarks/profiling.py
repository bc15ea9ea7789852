"""py-spy on a running server: record while a workload runs, then name the frames the time went to."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def py_spy_path() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def recording(pid: int, output: Path, *, rate: int = 100) -> Iterator[None]:
    """Sample `pid` and its children (speedscope format, idle time left out) until the block ends."""
    executable = py_spy_path()
    if executable is None:
        raise RuntimeError("py-spy is not installed: `uv sync` installs it with the dev dependencies")
    output.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [
            executable,
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            # Sampling without pausing the server keeps its throughput close to an unprofiled run.
            "--nonblocking",
            "--rate",
            str(rate),
            "--format",
            "speedscope",
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield
    finally:
        # py-spy writes its file when interrupted, as after Ctrl-C.
        process.send_signal(signal.SIGINT)
        try:
            _, errors = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors = process.communicate()
        if not output.exists():
            raise RuntimeError(f"py-spy wrote no profile: {errors.decode(errors='replace')[-2000:]}")


@dataclass(frozen=True)
class FrameShare:
    frame: str
    self_percent: float
    total_percent: float


@dataclass(frozen=True)
class Summary:
    samples: int
    seconds: float  # of samples in which the server was not idle
    by_self: list[FrameShare]  # where the CPU was when sampled
    by_package: list[tuple[str, float]]  # the same, per package (first part of the module path), in %
    ours_by_total: list[FrameShare]  # mediagraph's own functions, with everything they called


def summarize(speedscope: Path, *, top: int = 20) -> Summary:
    """The frames with the most samples over all threads: alone (self), per package, and mediagraph's with callees."""
    document = json.loads(speedscope.read_text())
    frames = [_frame_name(frame) for frame in document["shared"]["frames"]]
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    samples, seconds = 0, 0.0
    for profile in document["profiles"]:
        for stack, weight in zip(profile["samples"], profile["weights"], strict=True):
            # py-spy puts the process itself at the root of each stack (--subprocesses): not code.
            names = [frames[index] for index in stack if frames[index] is not None]
            if not names:
                continue
            samples += 1
            seconds += weight
            own[names[-1]] += 1
            packages[_package(names[-1])] += 1
            for name in set(names):
                inclusive[name] += 1

    def share(name: str) -> FrameShare:
        return FrameShare(name, 100 * own[name] / samples, 100 * inclusive[name] / samples)

    if not samples:
        return Summary(0, 0.0, [], [], [])
    # The command line's frames hold everything the loop runs; they say nothing about a request.
    ours = [
        name
        for name, _ in inclusive.most_common()
        if _package(name) == "mediagraph" and not re.search(r"\(mediagraph/(cli/|__main__)", name)
    ]
    return Summary(
        samples=samples,
        seconds=seconds,
        by_self=[share(name) for name, _ in own.most_common(top)],
        by_package=[(name, 100 * count / samples) for name, count in packages.most_common(top)],
        ours_by_total=[share(name) for name in ours[:top]],
    )


def _package(frame: str) -> str:
    module = frame.rsplit("(", 1)[-1].rstrip(")")
    return module.split("/", 1)[0] if "/" in module else module


def _frame_name(frame: dict[str, object]) -> str | None:
    """`function (module path)`: lines left out, so a function's samples add up; None for no code."""
    if not frame.get("file"):
        return None
    file = re.sub(r"^.*/(site-packages|python3\.\d+)/", "", str(frame.get("file") or ""))
    file = re.sub(r"^.*/(mediagraph|benchmarks)/", r"\1/", file)
    return f"{frame.get('name')} ({file})"
