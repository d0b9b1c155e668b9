"""A discovery source whose addresses may be host names, resolved (and re-resolved) into IP endpoints.

:class:`ResolvingDiscovery` wraps a source that reports *declared* endpoints (the static list, the
endpoints file) and reports *concrete* ones to the real sink: every declared batch, and every
``interval`` seconds, the declared set goes through :class:`~datalayer.discovery.names.NameResolution`
and the difference from the last concrete set is applied as one batch of additions / removals /
updates, exactly as any discovery change. The sink is marked synced after the first resolution that
follows the wrapped source's own first listing.

* ``interval`` 0 resolves only when the declared set changes (never on a timer).
* Re-resolution rounds never overlap and never queue: ticks that arrive during a round collapse into
  one wake-up.
* The wrapped source runs as a child task; if it raises, this source raises the same error (the data
  layer then restarts it with back-off); cancelling this source cancels the child.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence

from datalayer.discovery.base import Discovery, DiscoverySink, SpecTracker
from datalayer.discovery.names import NameResolution
from datalayer.records import DiscoveryEvent, EndpointSpec, EventKind

__all__ = ["ResolvingDiscovery"]


class _Declared:
    """The sink the wrapped source reports to: the declared set, and a wake-up for the resolver."""

    def __init__(self) -> None:
        self.specs: dict[str, EndpointSpec] = {}
        self.synced = False
        self.wake = asyncio.Event()

    def apply(self, events: Sequence[DiscoveryEvent]) -> None:
        for event in events:
            if event.kind is EventKind.REMOVED:
                self.specs.pop(event.spec.address, None)
            else:
                self.specs[event.spec.address] = event.spec
        self.wake.set()

    def mark_synced(self) -> None:
        if not self.synced:
            self.synced = True
            self.wake.set()

    def current(self) -> Mapping[str, EndpointSpec]:
        return dict(self.specs)


class ResolvingDiscovery:
    def __init__(
        self,
        inner: Discovery,
        resolution: NameResolution,
        *,
        interval: float = 5.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if interval < 0:
            raise ValueError("ResolvingDiscovery.interval: expected a non-negative number of seconds")
        self.inner = inner
        self.resolution = resolution
        self.interval = interval
        self._sleep = sleep

    async def run(self, sink: DiscoverySink) -> None:
        tracker = SpecTracker(sink.current())
        declared = _Declared()
        inner = asyncio.create_task(self.inner.run(declared), name="discovery-declared")
        inner.add_done_callback(lambda _: declared.wake.set())
        ticker: asyncio.Task[None] | None = None
        try:
            while True:
                await declared.wake.wait()
                declared.wake.clear()
                if inner.done():
                    inner.result()  # re-raise the wrapped source's error
                if not declared.synced:
                    continue
                specs = await self.resolution.expand(list(declared.specs.values()))
                events = tracker.update(specs)
                if events:
                    sink.apply(events)
                sink.mark_synced()
                if ticker is None and self.interval > 0:
                    ticker = asyncio.create_task(self._tick(declared.wake), name="discovery-resolve-timer")
        finally:
            tasks = [t for t in (inner, ticker) if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _tick(self, wake: asyncio.Event) -> None:
        while True:
            await self._sleep(self.interval)
            wake.set()
