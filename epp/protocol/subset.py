"""The proxy's endpoint subset hint: ``metadata_context.filter_metadata["envoy.lb.subset_hint"]``.

Key ``x-gateway-destination-endpoint-subset``; the value is a list of ``ip:port`` strings or one
comma-separated string (both accepted; entries stripped, empty entries dropped). Absent -> None (all
endpoints). Present but empty -> an empty frozenset, which admission answers with 503.
"""

from __future__ import annotations

from envoy.config.core.v3.base_pb2 import Metadata

from epp.protocol.headers import DESTINATION_SUBSET_KEY, SUBSET_NAMESPACE, metadata_value

__all__ = ["subset_hint"]


def subset_hint(metadata: Metadata) -> frozenset[str] | None:
    """The subset entries of ``metadata`` (None when no hint is present)."""
    value = metadata_value(metadata, SUBSET_NAMESPACE, DESTINATION_SUBSET_KEY)
    if value is None:
        return None
    if isinstance(value, str):
        items: list[object] = list(value.split(","))
    elif isinstance(value, list):
        items = []
        for v in value:
            items.extend(v.split(",") if isinstance(v, str) else [])
    else:
        return frozenset()
    return frozenset(s.strip() for s in items if isinstance(s, str) and s.strip())
