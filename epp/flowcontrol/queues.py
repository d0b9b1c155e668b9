"""The flow-control queues, sans I/O: priority bands of flows of queued requests.

:class:`FlowQueues` holds every queued :class:`Item`. A band per priority level (configured, or
created from the default templates on first use and dropped again when it empties); in a band, a
flow per fairness id (created on the first request, dropped when it empties), each flow a queue in the
band's ordering policy's order; the band's fairness policy picks the flow. :meth:`FlowQueues.pop_next`
serves bands in strict priority order (highest first) and stops at the first band its
``gate(priority)`` closes (as upstream's dispatch loop: a lower band never overtakes a gated one).

Capacity (checked by :meth:`FlowQueues.rejection` before :meth:`push`): the band's ``maxRequests`` /
``maxBytes`` and the pool's (0: none); and, whatever the configuration says, at most
:data:`~epp.flowcontrol.config.MAX_QUEUED_REQUESTS` queued requests in all (ours). Bands and flows exist
only while they hold requests, so memory is proportional to the queued requests.

Removal (a cancelled or expired request) is O(1): the item is marked and skipped later; a flow's queue
is compacted when its removed items outnumber the live ones (plus 64). Expiry scans the arrival
order from its head: every item shares the same TTL rule, so arrival order is expiry order.

Pure apart from the times passed in; not thread-safe (the event loop's).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from epp.flowcontrol.config import MAX_QUEUED_REQUESTS, BandConfig, FlowControlConfig
from scheduler.plugins.flowcontrol.interfaces import FairnessState, FlowQueue, ShareLimitedState

__all__ = ["Band", "Flow", "FlowQueues", "Item"]

_COMPACT_SLACK = 64
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class Item:
    """One queued request. ``payload``: the caller's (the request and its dispatch callback)."""

    __slots__ = ("deadline", "enqueued_at", "fairness_id", "flow", "headers", "payload", "priority",
                 "removed", "request_id", "seq", "size")  # fmt: skip

    def __init__(
        self, seq: int, priority: int, fairness_id: str, size: int, enqueued_at: float, deadline: float,
        payload: Any, request_id: str = "", headers: Mapping[str, str] = _NO_HEADERS,
    ) -> None:  # fmt: skip
        self.seq = seq
        self.request_id = request_id
        self.headers = headers
        self.priority = priority
        self.fairness_id = fairness_id
        self.size = size
        self.enqueued_at = enqueued_at
        self.deadline = deadline
        self.payload = payload
        self.removed = False
        self.flow: Flow | None = None


class Flow:
    """The queued requests of one fairness id in one band."""

    __slots__ = ("band", "count", "dead", "fairness_id", "queue")

    def __init__(self, band: Band, fairness_id: str, queue: FlowQueue) -> None:
        self.band = band
        self.fairness_id = fairness_id
        self.queue = queue
        self.count = 0  # live items
        self.dead = 0  # removed items still in the queue


class Band:
    """The flows of one priority level."""

    __slots__ = ("bytes", "config", "count", "fairness", "flows", "priority", "share")

    def __init__(self, config: BandConfig, priority: int) -> None:
        self.config = config
        self.priority = priority
        self.flows: dict[str, Flow] = {}
        new_band_state = getattr(config.fairness, "new_band_state", None)  # a ShareLimitedFairness
        self.share: ShareLimitedState | None = (
            None if new_band_state is None else new_band_state(config.ordering, priority)
        )
        self.fairness: FairnessState = (
            config.fairness.new_state(config.ordering) if self.share is None else self.share
        )
        self.count = 0
        self.bytes = 0


