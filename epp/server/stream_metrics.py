"""The opt-in ext_proc stream metrics (``--enable-grpc-stream-metrics``), re-exported by
:mod:`epp.server.metrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from epp.server.grpc_status import GRPC_CODES, GRPC_UNKNOWN
from epp.server.metric_catalog import Naming, by_key
from epp.server.metric_twin import Recorder, Twin

__all__ = ["StreamMetrics"]


class StreamMetrics:
    """``llm_d_epp_extproc_streams_inflight``, ``..._stream_duration_seconds``, ``..._streams_total{code}``:
    upstream's opt-in ext_proc stream metrics (``--enable-grpc-stream-metrics``), llm-d names only (they
    have no deprecated twin, so ``--metrics-naming inference`` exports none of them)."""

    def __init__(self, registry: CollectorRegistry, naming: Naming = Naming.BOTH) -> None:
        self.inflight = Twin(by_key("extproc_streams_inflight"), naming, registry).bind({})
        self.duration = Twin(by_key("extproc_stream_duration"), naming, registry).bind({})
        self._totals_family = Twin(by_key("extproc_streams_total"), naming, registry)
        self._totals: dict[int, Recorder] = {}

    def started(self) -> None:
        self.inflight.inc()

    def finished(self, status: int, seconds: float) -> None:
        """A stream closed with gRPC ``status`` after ``seconds``."""
        self.inflight.dec()
        self.duration.observe(seconds)
        status = status if 0 <= status < len(GRPC_CODES) else GRPC_UNKNOWN
        child = self._totals.get(status)
        if child is None:
            child = self._totals[status] = self._totals_family.bind({"code": GRPC_CODES[status]})
        child.inc()
