"""The latency predictor sidecar client's counters as Prometheus families, read at every scrape (ours;
registered only when the sidecar is configured, i.e. ``PREDICTION_SERVER_URL`` is set).

* ``pyepp_latency_sidecar_prediction_calls_total``: bulk prediction calls made (one per scheduling
  cycle that asked the sidecar);
* ``pyepp_latency_sidecar_prediction_failures_total{reason}``: those that failed, by reason
  (:data:`~epp.server.latency_sidecar.FAILURE_REASONS`; every reason is exported, zero included, so
  that ``rate()`` works from the first scrape); the request was then predicted in process;
* ``pyepp_latency_sidecar_predicted_rows_total``: endpoint rows predicted by the sidecar;
* ``pyepp_latency_sidecar_predictions_skipped_total{reason="oversized_pool"}``: cycles not sent (more
  candidate endpoints than one bulk call carries);
* ``pyepp_latency_sidecar_training_posts_total`` and ``..._training_failures_total{reason}``;
* ``pyepp_latency_sidecar_training_samples_total{outcome}``: training samples ``sent`` or ``lost`` (their
  post failed).

A falling ratio of predicted rows to calls, or any growth of the failure counters, means the picker is
routing on its in-process model: the alert an operator of the sidecar wants.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from epp.server.latency_sidecar import FAILURE_REASONS, LatencySidecarClient

__all__ = ["LatencySidecarCollector"]

_P = "pyepp_latency_sidecar_"


class LatencySidecarCollector(Collector):
    """Exports ``client.counters`` (see the module docstring)."""

    def __init__(self, client: LatencySidecarClient) -> None:
        self._client = client

    def collect(self) -> Iterator[Metric]:
        c = self._client.counters
        yield _counter("prediction_calls", "Bulk prediction calls made to the latency predictor sidecar.",
                       c["predictionCalls"])  # fmt: skip
        yield _by_reason("prediction_failures", "Failed sidecar prediction calls, by reason.",
                         c["predictionFailures"])  # fmt: skip
        yield _counter("predicted_rows", "Endpoint rows predicted by the sidecar.", c["predictedRows"])
        skipped = CounterMetricFamily(
            _P + "predictions_skipped",
            "Scheduling cycles not sent to the sidecar, by reason.",
            labels=["reason"],
        )
        skipped.add_metric(["oversized_pool"], c["skippedOversizedPool"])
        yield skipped
        yield _counter("training_posts", "Bulk training posts made to the sidecar.", c["trainingPosts"])
        yield _by_reason("training_failures", "Failed sidecar training posts, by reason.",
                         c["trainingFailures"])  # fmt: skip
        samples = CounterMetricFamily(
            _P + "training_samples", "Training samples sent to the sidecar or lost.", labels=["outcome"]
        )
        samples.add_metric(["sent"], c["trainingSamplesSent"])
        samples.add_metric(["lost"], c["trainingSamplesLost"])
        yield samples

    def describe(self) -> Iterator[Metric]:
        return iter(())


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(_P + name, doc, value=value)


def _by_reason(name: str, doc: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(_P + name, doc, labels=["reason"])
    for reason in (*FAILURE_REASONS, *sorted(set(counts) - set(FAILURE_REASONS))):
        family.add_metric([reason], counts.get(reason, 0))
    return family
