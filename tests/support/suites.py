"""What the generated suites did, in the run's summary: operations fuzzed, plans compared.

A test records a figure with `record_property("suite: <what>", n)`; the summary adds up
each figure over the run's tests, so a CI log states how much was generated.
"""

from __future__ import annotations

from collections import Counter

import pytest

PREFIX = "suite: "


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    totals: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if isinstance(name, str) and name.startswith(PREFIX) and isinstance(value, int):
                    totals[name.removeprefix(PREFIX)] += value
    if totals:
        terminalreporter.section("generated suites")
        for name, value in sorted(totals.items()):
            terminalreporter.write_line(f"{name}: {value:,}")
