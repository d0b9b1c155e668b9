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
    "PREFILLER_HEADER",
    "SERVED_ENDPOINT_HEADER",
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
LB_NAMESPACE = "envoy.lb"
"""Envoy's dynamic-metadata namespace of the routing decision (the served-endpoint key above lives there;
``request-attribute-reporter`` writes to it by default)."""
