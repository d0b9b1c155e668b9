"""Header and metadata names of the endpoint-picker protocol, and reading Envoy header maps.

Each name is defined once: the control headers in :mod:`epp.request.build` (which reads them), the
headers scheduler plugins read or write in :mod:`scheduler.headers`; this module re-exports them.

Envoy sends header values in ``raw_value`` (bytes) and, for older versions, in ``value``; both are
read. Keys arrive lower-case. Repeated headers are joined with ``","`` (RFC 9110 list semantics).
"""

from __future__ import annotations

from typing import cast

from envoy.config.core.v3.base_pb2 import HeaderMap, Metadata
from google.protobuf.struct_pb2 import Value

from epp.request.build import (
    FAIRNESS_HEADER,
    FAIRNESS_HEADERS,
    MODEL_REWRITE_HEADER,
    MODEL_REWRITE_HEADERS,
    OBJECTIVE_HEADER,
    OBJECTIVE_HEADERS,
)
from scheduler.headers import LB_NAMESPACE, PREFILLER_HEADER, SERVED_ENDPOINT_HEADER

__all__ = [
    "CONTENT_LENGTH",
    "CONTENT_TYPE",
    "CONTROL_HEADERS",
    "DESTINATION_HEADER",
    "DESTINATION_METADATA_KEY",
    "DESTINATION_SCORES_METADATA_KEY",
    "DESTINATION_SERVED_KEY",
    "DESTINATION_SUBSET_KEY",
    "FAIRNESS_HEADER",
    "FAIRNESS_HEADERS",
    "LB_NAMESPACE",
    "MODEL_REWRITE_HEADER",
    "MODEL_REWRITE_HEADERS",
    "OBJECTIVE_HEADER",
    "OBJECTIVE_HEADERS",
    "PREFILLER_HEADER",
    "REQUEST_ID_HEADER",
    "SUBSET_HEADER",
    "SUBSET_NAMESPACE",
    "metadata_value",
    "read_headers",
]

DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_METADATA_KEY = DESTINATION_HEADER
DESTINATION_SCORES_METADATA_KEY = "x-gateway-destination-endpoint-scores"  # --emit-endpoint-scores
DESTINATION_SERVED_KEY = SERVED_ENDPOINT_HEADER
"""``envoy.lb`` metadata key (and response header to plugins) of the endpoint that served."""
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_HEADER = "x-gateway-destination-endpoint-subset"
DESTINATION_SUBSET_KEY = SUBSET_HEADER
"""``envoy.lb.subset_hint`` metadata key: the proxy copies :data:`SUBSET_HEADER` into it."""
REQUEST_ID_HEADER = "x-request-id"
CONTENT_LENGTH = "content-length"
CONTENT_TYPE = "content-type"

CONTROL_HEADERS = (*OBJECTIVE_HEADERS, *FAIRNESS_HEADERS, *MODEL_REWRITE_HEADERS, SUBSET_HEADER)
"""Headers that steer the picker and are removed before the request reaches the model server."""


def read_headers(header_map: HeaderMap, only: frozenset[str] | None = None) -> dict[str, str]:
    """The headers of ``header_map`` as a dict (lower-case keys, repeated values comma-joined).

    ``only``: read just these (lower-case) names; the others' values are not even decoded.
    """
    out: dict[str, str] = {}
    for h in header_map.headers:
        key = h.key.lower()
        if only is not None and key not in only:
            continue
        raw = h.raw_value  # each read of a bytes field makes a new object (upb): read it once
        value = raw.decode("utf-8", "replace") if raw else h.value
        if key in out:
            out[key] = f"{out[key]},{value}"
        else:
            out[key] = value
    return out


def metadata_value(metadata: Metadata, namespace: str, key: str) -> object | None:
    """The value at ``filter_metadata[namespace][key]``: str, float, bool, list, Struct; None if absent."""
    if namespace not in metadata.filter_metadata:
        return None
    fields = metadata.filter_metadata[namespace].fields
    if key not in fields:
        return None
    value = fields[key]
    if value.WhichOneof("kind") == "list_value":
        return [_plain(v) for v in value.list_value.values]
    return _plain(value)


def _plain(value: Value) -> object:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return str(value.string_value)
    if kind == "number_value":
        return float(value.number_value)
    if kind == "bool_value":
        return bool(value.bool_value)
    if kind == "struct_value":
        return cast(object, value.struct_value)
    return None
