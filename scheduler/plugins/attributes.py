"""Scalar endpoint attributes published by data-layer extractors, as llm-d's ``DataKey``s.

llm-d identifies an endpoint attribute by (name, producer); a scalar metric published by
``core-metrics-extractor``'s custom metrics or by ``dcgm-extractor`` is a float. Here an endpoint's
``attributes`` mapping is keyed by strings: :func:`scalar_attribute_key` is the one spelling both
sides use, ``"<producer>:<attribute>"`` (just ``"<attribute>"`` when the producer is empty).
:func:`resolve_attribute` applies llm-d's parameter rule (``ResolveConfiguredKey``): no producer
means ``core-metrics-extractor``, and then an attribute containing ``/`` is rejected as the
combined ``attribute/producer`` spelling; an explicit producer (even empty) takes the attribute
verbatim.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from scheduler.types import EndpointView

__all__ = [
    "DEFAULT_PRODUCER",
    "log_attribute_source",
    "read_scalar",
    "resolve_attribute",
    "scalar_attribute_key",
]

DEFAULT_PRODUCER = "core-metrics-extractor"
_log = logging.getLogger("scheduler.plugins")


def scalar_attribute_key(attribute: str, producer: str) -> str:
    """The ``attributes`` key of a scalar published by ``producer`` under ``attribute``."""
    return f"{producer}:{attribute}" if producer else attribute


def resolve_attribute(attribute: str, producer: str | None) -> str:
    """llm-d's ResolveConfiguredKey -> the attributes key; ValueError for the combined spelling."""
    if producer is not None:
        return scalar_attribute_key(attribute, producer)
    if "/" in attribute:
        head, _, tail = attribute.rpartition("/")
        raise ValueError(
            f"attribute {attribute!r} contains '/' but no producer is set: if this is the combined "
            f'"Attribute/Producer" spelling, split it into attribute: "{head}" and producer: "{tail}"; '
            "if the attribute name itself contains '/', set producer explicitly"
        )
    return scalar_attribute_key(attribute, DEFAULT_PRODUCER)


def read_scalar(endpoint: EndpointView, key: str) -> float | None:
    """The endpoint's scalar attribute ``key``; None when absent or not a finite real number."""
    value: Any = endpoint.attributes.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def log_attribute_source(plugin_type: str, name: str, key: str, missing: str) -> None:
    """Say at start which endpoint attribute the plugin reads and what happens without it."""
    _log.info(
        '%s "%s" reads endpoint attribute "%s"; only a data-layer extractor publishing it sets it '
        "(core-metrics-extractor custom metrics, dcgm-extractor); endpoints without it %s",
        plugin_type,
        name,
        key,
        missing,
    )
