"""Read what the routing benchmark measures outside the load generator.

* Model servers (``GET /metrics``, vLLM names): prefix-cache hits and queries (token counters, summed
  over ``model_name`` labels) and the load gauge ``running + waiting``.
* The picker (``GET /metrics`` on its metrics port): the cumulative buckets of
  ``inference_extension_scheduler_e2e_duration_seconds``; :func:`bucket_delta` subtracts a scrape taken
  before the run so only the run's decisions count.
* The picker's CPU time: ``utime + stime`` of ``/proc/<pid>/stat`` in seconds (:func:`proc_cpu_seconds`;
  the reader is injectable for tests).
* :class:`LoadSampler` polls every server's load every ``interval_s`` while a run is in flight and
  keeps ``(seconds since start, {server label: running + waiting})`` samples for the load plot.

Parsing uses ``prometheus_client``'s text parser; a server that does not answer contributes nothing to
that scrape (the sampler records the others) rather than aborting the run.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "DECISION_HISTOGRAM",
    "LoadSampler",
    "ServerCounters",
    "bucket_delta",
    "histogram_buckets",
    "parse_server",
    "proc_cpu_seconds",
    "scrape_servers",
]

DECISION_HISTOGRAM = "inference_extension_scheduler_e2e_duration_seconds"


@dataclass(frozen=True, slots=True)
class ServerCounters:
    """One scrape of one model server: token counters and the load gauge."""

    prefix_hits: float = 0.0
    prefix_queries: float = 0.0
    running: float = 0.0
    waiting: float = 0.0

    @property
    def load(self) -> int:
        return int(self.running + self.waiting)


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def parse_server(text: str) -> ServerCounters:
    """Sum the vLLM counters and gauges the benchmark needs out of one ``/metrics`` text."""
    sums: dict[str, float] = {}
    for name, _labels, value in _samples(text):
        sums[name] = sums.get(name, 0.0) + value
    return ServerCounters(
        prefix_hits=sums.get("vllm:prefix_cache_hits_total", 0.0),
        prefix_queries=sums.get("vllm:prefix_cache_queries_total", 0.0),
        running=sums.get("vllm:num_requests_running", 0.0),
        waiting=sums.get("vllm:num_requests_waiting", 0.0),
    )


async def scrape_servers(client: httpx.AsyncClient, urls: Sequence[str]) -> dict[str, ServerCounters]:
    """``{url: counters}`` for every server whose ``/metrics`` answered 200."""

    async def one(url: str) -> tuple[str, ServerCounters | None]:
        try:
            resp = await client.get(url + "/metrics")
        except httpx.HTTPError:
            return url, None
        return url, parse_server(resp.text) if resp.status_code == 200 else None

    got = await asyncio.gather(*(one(u) for u in urls))
    return {u: c for u, c in got if c is not None}


def histogram_buckets(text: str, name: str = DECISION_HISTOGRAM) -> list[tuple[float, float]]:
    """Cumulative ``(le, count)`` buckets of histogram ``name`` summed over its label sets."""
    by_le: dict[float, float] = {}
    for sample, labels, value in _samples(text):
        if sample == name + "_bucket" and "le" in labels:
            le = math.inf if labels["le"] in ("+Inf", "inf") else float(labels["le"])
            by_le[le] = by_le.get(le, 0.0) + value
    return sorted(by_le.items())


def bucket_delta(
    before: Sequence[tuple[float, float]], after: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """``after - before`` per bucket bound (bounds only in ``after`` keep their count)."""
    prior = dict(before)
    return [(le, count - prior.get(le, 0.0)) for le, count in after]


def _read_text(path: str) -> str:
    return Path(path).read_text()


def proc_cpu_seconds(pid: int, read: Callable[[str], str] = _read_text) -> float:
    """User + system CPU seconds of ``pid`` from ``/proc/<pid>/stat`` (fields 14 and 15)."""
    stat = read(f"/proc/{pid}/stat")
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


class LoadSampler:
    """Samples ``running + waiting`` of every server every ``interval_s`` until :meth:`stop`."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        servers: Mapping[str, str],
        interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client, self._servers, self._interval = client, dict(servers), interval_s
        self._clock = clock
        self.timeline: list[tuple[float, dict[str, int]]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        t0 = self._clock()
        urls = list(self._servers)
        while True:
            got = await scrape_servers(self._client, urls)
            self.timeline.append((self._clock() - t0, {self._servers[u]: c.load for u, c in got.items()}))
            await asyncio.sleep(self._interval)

    async def stop(self) -> list[tuple[float, dict[str, int]]]:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        return self.timeline
