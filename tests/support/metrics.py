"""Reading /metrics as a scraper does: Prometheus text into samples by name and labels."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    """The sample's value; 0 for a series not exported yet (a counter before its first increment)."""
    return samples.get((metric, frozenset(labels.items())), 0.0)


def scrape(base: str, *, token: str | None = None) -> Samples:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{base}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return parse(response.text)


def wait_for_sample(
    base: str, metric: str, accept: Callable[[float], bool], /, *, timeout: float = 30, **labels: str
) -> float:
    """Scrape until the sample satisfies `accept`; its value then (fails after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = value(scrape(base), metric, **labels)
        if accept(seen):
            return seen
        time.sleep(0.2)
    raise AssertionError(f"{metric}{labels} stayed at {seen}")
