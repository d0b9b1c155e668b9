"""A scheduler profile: ordered filters -> weighted scorers -> exactly one picker.

Run semantics (one profile run, on the cycle's snapshot):

1. Filters run in order, each on the survivors of the previous one. Removed endpoints are recorded
   per filter with a reason (``ExplainingFilter.reason`` when the filter implements it). If a filter
   leaves nothing, the run fails with a reason naming the profile and the filter.
2. Every scorer scores the survivors; each value is clamped into [0, 1] (NaN -> 0), multiplied by the
   scorer's weight (a float, not renormalised) and summed: ``total(e) = sum_i w_i * clamp(s_i(e))``.
3. The picker chooses 1..maxNumOfEndpoints distinct survivors, best first.

A plugin that raises, or breaks its contract (wrong number of scores, picks nothing, picks an endpoint
twice or one that was not a candidate), fails the run with a reason naming it; the exception is
reported to the observer and never propagates. ``run`` returns ``(ProfileResult | None,
ProfileDecision)``; the result is None exactly when ``decision.failure`` is set.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from operator import add, mul
from time import perf_counter
from types import MappingProxyType

from scheduler.cycle_state import CycleState
from scheduler.interfaces import ExplainingFilter, Filter, Picker, Scorer
from scheduler.observer import SchedulerObserver, TimedPlugin, timed_plugin
from scheduler.types import (
    EndpointView,
    FilterStep,
    LLMRequest,
    ProfileDecision,
    ProfileResult,
    ScoredCandidates,
    ScoredEndpoint,
)

__all__ = ["PluginContractError", "SchedulerProfile"]


class PluginContractError(RuntimeError):
    """A plugin returned something its contract forbids."""


def _clamp(value: float) -> float:
    if value >= 1.0:
        return 1.0
    if value > 0.0:
        return value
    return 0.0  # negatives and NaN


def _clamped(raw: Sequence[float]) -> tuple[float, ...]:
    """Clamp every score into [0, 1]; the common all-in-range case runs at C speed."""
    if raw and min(raw) >= 0.0 and max(raw) <= 1.0:
        total = sum(raw)
        if total == total:  # no NaN anywhere
            return tuple(raw)
    return tuple(map(_clamp, raw))


def _label(plugin: Filter | Scorer | Picker) -> str:
    return f'{plugin.plugin_type} "{plugin.name}"'


class SchedulerProfile:
    """Immutable after construction. ``scorers`` are ``(scorer, weight)`` pairs in configuration order."""

    __slots__ = ("_explains", "_timed", "_weights", "filters", "name", "picker", "scorers", "shadow")

    def __init__(
        self,
        name: str,
        filters: Sequence[Filter],
        scorers: Sequence[tuple[Scorer, float]],
        picker: Picker,
        *,
        shadow: bool = False,
    ) -> None:
        self.name = name
        self.filters = tuple(filters)
        self.scorers = tuple((s, float(w)) for s, w in scorers)
        self.picker = picker
        self.shadow = shadow
        self._explains = tuple(isinstance(f, ExplainingFilter) for f in self.filters)
        self._weights: Mapping[str, float] = MappingProxyType({s.name: w for s, w in self.scorers})
        # the plugins' timings for the last observer run with: (observer, filters, scorers, picker)
        self._timed: tuple[SchedulerObserver, list[TimedPlugin], list[TimedPlugin], TimedPlugin] | None = None

    def _timers(
        self, observer: SchedulerObserver
    ) -> tuple[SchedulerObserver, list[TimedPlugin], list[TimedPlugin], TimedPlugin]:
        timed = self._timed
        if timed is None or timed[0] is not observer:
            timed = self._timed = (
                observer,
                [timed_plugin(observer, "filter", f) for f in self.filters],
                [timed_plugin(observer, "score", s) for s, _ in self.scorers],
                timed_plugin(observer, "pick", self.picker),
            )
        return timed

    def __repr__(self) -> str:
        return f"SchedulerProfile({self.name!r}, shadow={self.shadow})"

    def run(
        self,
        cycle: CycleState,
        request: LLMRequest,
        endpoints: Sequence[EndpointView],
        observer: SchedulerObserver,
    ) -> tuple[ProfileResult | None, ProfileDecision]:
        steps: list[FilterStep] = []
        candidates: Sequence[EndpointView] = endpoints
        scores: dict[str, tuple[float, ...]] = {}
        current = "filter"
        plugin: Filter | Scorer | Picker | None = None
        _, filter_timers, score_timers, pick_timer = self._timers(observer)
        try:
            for (f, record), explains in zip(filter_timers, self._explains, strict=True):
                plugin = f
                t0 = perf_counter()
                kept = f.filter(cycle, request, candidates)
                record(perf_counter() - t0)
                if len(kept) != len(candidates):
                    steps.append(self._removed(f, explains, cycle, request, candidates, kept))
                candidates = kept
                if not candidates:
                    reason = f'profile "{self.name}": filter {_label(f)} removed every endpoint'
                    return None, self._failed(steps, reason)
            if not candidates:
                return None, self._failed(steps, f'profile "{self.name}": no endpoints')
            current = "score"
            n = len(candidates)
            # totals[i] = sum of clamped[i] * weight over the scorers, added in scorer order; chained
            # lazily and computed in one pass (materialised every 32 scorers to bound the nesting)
            totals: Iterator[float] = repeat(0.0, n)
            for k, ((scorer, weight), (_, record)) in enumerate(zip(self.scorers, score_timers, strict=True)):
                plugin = scorer
                t0 = perf_counter()
                raw = scorer.score(cycle, request, candidates)
                record(perf_counter() - t0)
                if len(raw) != n:
                    raise PluginContractError(f"returned {len(raw)} scores for {n} endpoints")
                # _clamped(raw), its common all-in-range case inline (one call less per scorer); the
                # bounds from sorted(), which compares floats as doubles (about twice as fast as min()
                # and max() on 16 scores); a NaN anywhere makes the sum NaN (then clamped)
                if (
                    raw
                    and (ordered := sorted(raw))[0] >= 0.0
                    and ordered[-1] <= 1.0
                    and (total := sum(raw)) == total
                ):
                    clamped = tuple(raw)
                else:
                    clamped = _clamped(raw)
                scores[scorer.name] = clamped
                # equal lengths were just checked; a weight of 1.0 skips the product, the same float
                # (x * 1.0 == x exactly: no NaN after clamping)
                if weight == 1.0:
                    totals = map(add, totals, clamped)
                else:
                    totals = map(add, totals, map(mul, clamped, repeat(weight)))
                if k % 32 == 31:
                    totals = iter(tuple(totals))
            current = "pick"
            picker = plugin = self.picker
            scored = ScoredCandidates(tuple(candidates), tuple(totals))  # built as the picker reads them
            t0 = perf_counter()
            picked = tuple(picker.pick(cycle, request, scored))
            pick_timer[1](perf_counter() - t0)
            _check_picked(picked, candidates)
        except Exception as exc:
            where = _label(plugin) if plugin is not None else "framework"
            ptype, pname = getattr(plugin, "plugin_type", ""), getattr(plugin, "name", "")
            observer.plugin_error(current, ptype, pname, exc)
            reason = f'profile "{self.name}": {current} plugin {where} failed: {exc}'
            return None, self._failed(steps, reason)
        decision = self._decision(steps, cycle.addresses(candidates), scores, scored.totals, picked)
        return ProfileResult(self.name, picked, self.shadow, scored), decision

    @staticmethod
    def _removed(
        f: Filter,
        explains: bool,
        cycle: CycleState,
        request: LLMRequest,
        before: Sequence[EndpointView],
        after: Sequence[EndpointView],
    ) -> FilterStep:
        kept = {e.address for e in after}
        removed: list[tuple[str, str]] = []
        for e in before:
            if e.address in kept:
                continue
            reason = f.reason(cycle, request, e) if explains else "filtered out"  # type: ignore[attr-defined]
            removed.append((e.address, reason))
        if len(kept) + len(removed) != len(before) or not kept.issubset({e.address for e in before}):
            raise PluginContractError("returned endpoints that were not in its input")
        return FilterStep(f.plugin_type, f.name, tuple(removed))

    def _failed(self, steps: list[FilterStep], reason: str) -> ProfileDecision:
        return ProfileDecision(
            self.name, tuple(steps), (), {}, self._weights, (), self.picker.name, (), reason
        )

    def _decision(
        self,
        steps: list[FilterStep],
        candidates: tuple[str, ...],
        scores: dict[str, tuple[float, ...]],
        totals: tuple[float, ...],
        picked: tuple[ScoredEndpoint, ...],
    ) -> ProfileDecision:
        addresses = tuple([p.endpoint.address for p in picked])
        return ProfileDecision(
            self.name, tuple(steps), candidates, scores, self._weights, totals, self.picker.name, addresses
        )


def _check_picked(picked: tuple[ScoredEndpoint, ...], candidates: Sequence[EndpointView]) -> None:
    if not picked:
        raise PluginContractError("picked no endpoint")
    if len(picked) == 1:  # the common case: one candidate object picked
        chosen = picked[0].endpoint
        for e in candidates:
            if e is chosen:
                return
    addresses = [p.endpoint.address for p in picked]
    if len(set(addresses)) != len(addresses):
        raise PluginContractError(f"picked an endpoint twice: {addresses}")
    ids = set(map(id, candidates))
    if all(id(p.endpoint) in ids for p in picked):
        return
    if not {e.address for e in candidates}.issuperset(addresses):
        raise PluginContractError(f"picked endpoints that were not candidates: {addresses}")
