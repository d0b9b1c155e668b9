"""A bounded ring of recent scheduling decisions, for ``/debug/decisions``.

Appending is O(1) and allocation-light (one tuple: the request's identifying fields and the scheduler's
own immutable result; the :class:`DecisionEntry` and its JSON are built only when the endpoint is read).
Oldest entries fall off past ``capacity``. The request itself is not kept: its prompt and headers (up
to the 16 MiB body limit each) would otherwise stay alive for as long as the entry.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.types import LLMRequest, SchedulingResult

__all__ = ["DecisionEntry", "DecisionLog"]


@dataclass(frozen=True, slots=True)
class DecisionEntry:
    """One routed request: when, what, where, and the scheduler's record of why."""

    at: float  # wall-clock seconds
    request_id: str
    model: str
    target_model: str
    priority: int
    result: SchedulingResult
    schedule_seconds: float

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "time": self.at,
            "request_id": self.request_id,
            "model": self.model,
            "target_model": self.target_model,
            "priority": self.priority,
            "endpoints": list(self.result.addresses),
            "primary_profile": self.result.primary_profile,
            "headers": dict(self.result.headers),
            "schedule_ms": round(self.schedule_seconds * 1000, 4),
        }
        if self.result.decision is not None:
            out["decision"] = self.result.decision.to_dict()
        return out


class DecisionLog:
    """The last ``capacity`` decisions (newest last)."""

    __slots__ = ("_clock", "_ring")

    def __init__(self, capacity: int = 256, clock: Callable[[], float] = time.time) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._ring: deque[tuple[float, str, str, str, int, SchedulingResult, float]] = deque(maxlen=capacity)
        self._clock = clock

    @property
    def capacity(self) -> int:
        return self._ring.maxlen or 0

    def add(self, request: LLMRequest, result: SchedulingResult, schedule_seconds: float) -> None:
        r = request
        self._ring.append(
            (self._clock(), r.request_id, r.model, r.target_model, r.priority, result, schedule_seconds)
        )

    def last(self, n: int) -> list[dict[str, Any]]:
        """The newest ``n`` decisions as JSON-ready dicts, newest first."""
        if n <= 0:
            return []
        ring = self._ring
        return [DecisionEntry(*ring[-1 - i]).to_dict() for i in range(min(n, len(ring)))]
