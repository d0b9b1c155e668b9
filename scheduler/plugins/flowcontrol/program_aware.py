"""``program-aware-fairness`` (llm-d-router): a fairness policy that shares a priority band between
programs (fairness ids: agentic workflows, tenants) by the service each has received, not per request.

Scoring strategy ``las`` (Least Attained Service, the only one): among the band's flows with a queued
request, each program gets ``score = lasWeightService * (1 - norm(service)) + lasWeightHeadWait *
norm(headWaitMs)``, where ``norm`` range-normalises over the competing flows (``(v - min) / (max -
min)``, 0.5 when all are equal), ``service`` is the program's attained service and ``headWaitMs`` the
age of its flow's head request in whole milliseconds; the highest score goes (ties: the flow that
became active first; upstream leaves ties to Go's map order).

Attained service is weighted tokens, ``prompt_tokens + 2 * completion_tokens`` of each completed
request (the model server's usage; 0 when it reported none), decayed in wall-clock time with half-life
``lasHalfLifeSeconds`` (``service *= 2 ** (-elapsed / halfLife)``; 0: no decay). Decay is folded in
lazily whenever a program's service is read or added to, so an idle program's service ages out
without being visited.

Per-program bookkeeping through the request lifecycle (upstream's ``ProgramMetrics``): at dispatch
(the ``dispatched`` hook, upstream's PreRequest) the dispatched and in-flight counts and, for a request
that waited in flow control, the running mean of its queue wait (from its enqueue time, stashed when the
policy picked its flow); at completion (the ``completed`` hook, upstream's final response chunk) the
attained service, the in-flight count and the last completion time. Unlike upstream, whose final-chunk
hook never runs for a request abandoned after dispatch, ``completed`` runs for every dispatch, so an
abandoned request does not pin its program in memory.

Eviction: a program with nothing in flight and no completion for ``evictionTtlSeconds`` (its creation
counts as one) is dropped, with its gauge series, by a sweep at most every ``evictionSweepSeconds``
(run from the policy's own calls, where upstream runs a timer; ``evictionTtlSeconds: 0``: never).

Parameters and defaults (upstream's): ``strategy`` ``las`` ("" means ``las``), ``lasWeightService``
0.8 (>= 0), ``lasWeightHeadWait`` 0.2 (>= 0), ``lasHalfLifeSeconds`` 60 (>= 0), ``evictionTtlSeconds``
3600 (>= 0), ``evictionSweepSeconds`` 300 (> 0).

Metrics (reported through :class:`scheduler.observer.ProgramFairnessMetrics`, read at scrape time):
``llm_d_epp_program_aware_avg_wait_time_milliseconds{program_id}`` (as of the program's last dispatch),
``..._attained_service_tokens{program_id}`` (as of its last completion, so an idle program's series is
flat while scheduling reads the decayed value) and ``..._jains_fairness_index`` (Jain's index over the
programs' mean waits, ``(sum x)^2 / (n sum x^2)``, 1.0 with fewer than two programs or all waits 0; as
of the last pick).

Budgets (ours): at most :data:`MAX_PROGRAMS` programs are tracked (past it, creating one first drops
the idle program that completed longest ago); at most :data:`MAX_STASHED_WAITS` enqueue times wait
for their dispatch (the oldest are dropped: a picked request whose scheduling failed never dispatches).
Event-loop only, like the flow controller.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from scheduler.interfaces import Handle
from scheduler.observer import PluginMetrics, ProgramFairnessMetrics, ProgramSample
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.flowcontrol.interfaces import FairnessState, FlowHandle, OrderingPolicy
from scheduler.types import DEFAULT_FAIRNESS_ID, Completion, LLMRequest, SchedulingResult

__all__ = [
    "DEFAULT_FAIRNESS_ID",
    "MAX_PROGRAMS",
    "MAX_STASHED_WAITS",
    "ProgramAwareFairness",
    "ProgramAwareParams",
    "factory",
    "jains_index",
    "range_normalize",
]

WEIGHT_INPUT_TOKEN = 1
WEIGHT_OUTPUT_TOKEN = 2
MAX_PROGRAMS = 10_000
"""Programs tracked at most (ours; upstream bounds them by the eviction TTL alone)."""
MAX_STASHED_WAITS = 100_000
"""Enqueue times of picked requests awaiting their dispatch, at most (the flow controller's queue budget)."""


def _strategy(value: Any) -> str:
    if value in ("", "las"):
        return "las"
    raise ValueError(value)


@dataclass(frozen=True, slots=True)
class ProgramAwareParams:
    strategy: str = param("las", convert=_strategy, expect='"las" (the only scoring strategy)')
    las_weight_service: float = param(0.8, ge=0)
    las_weight_head_wait: float = param(0.2, ge=0)
    las_half_life_seconds: float = param(60.0, ge=0)
    eviction_ttl_seconds: float = param(3600.0, ge=0)
    eviction_sweep_seconds: float = param(300.0, gt=0)


def range_normalize(value: float, lo: float, hi: float) -> float:
    """``(value - lo) / (hi - lo)``; 0.5 when ``lo == hi``."""
    if hi == lo:
        return 0.5
    return (value - lo) / (hi - lo)


def jains_index(total: float, total_sq: float, n: float) -> float:
    """Jain's fairness index from the sum, the sum of squares and the count; 1.0 when ``n <= 1`` or
    every value is 0."""
    if n <= 1 or total_sq == 0:
        return 1.0
    return (total * total) / (n * total_sq)


class Program:
    """What the policy knows of one program (upstream's ``ProgramMetrics`` and LAS state)."""

    __slots__ = ("anchor", "avg_wait_ms", "dispatched", "in_flight", "last_completion", "reported_service",
                 "reported_wait", "service", "wait_count")  # fmt: skip

    def __init__(self, now: float) -> None:
        self.avg_wait_ms = 0.0
        self.wait_count = 0
        self.last_completion = now  # seeded, so a program that never completes still ages out
        self.dispatched = 0
        self.in_flight = 0
        self.service = 0.0
        self.anchor: float | None = None  # decay folded in up to here
        self.reported_wait: float | None = None
        self.reported_service: float | None = None

    def service_at(self, now: float, half_life: float) -> float:
        """Attained service with the decay up to ``now`` folded in (advances the anchor)."""
        anchor = self.anchor
        if anchor is None:
            self.anchor = now
            return self.service
        elapsed = now - anchor
        if elapsed > 0:
            if half_life > 0:
                self.service *= 2.0 ** (-elapsed / half_life)
            self.anchor = now
        return self.service

    def add_service(self, cost: float, now: float, half_life: float) -> float:
        """Fold in the pending decay, then add ``cost``; the new total."""
        self.service = self.service_at(now, half_life) + cost
        return self.service


class _State:
    """One band's active flows, scored by the plugin's LAS strategy."""

    __slots__ = ("_flows", "_plugin")

    def __init__(self, plugin: ProgramAwareFairness) -> None:
        self._plugin = plugin
        self._flows: dict[int, FlowHandle] = {}  # activation order: the tie-break

    def activate(self, flow: FlowHandle) -> None:
        self._flows[id(flow)] = flow

    def deactivate(self, flow: FlowHandle) -> None:
        self._flows.pop(id(flow), None)

    def pick(self) -> FlowHandle | None:
        return self._plugin.pick_flow(list(self._flows.values()))


class ProgramAwareFairness(PluginBase):
    """The ``program-aware-fairness`` fairness policy (see the module docstring)."""

    plugin_type = "program-aware-fairness"

    def __init__(
        self, name: str, params: ProgramAwareParams, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(name)
        self.params = params
        self._clock = clock
        self._w_service = params.las_weight_service
        self._w_wait = params.las_weight_head_wait
        self._half_life = params.las_half_life_seconds
        self._ttl = params.eviction_ttl_seconds
        self._sweep = params.eviction_sweep_seconds
        self._last_sweep = clock()
        self.programs: dict[str, Program] = {}
        self._stash: dict[str, float] = {}  # request id -> enqueue time, insertion order = age
        self._index = 0.0  # the gauge's value until the first pick, as upstream's
        self._wait_sum = 0.0  # over programs with a wait sample: sum and sum of squares of the means
        self._wait_sq = 0.0
        self._wait_n = 0

    # -- fairness policy

    def new_state(self, ordering: OrderingPolicy) -> FairnessState:
        return _State(self)

    def pick_flow(self, flows: list[FlowHandle]) -> FlowHandle | None:
        """The flow to serve next among ``flows`` (a band's active flows, in activation order)."""
        now = self._clock()
        self._maybe_sweep(now)
        scored: list[tuple[FlowHandle, float, float, float]] = []
        for flow in flows:
            head = flow.queue.peek()
            if head is None:
                continue
            service = self._program(flow.fairness_id, now).service_at(now, self._half_life)
            wait_ms = float(math.trunc((now - head.enqueued_at) * 1000.0))
            scored.append((flow, service, wait_ms, head.enqueued_at))
        best: FlowHandle | None = None
        best_head = 0.0
        if scored:
            s_lo = min(e[1] for e in scored)
            s_hi = max(e[1] for e in scored)
            w_lo = min(e[2] for e in scored)
            w_hi = max(e[2] for e in scored)
            best_score = -math.inf
            for flow, service, wait_ms, enqueued_at in scored:
                score = self._w_service * (1.0 - range_normalize(service, s_lo, s_hi)) + (
                    self._w_wait * range_normalize(wait_ms, w_lo, w_hi)
                )
                if score > best_score:
                    best, best_score, best_head = flow, score, enqueued_at
        if best is not None:
            head = best.queue.peek()
            if head is not None and head.request_id:
                self._stash_wait(head.request_id, best_head)
        self._index = jains_index(self._wait_sum, self._wait_sq, self._wait_n)
        return best

    # -- request lifecycle hooks

    def on_dispatched(self, request: LLMRequest, result: SchedulingResult) -> None:
        """Upstream's PreRequest: count the dispatch and, if it waited in flow control, its wait."""
        now = self._clock()
        self._maybe_sweep(now)
        program = self._program(request.fairness_id or DEFAULT_FAIRNESS_ID, now)
        program.in_flight += 1
        program.dispatched += 1
        enqueued_at = self._stash.pop(request.request_id, None)
        if enqueued_at is not None:
            wait_ms = float(math.trunc((now - enqueued_at) * 1000.0))
            old = program.avg_wait_ms
            if program.wait_count:
                self._wait_sum -= old
                self._wait_sq -= old * old
            else:
                self._wait_n += 1
            program.wait_count += 1
            program.avg_wait_ms = old + (wait_ms - old) / program.wait_count
            new = program.avg_wait_ms
            self._wait_sum += new
            self._wait_sq += new * new
        program.reported_wait = program.avg_wait_ms

    def on_completed(self, request: LLMRequest, result: SchedulingResult, completion: Completion) -> None:
        """Upstream's final response chunk: add the weighted tokens, close the in-flight count."""
        now = self._clock()
        program = self._program(request.fairness_id or DEFAULT_FAIRNESS_ID, now)
        usage = completion.usage
        cost = WEIGHT_INPUT_TOKEN * usage.prompt_tokens + WEIGHT_OUTPUT_TOKEN * usage.completion_tokens
        program.reported_service = program.add_service(float(cost), now, self._half_life)
        program.in_flight = max(0, program.in_flight - 1)
        program.last_completion = now

    # -- metrics and state

    def bind_metrics(self, metrics: PluginMetrics) -> None:
        if isinstance(metrics, ProgramFairnessMetrics):
            metrics.watch_program_fairness(self)

    def program_samples(self) -> Iterator[ProgramSample]:
        for program_id, p in list(self.programs.items()):
            if p.reported_wait is not None or p.reported_service is not None:
                yield ProgramSample(program_id, p.reported_wait, p.reported_service)

    def fairness_index(self) -> float:
        return self._index

    def dump_state(self) -> dict[str, Any]:
        """Upstream's DumpState, for ``/debug/plugins/state``: aggregates only (program ids come from
        a client header and are left out)."""
        return {
            "totalPrograms": len(self.programs),
            "totalInFlight": sum(p.in_flight for p in self.programs.values()),
            "fairnessIndex": jains_index(self._wait_sum, self._wait_sq, self._wait_n),
        }

    # -- internals

    def _program(self, program_id: str, now: float) -> Program:
        program = self.programs.get(program_id)
        if program is None:
            if len(self.programs) >= MAX_PROGRAMS:
                self._drop_oldest_idle()
            program = self.programs[program_id] = Program(now)
        return program

    def _stash_wait(self, request_id: str, enqueued_at: float) -> None:
        stash = self._stash
        stash.pop(request_id, None)
        stash[request_id] = enqueued_at
        if len(stash) > MAX_STASHED_WAITS:
            del stash[next(iter(stash))]

    def _maybe_sweep(self, now: float) -> None:
        if self._ttl > 0 and now - self._last_sweep >= self._sweep:
            self._last_sweep = now
            self.evict_idle(now)

    def evict_idle(self, now: float) -> None:
        """Drop every program with nothing in flight and no completion for more than the TTL."""
        ttl = self._ttl
        for program_id, p in list(self.programs.items()):
            if p.in_flight == 0 and now - p.last_completion > ttl:
                self._evict(program_id)
        self._recount()

    def _drop_oldest_idle(self) -> None:
        idle = [(p.last_completion, pid) for pid, p in self.programs.items() if p.in_flight == 0]
        if idle:
            self._evict(min(idle)[1])
            self._recount()

    def _evict(self, program_id: str) -> None:
        del self.programs[program_id]

    def _recount(self) -> None:
        """Recompute the wait sums exactly (after evictions; also clears float drift)."""
        waits = [p.avg_wait_ms for p in self.programs.values() if p.wait_count]
        self._wait_sum = sum(waits)
        self._wait_sq = sum(w * w for w in waits)
        self._wait_n = len(waits)


def _build(name: str, params: ProgramAwareParams, handle: Handle) -> ProgramAwareFairness:
    return ProgramAwareFairness(name, params, handle.clock)


factory = factory_with_params(ProgramAwareFairness.plugin_type, ProgramAwareParams, _build)
