"""Contracts of the flow-control policies (GIE's ``framework/interface/flowcontrol``), no logic.

A queued request is a :class:`QueuedItem`; the requests of one flow (one fairness id in one priority
band) sit in a :class:`FlowQueue` that the band's :class:`OrderingPolicy` builds; a band picks the
next flow through the :class:`FairnessState` its :class:`FairnessPolicy` builds. A
:class:`UsageLimitPolicy` gives, per priority, the pool saturation under which that band may dispatch.

Removal is lazy: the flow controller marks a cancelled or expired item ``removed`` and the queue
skips such items when it peeks or pops; :meth:`FlowQueue.compact` drops them (the controller calls it
when they outnumber the live items, so a queue's memory stays proportional to its live items).
Everything here runs on the event loop: no locking, no I/O, no awaits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from scheduler.interfaces import Plugin

__all__ = [
    "FairnessPolicy",
    "FairnessState",
    "FlowHandle",
    "FlowQueue",
    "OrderingPolicy",
    "QueuedItem",
    "ShareLimitedFairness",
    "ShareLimitedState",
    "UsageLimitPolicy",
]


class QueuedItem(Protocol):
    """What policies read of a queued request."""

    @property
    def seq(self) -> int:
        """Arrival sequence number, unique and increasing (the FCFS order and every tie-break)."""
        ...

    @property
    def enqueued_at(self) -> float:
        """Clock time the request joined the queues (the flow controller's clock, monotonic seconds)."""
        ...

    @property
    def request_id(self) -> str:
        """The queued request's id ("" when the caller gave none)."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The request's headers, lower-case names (empty when the caller gave none)."""
        ...

    @property
    def deadline(self) -> float:
        """Clock time the request expires at (``inf`` without a TTL)."""
        ...

    @property
    def removed(self) -> bool:
        """Cancelled or expired while queued: skip it."""
        ...


class FlowQueue(Protocol):
    """The queued requests of one flow, in the order of the band's ordering policy."""

    def push(self, item: QueuedItem) -> None: ...

    def peek(self) -> QueuedItem | None:
        """The next live item without removing it (None when there is none)."""
        ...

    def pop(self) -> QueuedItem | None:
        """Remove and return the next live item (None when there is none)."""
        ...

    def compact(self) -> None:
        """Drop every removed item."""
        ...


class FlowHandle(Protocol):
    """What a fairness policy reads of a flow."""

    @property
    def queue(self) -> FlowQueue: ...

    @property
    def fairness_id(self) -> str:
        """The flow's fairness id (``x-gateway-inference-fairness-id``; llm-d-router's program id)."""
        ...


@runtime_checkable
class OrderingPolicy(Plugin, Protocol):
    """Orders the requests of one flow (GIE ``OrderingPolicy``)."""

    def new_queue(self) -> FlowQueue:
        """An empty queue that yields items in this policy's order."""
        ...

    def key(self, item: QueuedItem) -> tuple[float, int]:
        """Sort key: smaller goes first. Compares items of different flows (global-strict fairness)."""
        ...


class FairnessState(Protocol):
    """Per-band state of a fairness policy: the flows that have queued requests."""

    def activate(self, flow: FlowHandle) -> None:
        """``flow`` got its first queued request."""
        ...

    def deactivate(self, flow: FlowHandle) -> None:
        """``flow`` has no queued request left."""
        ...

    def pick(self) -> FlowHandle | None:
        """The flow whose next request goes next (None when no flow is active)."""
        ...


@runtime_checkable
class FairnessPolicy(Plugin, Protocol):
    """Chooses among the flows of one priority band (GIE ``FairnessPolicy``)."""

    def new_state(self, ordering: OrderingPolicy) -> FairnessState:
        """Fresh state for one band whose flows are ordered by ``ordering``."""
        ...


class ShareLimitedState(FairnessState, Protocol):
    """(ours) Per-band state of a :class:`ShareLimitedFairness` policy."""

    def pick_within(self, saturation: float, ceiling: float) -> FlowHandle | None:
        """The flow whose next request goes next at the pool's ``saturation`` under the band's
        ``ceiling`` (saturation < ceiling): None when every waiting flow is held back (the band waits)."""
        ...


@runtime_checkable
class ShareLimitedFairness(FairnessPolicy, Protocol):
    """(ours) A fairness policy that also holds back a flow over its share of the pool's capacity.

    The flow controller builds a band's state with :meth:`new_band_state` (not ``new_state``), picks
    with :meth:`ShareLimitedState.pick_within`, and asks :meth:`admits` before taking a request on
    the fast path (nothing queued).
    """

    def new_band_state(self, ordering: OrderingPolicy, priority: int) -> ShareLimitedState:
        """Fresh state for the band of ``priority``."""
        ...

    def admits(self, priority: int, fairness_id: str, saturation: float, ceiling: float) -> bool:
        """Whether a request of ``fairness_id`` arriving in band ``priority`` may be dispatched at once
        at the pool's ``saturation`` under the band's ``ceiling`` (saturation < ceiling). Counts as the
        flow's activity."""
        ...


@runtime_checkable
class UsageLimitPolicy(Plugin, Protocol):
    """Saturation ceilings per priority band (GIE's ``UsageLimitPolicy.ComputeLimit``)."""

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        """One ceiling per band of ``priorities`` (the bands holding requests, highest first): a band
        may dispatch while the pool's ``saturation`` is below its ceiling. Called once per dispatch
        decision; may keep bounded state (e.g. a duty-cycle counter)."""
        ...
