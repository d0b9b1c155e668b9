"""Small fake plugins and an observer that records calls, shared by the framework tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase
from scheduler.types import Completion, EndpointView, LLMRequest, SchedulingResult, ScoredEndpoint


def request(rid: str = "r", prompt: str = "") -> LLMRequest:
    return LLMRequest(request_id=rid, model="m", target_model="m", prompt_text=prompt)


class KeepFilter(PluginBase):
    """Keeps endpoints whose address is in ``keep``; explains removals."""

    plugin_type = "keep-filter"

    def __init__(self, name: str, keep: set[str]) -> None:
        super().__init__(name)
        self.keep = keep

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        return [e for e in endpoints if e.address in self.keep]

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return f"{endpoint.address} not in keep list"


class DropFilter(PluginBase):
    """Drops the listed endpoints (no explanations)."""

    plugin_type = "drop-filter"

    def __init__(self, name: str, drop: set[str]) -> None:
        super().__init__(name)
        self.drop = drop

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        return [e for e in endpoints if e.address not in self.drop]


class FixedScorer(PluginBase):
    """Scores from a table (address -> raw score, possibly out of range)."""

    plugin_type = "fixed-scorer"

    def __init__(self, name: str, table: Mapping[str, float], default: float = 0.0) -> None:
        super().__init__(name)
        self.table = table
        self.default = default

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        return [self.table.get(e.address, self.default) for e in endpoints]


class RaisingPlugin(PluginBase):
    """Raises from every extension point it implements."""

    plugin_type = "raising"

    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        raise RuntimeError("scorer exploded")

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        raise RuntimeError("dispatch hook exploded")

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        raise RuntimeError("completion hook exploded")


class FirstPicker(PluginBase):
    """Picks whatever ``choose`` returns (default: the first candidate)."""

    plugin_type = "first-picker"

    def __init__(
        self,
        name: str = "first",
        choose: Callable[[Sequence[ScoredEndpoint]], Sequence[ScoredEndpoint]] | None = None,
    ) -> None:
        super().__init__(name)
        self.choose = choose or (lambda scored: list(scored[:1]))

    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        return self.choose(scored)


@dataclass
class Recorder:
    """A hook plugin recording every call, and an observer recording every observation."""

    calls: list[tuple[str, Any]] = field(default_factory=list)


class RecordingHooks(PluginBase):
    plugin_type = "recording-hooks"

    def __init__(self, name: str, recorder: Recorder) -> None:
        super().__init__(name)
        self.recorder = recorder

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        self.recorder.calls.append(("dispatched", request.request_id))

    def on_response_headers(
        self, request: LLMRequest, result: SchedulingResult, status: int, headers: Mapping[str, str]
    ) -> None:
        self.recorder.calls.append(("headers", status))

    def on_response_chunk(self, request: LLMRequest, result: SchedulingResult, chunk: bytes) -> None:
        self.recorder.calls.append(("chunk", chunk))

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        self.recorder.calls.append(("completed", completion.outcome))

    def on_endpoints_removed(self, addresses: frozenset[str]) -> None:
        self.recorder.calls.append(("removed", addresses))


class RecordingObserver:
    def __init__(self) -> None:
        self.plugins: list[tuple[str, str, str]] = []
        self.cycles: list[str] = []
        self.errors: list[tuple[str, str, str]] = []

    def observe_plugin(
        self, extension_point: str, plugin_type: str, plugin_name: str, seconds: float
    ) -> None:
        assert seconds >= 0.0
        self.plugins.append((extension_point, plugin_type, plugin_name))

    def observe_cycle(self, seconds: float, status: str) -> None:
        self.cycles.append(status)

    def plugin_error(
        self, extension_point: str, plugin_type: str, plugin_name: str, error: BaseException
    ) -> None:
        self.errors.append((extension_point, plugin_name, str(error)))