class FlowQueues:
    """Every queued request, by band and flow."""

    __slots__ = ("_arrivals", "_bands", "_config", "_dead", "_order", "_seq", "bytes", "count")

    def __init__(self, config: FlowControlConfig) -> None:
        self._config = config
        self._bands: dict[int, Band] = {}
        self._order: list[Band] = []  # bands holding requests, highest priority first
        self._arrivals: deque[Item] = deque()  # arrival order, removed items included until compacted
        self._dead = 0  # removed items in _arrivals
        self._seq = 0
        self.count = 0
        self.bytes = 0

    def __len__(self) -> int:
        return self.count

    def bands(self) -> Iterator[Band]:
        """Bands holding requests, highest priority first."""
        return iter(self._order)

    def holds(self, priority: int) -> bool:
        """Whether band ``priority`` holds queued requests."""
        return priority in self._bands

    def items(self) -> Iterator[Item]:
        """Every live queued item, in arrival order."""
        return (i for i in self._arrivals if not i.removed)

    def rejection(self, priority: int, size: int) -> str | None:
        """Why a request of ``priority`` and ``size`` bytes does not fit (None: it fits)."""
        c = self._config
        if self.count >= MAX_QUEUED_REQUESTS:
            return f"the pool's queue is full ({MAX_QUEUED_REQUESTS} requests, the picker's budget)"
        if c.max_requests and self.count >= c.max_requests:
            return f"the pool's queue is full (maxRequests {c.max_requests})"
        if c.max_bytes and self.bytes + size > c.max_bytes:
            return f"the pool's queue is full (maxBytes {c.max_bytes})"
        band = self._bands.get(priority)
        config = band.config if band is not None else c.band(priority)
        count, used = (band.count, band.bytes) if band is not None else (0, 0)
        if count >= config.max_requests:
            return f"priority band {priority} is full (maxRequests {config.max_requests})"
        if used + size > config.max_bytes:
            return f"priority band {priority} is full (maxBytes {config.max_bytes})"
        return None

    def push(
        self, priority: int, fairness_id: str, size: int, now: float, deadline: float, payload: Any,
        request_id: str = "", headers: Mapping[str, str] = _NO_HEADERS,
    ) -> Item:  # fmt: skip
        """Queue a request (call :meth:`rejection` first)."""
        self._seq += 1
        item = Item(self._seq, priority, fairness_id, size, now, deadline, payload, request_id, headers)
        band = self._bands.get(priority)
        if band is None:
            band = self._bands[priority] = Band(self._config.band(priority), priority)
        if band.count == 0:
            self._order.append(band)
            self._order.sort(key=lambda b: -b.priority)
        flow = band.flows.get(fairness_id)
        if flow is None:
            flow = band.flows[fairness_id] = Flow(band, fairness_id, band.config.ordering.new_queue())
        if flow.count == 0:
            band.fairness.activate(flow)
        flow.queue.push(item)
        item.flow = flow
        flow.count += 1
        band.count += 1
        band.bytes += size
        self.count += 1
        self.bytes += size
        self._arrivals.append(item)
        return item

    def pop_next(
        self,
        gate: Callable[[int], bool],
        ceiling: Callable[[int], float] | None = None,
        saturation: float = 0.0,
    ) -> Item | None:
        """The next request to dispatch, removed from the queues: the highest band, if ``gate`` opens it;
        its fairness policy's flow, that flow's ordering policy's head. None when nothing may go.

        A share-limited fairness policy (``fair-share-fairness-policy``) picks with the pool's
        ``saturation`` and the band's ``ceiling(priority)`` (without ``ceiling``: unlimited); when it
        holds back every waiting flow, the band waits and the pass stops there (strict priority)."""
        for band in self._order:
            if not gate(band.priority):
                return None
            share = band.share
            limit = math.inf if share is None or ceiling is None else ceiling(band.priority)
            flow = band.fairness.pick() if share is None else share.pick_within(saturation, limit)
            while flow is not None:
                item = flow.queue.pop()
                if item is not None:
                    assert isinstance(item, Item)
                    self._take(item)
                    return item
                band.fairness.deactivate(flow)  # cannot happen while counts are right; stay safe
                flow = band.fairness.pick() if share is None else share.pick_within(saturation, limit)
            if share is not None and band.count:
                return None  # every waiting flow is held back at its share
        return None

    def remove(self, item: Item) -> bool:
        """Take ``item`` out (cancelled or expired); False when it is no longer queued."""
        if item.removed:
            return False
        self._take(item)
        flow = item.flow
        if flow is not None and flow.count:
            flow.dead += 1
            if flow.dead > flow.count + _COMPACT_SLACK:
                flow.queue.compact()
                flow.dead = 0
        return True

    def expired(self, now: float, ttl: float, since: float) -> list[Item]:
        """Remove and return the items whose wait exceeded ``ttl`` seconds, counting from their arrival
        or from ``since`` (the last change of TTL regime), whichever is later. ``ttl`` 0: none."""
        out: list[Item] = []
        if ttl <= 0 or since > now - ttl:
            return out
        limit = now - ttl
        while self._arrivals:
            arrivals = self._arrivals
            item = arrivals[0]
            if item.removed:
                arrivals.popleft()
                self._dead -= 1
                continue
            if item.enqueued_at > limit:
                break
            arrivals.popleft()
            self._take(item, dead=False)
            out.append(item)
        return out

    def _take(self, item: Item, dead: bool = True) -> None:
        """Account ``item`` out; ``dead``: it stays in the arrival order (as a removed item)."""
        item.removed = True
        flow = item.flow
        assert flow is not None
        band = flow.band
        flow.count -= 1
        band.count -= 1
        band.bytes -= item.size
        self.count -= 1
        self.bytes -= item.size
        if flow.count == 0:
            band.fairness.deactivate(flow)
            del band.flows[flow.fairness_id]
            if band.count == 0:
                self._order.remove(band)
                del self._bands[band.priority]
        if not self.count:
            self._arrivals.clear()
            self._dead = 0
            return
        if not dead:
            return
        self._dead += 1
        if self._dead > self.count + _COMPACT_SLACK:
            self._arrivals = deque(i for i in self._arrivals if not i.removed)
            self._dead = 0
