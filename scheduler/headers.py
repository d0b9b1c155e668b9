"""Request and response header names (and the Envoy metadata namespace) that scheduler plugins read or
write.

The scheduler owns these names; the ext_proc server (``epp``) imports them from here, so each is
written once. Keys are lower-case, as Envoy delivers them.
"""

from __future__ import annotations

__all__ = [
    "DATA_PARALLEL_HEADER",
    "ENCODER_HEADER",
    "LB_NAMESPACE",
    "LLMD_SLO_TTFT_HEADER",
    "PREFILLER_HEADER",
    "SERVED_ENDPOINT_HEADER",
    "SLO_TPOT_HEADER",
    "SLO_TTFT_HEADER",
]

PREFILLER_HEADER = "x-prefiller-host-port"
"""Request header naming the prefill endpoint (``ip:port``) of a disaggregated request."""
ENCODER_HEADER = "x-encoder-hosts-ports"
"""Request header listing the encode endpoints (comma-separated ``ip:port``) of an E/P/D request."""
DATA_PARALLEL_HEADER = "x-data-parallel-host-port"
"""Request header naming the data-parallel rank endpoint chosen for the request."""
SERVED_ENDPOINT_HEADER = "x-gateway-destination-endpoint-served"
"""Response header (as the EPP passes it to hooks) naming the ``ip:port`` that actually served; also
the ``envoy.lb`` metadata key the proxy reports it under."""
SLO_TTFT_HEADER = "x-slo-ttft-ms"
"""Request header: the request's time-to-first-token SLO in milliseconds (the predicted-latency plugins;
the deprecated alias of :data:`LLMD_SLO_TTFT_HEADER` for slo-deadline ordering)."""
SLO_TPOT_HEADER = "x-slo-tpot-ms"
"""Request header: the request's time-per-output-token SLO in milliseconds."""
LLMD_SLO_TTFT_HEADER = "x-llm-d-slo-ttft-ms"
"""llm-d-router's TTFT SLO header, read first by the slo-deadline ordering policy."""
LB_NAMESPACE = "envoy.lb"
"""Envoy's dynamic-metadata namespace of the routing decision (the served-endpoint key above lives there;
``request-attribute-reporter`` writes to it by default)."""
