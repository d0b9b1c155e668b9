"""Opt-in ext_proc gRPC stream metrics (``--enable-grpc-stream-metrics``), as llm-d-router exports them.

* ``llm_d_epp_extproc_streams_inflight`` (gauge): ext_proc streams open now;
* ``llm_d_epp_extproc_stream_duration_seconds`` (histogram, buckets 1 ms to 600 s): how long a stream
  stayed open;
* ``llm_d_epp_extproc_streams_total{code}`` (counter): streams ended, by gRPC status code in Go's
  spelling (``OK``, ``Canceled``, ``InvalidArgument``, ``ResourceExhausted``, ``Unimplemented``,
  ``Internal``, ``Unavailable``, ...). A stream the client resets, or that is cut at shutdown, counts as
  ``Canceled``.

Both engines call :meth:`StreamMetrics.started` when a ``Process`` stream opens and
:meth:`StreamMetrics.finished` exactly once when it ends; nothing is registered unless the flag is on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["GRPC_CODE_NAMES", "StreamMetrics"]

# gRPC status codes -> grpc-go's codes.Code.String()
GRPC_CODE_NAMES = (
    "OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
    "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
    "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
)  # fmt: skip
CANCELLED = 1
_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600)


class StreamMetrics:
    """The three stream metrics, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.inflight = Gauge(
            "llm_d_epp_extproc_streams_inflight",
            "Number of ext_proc gRPC streams currently open.",
            registry=registry,
        )
        self.duration = Histogram(
            "llm_d_epp_extproc_stream_duration_seconds",
            "Duration an ext_proc gRPC stream stays open, in seconds.",
            buckets=_BUCKETS,
            registry=registry,
        )
        self.total = Counter(
            "llm_d_epp_extproc_streams",
            "Total ext_proc gRPC streams completed, by gRPC status code.",
            ["code"],
            registry=registry,
        )

    def started(self) -> float:
        """A stream opened; returns its start time for :meth:`finished`."""
        self.inflight.inc()
        return self._clock()

    def finished(self, code: int, start: float) -> None:
        """A stream started at ``start`` ended with gRPC status ``code``."""
        self.inflight.dec()
        self.duration.observe(max(0.0, self._clock() - start))
        name = GRPC_CODE_NAMES[code] if 0 <= code < len(GRPC_CODE_NAMES) else "Unknown"
        self.total.labels(name).inc()
