"""GPU utilization from NVIDIA's DCGM Exporter: ``dcgm-data-source`` + ``dcgm-extractor`` (llm-d-router).

The DCGM Exporter serves Prometheus text (``/metrics``, port 9400), either as a sidecar in the model
server's pod (scrape ``<pod IP>:9400``, the default) or as a DaemonSet on each node
(``useNodeAddress: true``: scrape ``<node IP>:9400``, the node IP being the pod's ``status.hostIP``;
an endpoint without a known node IP is scraped at its pod IP, as upstream does).

``dcgm-data-source`` parameters (upstream's names and defaults; unknown keys rejected)::

    scheme: http | https      (http; not the --model-server-metrics-scheme flag)
    path: /metrics
    port: 9400                (0: the endpoint's own port; with useNodeAddress a port is required)
    insecureSkipVerify: true
    useNodeAddress: false
    interval: Go duration     (unset: every --refresh-metrics-interval tick; rounded to ticks)

``dcgm-extractor`` (no parameters) reads the gauge ``DCGM_FI_DEV_GPU_UTIL`` (percent, one sample per
GPU), keeps the samples of this endpoint's pod (a sample whose ``pod`` label names another pod is
dropped; one without a ``pod`` label is kept), takes the maximum (the busiest GPU) and publishes it
divided by 100 as the endpoint attribute ``GPUUtilization`` of producer ``dcgm-extractor`` (key
``"dcgm-extractor:GPUUtilization"``, what ``endpoint-attribute-filter`` / ``-scorer`` read with
``producer: dcgm-extractor``). A body without the metric, without a sample for the pod, or where the
metric is not typed ``gauge`` is an extraction error: the endpoint keeps its previous value (the source
is not primary: it never decides health).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from datalayer.connection import SourceConnection
from datalayer.promtext import LazySamples
from datalayer.records import EndpointSpec
from datalayer.sources import SourceUpdate, tick_interval

__all__ = [
    "DCGM_DEFAULT_PORT",
    "GPU_UTILIZATION_KEY",
    "GPU_UTIL_METRIC",
    "DcgmDataSource",
    "DcgmExtractor",
]

DCGM_DEFAULT_PORT = 9400
GPU_UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
GPU_UTILIZATION_KEY = "dcgm-extractor:GPUUtilization"
"""The attribute key (``scheduler.plugins.attributes.scalar_attribute_key("GPUUtilization",
"dcgm-extractor")``)."""
_POD_LABEL = "pod"


def _metric_type(text: str, name: str) -> str:
    """The ``# TYPE`` of ``name`` in the body ("untyped" when it has none, as Prometheus reads it)."""
    marker = f"# TYPE {name} "
    start = text.find(marker)
    if start < 0 or (start > 0 and text[start - 1] != "\n"):
        return "untyped"
    end = text.find("\n", start)
    return text[start + len(marker) : end if end >= 0 else len(text)].strip()


class DcgmExtractor:
    """``dcgm-extractor``: the busiest GPU's utilization of the endpoint's pod, in [0, 1]."""

    plugin_type = "dcgm-extractor"

    def __init__(self, name: str = "dcgm-extractor") -> None:
        self.name = name

    def extract(self, text: str, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        series = LazySamples(text).get(GPU_UTIL_METRIC)
        if not series:
            raise ValueError(f"metric {GPU_UTIL_METRIC!r} not found in DCGM response")
        if _metric_type(text, GPU_UTIL_METRIC) != "gauge":
            raise ValueError(f"expected gauge metric for {GPU_UTIL_METRIC}")
        pod = endpoint.pod_name
        values = [v for labels, v in series if not pod or labels.get(_POD_LABEL, pod) == pod]
        if not values:
            raise ValueError(f"metric {GPU_UTIL_METRIC!r} present but has no samples for pod {pod!r}")
        return SourceUpdate(attributes={GPU_UTILIZATION_KEY: max(0.0, *values) / 100.0})


class DcgmDataSource:
    """``dcgm-data-source``: ``GET <scheme>://<pod or node IP>:<port><path>``, run the extractors on
    the text. Not primary: its failures only keep the previous attributes."""

    plugin_type = "dcgm-data-source"
    primary = False

    def __init__(
        self,
        name: str = "dcgm-data-source",
        extractors: Sequence[DcgmExtractor] = (),
        path: str = "/metrics",
        *,
        interval: float | None = None,
        connection: SourceConnection | None = None,
        use_node_address: bool = False,
    ) -> None:
        self.name = name
        self.path = path
        self.extractors = tuple(extractors)
        self._interval = interval
        self.connection = connection or SourceConnection("http", DCGM_DEFAULT_PORT, True)
        self.use_node_address = use_node_address
        if use_node_address and not self.connection.port:
            raise ValueError("dcgm-data-source: useNodeAddress requires a non-zero port")

    def interval(self, refresh_interval: float) -> float:
        """Every base tick, or the configured interval rounded to base ticks."""
        return tick_interval(self._interval, refresh_interval)

    def extract(self, body: bytes, endpoint: EndpointSpec, now: float) -> SourceUpdate:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"body is not UTF-8 text (byte {exc.start})") from None
        attributes: dict[str, Any] = {}
        for extractor in self.extractors:
            attributes.update(extractor.extract(text, endpoint, now).attributes or {})
        return SourceUpdate(attributes=attributes)
