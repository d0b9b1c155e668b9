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
use (a series appears once something is recorded in it) and cached, at most
:data:`~epp.server.metrics.CHILD_CACHE_BUDGET` of them (beyond that they are bound per call).
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
            key: Twin(by_key(key), naming, registry)
            for key in (*_HISTOGRAMS, "pl_slo_violation", "pl_request_metric")
        }
        self._models = models
        self._budget = budget
        self._children: dict[tuple[str, str, str, str, str, str], Recorder] = {}

    def _child(self, key: str, plugin_type: str, plugin_name: str, model: str, target: str,
               kind: str = "") -> Recorder:  # fmt: skip
        cache_key = (key, plugin_type, plugin_name, model, target, kind)
        child = self._children.get(cache_key)
        if child is None:
            values = {"plugin_name": plugin_name, "plugin_type": plugin_type,
                      "model_name": self._models(model), "target_model_name": self._models(target),
                      "type": kind}  # fmt: skip
            child = self._twins[key].bind(values)
            if len(self._children) < self._budget:
                self._children[cache_key] = child
        return child

    def observed(self, plugin_type: str, plugin_name: str, report: LatencyReport) -> None:
        """One request's actual and predicted latencies (and SLO check) from ``plugin_name``."""
        labels = (plugin_type, plugin_name, report.model_name, report.target_model_name)
        self._stage(labels, "ttft", report.ttft, report.predicted_ttft, report.ttft_slo)
        if report.tpot is not None:
            self._stage(labels, "tpot", report.tpot, report.predicted_tpot, report.tpot_slo)

    def _stage(
        self, labels: tuple[str, str, str, str], kind: str, actual: float, predicted: float, slo: float
    ) -> None:
        child = self._child
        child(f"pl_{kind}", *labels).observe(actual)
        child("pl_request_metric", *labels, kind).set(actual)
        child(f"pl_predicted_{kind}", *labels).observe(predicted)
        child("pl_request_metric", *labels, f"predicted_{kind}").set(predicted)
        if slo > 0.0:
            violated = actual > slo
            child("pl_request_metric", *labels, f"{kind}_slo_violation").set(1.0 if violated else 0.0)
            if violated:
                child("pl_slo_violation", *labels, kind).inc()

    def predicted(
        self, plugin_type: str, plugin_name: str, model_name: str, target_model_name: str, seconds: float
    ) -> None:
        """One scheduling cycle's predictions took ``seconds``."""
        labels = (plugin_type, plugin_name, model_name, target_model_name)
        for kind in ("ttft", "tpot"):
            self._child(f"pl_{kind}_prediction_duration", *labels).observe(seconds)
            self._child("pl_request_metric", *labels, f"{kind}_prediction_duration").set(seconds)
