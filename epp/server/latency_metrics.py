"""The ``predicted-latency-producer``'s metric families (upstream: ``predictedlatency/metrics.go``).

:class:`PredictedLatencyMetrics` turns the producer's reports (:class:`scheduler.observer.LatencyReport`,
one per successful request it tracked; one prediction duration per scheduling cycle whose candidates
it predicted) into upstream's families, as upstream records them:

* ``inference_objective_request_ttft_seconds`` / ``..._tpot_seconds``: the actual TTFT (every report)
  and TPOT (reports that have one), deprecated name only;
* ``request_predicted_ttft_seconds`` / ``request_predicted_tpot_seconds``: the prediction for the
  serving endpoint, alongside each actual value (0 when the model had made none, as upstream);
* ``request_ttft_prediction_duration_seconds`` / ``request_tpot_prediction_duration_seconds``: both
  observe the same duration (upstream predicts TTFT and TPOT in one bulk call);
* ``request_slo_violation_total{type="ttft"|"tpot"}``: the actual value exceeded the request's SLO
  header (only requests with that header);
* ``inference_request_metric{type}``: the last value recorded per type (``ttft``, ``predicted_ttft``,
  ``ttft_prediction_duration``, ``ttft_slo_violation`` = 1 or 0, and the ``tpot`` four).

The ``llm_d_epp_*`` names add ``plugin_name`` and ``plugin_type``. Label children are bound on first
use (a series appears once something is recorded in it) and cached per (plugin, model, target model),
at most :data:`~epp.server.metrics.CHILD_CACHE_BUDGET` such sets, each of at most 16 children (beyond
the budget a set is bound per call).
Model names share the picker's cap of distinct values (:class:`epp.server.metrics._Bounded`).
Upstream passes the two model names of the prediction durations in swapped order; here each name is
in its own label.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from epp.server.metric_catalog import Naming, by_key
from epp.server.metric_twin import Recorder, Twin
from scheduler.observer import LatencyReport

__all__ = ["PredictedLatencyMetrics"]

_HISTOGRAMS = ("pl_ttft", "pl_tpot", "pl_predicted_ttft", "pl_predicted_tpot",
               "pl_ttft_prediction_duration", "pl_tpot_prediction_duration")  # fmt: skip
_GAUGE, _VIOLATIONS = "pl_request_metric", "pl_slo_violation"
# per stage: (actual histogram, predicted histogram, gauge types actual / predicted / violation)
_STAGES = {kind: (f"pl_{kind}", f"pl_predicted_{kind}", kind, f"predicted_{kind}", f"{kind}_slo_violation")
           for kind in ("ttft", "tpot")}  # fmt: skip
_DURATIONS = tuple(
    (f"pl_{kind}_prediction_duration", f"{kind}_prediction_duration") for kind in ("ttft", "tpot")
)


class PredictedLatencyMetrics:
    """Upstream's predicted-latency families in ``registry`` (registered whatever the configuration)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        naming: Naming,
        models: Callable[[str], str],
        budget: int,
    ) -> None:
        """``models`` bounds model-name label values; ``budget``: label children kept for reuse."""
        self._twins = {
            key: Twin(by_key(key), naming, registry) for key in (*_HISTOGRAMS, _VIOLATIONS, _GAUGE)
        }
        self._models = models
        self._budget = budget
        self._sets: dict[tuple[str, str, str, str], _LabelSet] = {}

    def _set(self, plugin_type: str, plugin_name: str, model: str, target: str) -> _LabelSet:
        key = (plugin_type, plugin_name, model, target)
        found = self._sets.get(key)
        if found is None:
            found = _LabelSet(self._twins, {"plugin_name": plugin_name, "plugin_type": plugin_type,
                                            "model_name": self._models(model),
                                            "target_model_name": self._models(target)})  # fmt: skip
            if len(self._sets) < self._budget:
                self._sets[key] = found
        return found

    def observed(self, plugin_type: str, plugin_name: str, report: LatencyReport) -> None:
        """One request's actual and predicted latencies (and SLO check) from ``plugin_name``."""
        s = self._set(plugin_type, plugin_name, report.model_name, report.target_model_name)
        s.stage(_STAGES["ttft"], report.ttft, report.predicted_ttft, report.ttft_slo)
        if report.tpot is not None:
            s.stage(_STAGES["tpot"], report.tpot, report.predicted_tpot, report.tpot_slo)

    def predicted(
        self, plugin_type: str, plugin_name: str, model_name: str, target_model_name: str, seconds: float
    ) -> None:
        """One scheduling cycle's predictions took ``seconds``."""
        s = self._set(plugin_type, plugin_name, model_name, target_model_name)
        for histogram, kind in _DURATIONS:
            s.child(histogram).observe(seconds)
            s.child(_GAUGE, kind).set(seconds)


class _LabelSet:
    """The children of one (plugin, model, target model), each bound on first use."""

    __slots__ = ("children", "twins", "values")

    def __init__(self, twins: dict[str, Twin], values: dict[str, str]) -> None:
        self.twins, self.values = twins, values
        self.children: dict[tuple[str, str], Recorder] = {}  # <= 6 histograms, 8 gauges, 2 counters

    def child(self, key: str, kind: str = "") -> Recorder:
        child = self.children.get((key, kind))
        if child is None:
            child = self.children[(key, kind)] = self.twins[key].bind({**self.values, "type": kind})
        return child

    def stage(
        self, names: tuple[str, str, str, str, str], actual: float, predicted: float, slo: float
    ) -> None:
        histogram, predicted_histogram, kind, predicted_kind, violation = names
        child = self.child
        child(histogram).observe(actual)
        child(_GAUGE, kind).set(actual)
        child(predicted_histogram).observe(predicted)
        child(_GAUGE, predicted_kind).set(predicted)
        if slo > 0.0:
            violated = actual > slo
            child(_GAUGE, violation).set(1.0 if violated else 0.0)
            if violated:
                child(_VIOLATIONS, kind).inc()
