"""The ``flowControl`` section: GIE's / llm-d-router's schema, defaults and policy references.

Schema (``FlowControlConfig`` of both upstreams' ``apix/config/v1alpha1``; every key optional, unknown
keys rejected)::

    flowControl:
      maxBytes: 10Gi               # whole pool, all bands; Kubernetes quantity; omitted or 0: no limit
      maxRequests: 1k              # whole pool, all bands; omitted or 0: no limit
      defaultRequestTTL: 60s       # queue-wait budget; 0s: wait until the client goes away
      noEndpointRequestTTL: 5m     # (llm-d-router) the budget while the pool has no endpoint
      defaultPriorityBand: {...}   # template for priorities not listed in priorityBands
      defaultNegativePriorityBand: {...}   # (llm-d-router) template for priorities < 0
      priorityBands:
      - priority: 100              # required, unique
        maxBytes: 1Gi              # omitted or 0: 1G (1,000,000,000 bytes)
        maxRequests: "500"         # omitted or 0: 5000
        fairnessPolicyRef: round-robin-fairness-policy   # default global-strict-fairness-policy
        orderingPolicyRef: fcfs-ordering-policy          # default fcfs-ordering-policy
      usageLimitPolicyPluginRef: my-limit   # default static-usage-limit-policy (threshold 1.0)
      saturationDetector: {pluginRef: concurrency-detector}   # (llm-d-router) replaces the
                                   # top-level saturationDetector for admission and flow control
      enableEviction: false        # (llm-d-router) in-flight eviction: rejected when true (not
                                   # implemented in pyepp)

``defaultRequestTTL`` default: 60s under ``llm-d.ai/v1alpha1`` (llm-d-router's), 0 (no TTL; the request
waits until its client goes away, GIE's) under ``inference.networking.x-k8s.io/v1alpha1``.
``noEndpointRequestTTL`` defaults to ``defaultRequestTTL``.

Policy references name a plugin of the ``plugins`` list (any name), checked to implement the right
policy; the default policies' type names (``fcfs-ordering-policy``, ``global-strict-fairness-policy``,
``static-usage-limit-policy``) resolve without being declared, as llm-d-router registers them. Errors
are :class:`~scheduler.errors.ConfigError` naming the field path (``flowControl.priorityBands[0].
orderingPolicyRef``) and the expectation.

:func:`parse_flow_control` validates the shape (the section validator); :func:`resolve_flow_control`
resolves references and defaults once the plugins exist; :meth:`FlowControlConfig.as_yaml` is the
effective section ``epp check-config`` prints (defaults filled in, loadable again).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from scheduler.config.document import LEGACY_API_VERSION
from scheduler.duration import DURATION_EXPECT, parse_duration
from scheduler.errors import ConfigError
from scheduler.interfaces import Plugin, SaturationDetector
from scheduler.plugins.flowcontrol.fairness import GlobalStrictFairness
from scheduler.plugins.flowcontrol.interfaces import FairnessPolicy, OrderingPolicy, UsageLimitPolicy
from scheduler.plugins.flowcontrol.ordering import FcfsOrdering
from scheduler.plugins.flowcontrol.usage_limit import StaticUsageLimit, StaticUsageLimitParams
from scheduler.roles import has_role

__all__ = [
    "DEFAULT_BAND_MAX_BYTES",
    "DEFAULT_BAND_MAX_REQUESTS",
    "DEFAULT_REQUEST_TTL_S",
    "MAX_QUEUED_REQUESTS",
    "BandConfig",
    "BandSpec",
    "FlowControlConfig",
    "FlowControlSpec",
    "parse_flow_control",
    "parse_quantity",
    "resolve_flow_control",
]

DEFAULT_BAND_MAX_BYTES = 1_000_000_000
DEFAULT_BAND_MAX_REQUESTS = 5000
DEFAULT_REQUEST_TTL_S = 60.0  # llm-d-router; GIE: 0 (no TTL)
MAX_QUEUED_REQUESTS = 100_000
"""Ours: the whole pool never holds more queued requests than this, whatever maxRequests says."""

_FIELDS = ("maxBytes", "maxRequests", "defaultRequestTTL", "noEndpointRequestTTL", "defaultPriorityBand",
           "defaultNegativePriorityBand", "priorityBands", "usageLimitPolicyPluginRef",
           "saturationDetector", "enableEviction")  # fmt: skip
_BAND_FIELDS = ("priority", "maxBytes", "maxRequests", "fairnessPolicyRef", "orderingPolicyRef")
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[kMGTPE]|m|)")
_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}  # fmt: skip
_QUANTITY_EXPECT = 'a non-negative Kubernetes quantity such as 100, "1k", "500M" or "10Gi"'


def parse_quantity(raw: Any, location: str) -> int:
    """A Kubernetes ``resource.Quantity`` as its ``Value()`` reads it (fractions round up)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ConfigError(f"expected {_QUANTITY_EXPECT}, got {raw!r}", location=location)
    match = _QUANTITY.fullmatch(str(raw).strip())
    if match is None:
        raise ConfigError(f"expected {_QUANTITY_EXPECT}, got {raw!r}", location=location)
    number, suffix = match.groups()
    if suffix[:1] in ("e", "E"):
        value = Fraction(number) * Fraction(10) ** int(suffix[1:])
    elif suffix == "m":
        value = Fraction(number) / 1000
    else:
        value = Fraction(number) * _SUFFIX[suffix]
    if value < 0:
        raise ConfigError(f"must be non-negative, got {raw!r}", location=location)
    return math.ceil(value)


@dataclass(frozen=True, slots=True)
class BandSpec:
    """One ``PriorityBandConfig`` as written (None: omitted)."""

    priority: int | None
    max_bytes: int | None
    max_requests: int | None
    fairness_ref: str | None
    ordering_ref: str | None
    location: str


@dataclass(frozen=True, slots=True)
class FlowControlSpec:
    """The section as written, shape-checked."""

    max_bytes: int | None = None
    max_requests: int | None = None
    default_ttl: float | None = None
    no_endpoint_ttl: float | None = None
    default_band: BandSpec | None = None
    default_negative_band: BandSpec | None = None
    bands: tuple[BandSpec, ...] = ()
    usage_limit_ref: str | None = None
    detector_ref: str | None = None
    location: str = "flowControl"


def _mapping(value: Any, fields: tuple[str, ...], location: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"expected a mapping, got {value!r}", location=location)
    for key in value:
        if key not in fields:
            raise ConfigError(
                f"unknown field (expected one of: {', '.join(fields)})", location=f"{location}.{key}"
            )
    return value


def _ref(value: Mapping[str, Any], key: str, location: str) -> str | None:
    raw = value.get(key)
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise ConfigError(f"expected the name of a plugin, got {raw!r}", location=f"{location}.{key}")
    return raw


def _ttl(value: Mapping[str, Any], key: str, location: str) -> float | None:
    if value.get(key) is None:
        return None
    raw = value[key]
    try:
        seconds = parse_duration(raw) if isinstance(raw, str) else float("nan")
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0:  # also NaN: a bare number is not a metav1.Duration
        raise ConfigError(
            f"expected {DURATION_EXPECT.split(' (')[0]} (>= 0), got {raw!r}", location=f"{location}.{key}"
        )
    return seconds


def _band(value: Any, location: str, template: bool) -> BandSpec:
    band = _mapping(value, _BAND_FIELDS, location)
    priority = band.get("priority")
    if template:
        priority = None if priority is None else _int(priority, f"{location}.priority")
    elif priority is None:
        raise ConfigError("required: the band's priority level (an integer)", location=f"{location}.priority")
    else:
        priority = _int(priority, f"{location}.priority")
    return BandSpec(
        priority,
        None if band.get("maxBytes") is None else parse_quantity(band["maxBytes"], f"{location}.maxBytes"),
        None
        if band.get("maxRequests") is None
        else parse_quantity(band["maxRequests"], f"{location}.maxRequests"),
        _ref(band, "fairnessPolicyRef", location),
        _ref(band, "orderingPolicyRef", location),
        location,
    )


def _int(raw: Any, location: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ConfigError(f"expected an integer, got {raw!r}", location=location)
    return raw


def parse_flow_control(value: Any, location: str = "flowControl") -> FlowControlSpec:
    """Validate the section's shape (None: an empty section). References are resolved later."""
    if value is None:
        return FlowControlSpec(location=location)
    fc = _mapping(value, _FIELDS, location)
    eviction = fc.get("enableEviction", False)
    if not isinstance(eviction, bool):
        raise ConfigError(f"expected true or false, got {eviction!r}", location=f"{location}.enableEviction")
    if eviction:
        raise ConfigError(
            "in-flight eviction (enableEviction: true) is not implemented in pyepp; remove the field "
            "(queued requests are still shed by capacity and TTL)",
            location=f"{location}.enableEviction",
        )
    detector = fc.get("saturationDetector")
    detector_ref = None
    if detector is not None:
        where = f"{location}.saturationDetector"
        detector_ref = _ref(_mapping(detector, ("pluginRef",), where), "pluginRef", where)
    bands_raw = fc.get("priorityBands") or []
    if not isinstance(bands_raw, list):
        raise ConfigError(
            f"expected a list of priority bands, got {bands_raw!r}", location=f"{location}.priorityBands"
        )
    bands = tuple(_band(b, f"{location}.priorityBands[{i}]", False) for i, b in enumerate(bands_raw))
    seen: dict[int, str] = {}
    for band in bands:
        assert band.priority is not None
        if band.priority in seen:
            raise ConfigError(
                f"duplicate priority level {band.priority} (also at {seen[band.priority]})",
                location=f"{band.location}.priority",
            )
        seen[band.priority] = band.location
    default = fc.get("defaultPriorityBand")
    negative = fc.get("defaultNegativePriorityBand")
    return FlowControlSpec(
        None if fc.get("maxBytes") is None else parse_quantity(fc["maxBytes"], f"{location}.maxBytes"),
        None
        if fc.get("maxRequests") is None
        else parse_quantity(fc["maxRequests"], f"{location}.maxRequests"),
        _ttl(fc, "defaultRequestTTL", location),
        _ttl(fc, "noEndpointRequestTTL", location),
        None if default is None else _band(default, f"{location}.defaultPriorityBand", True),
        None if negative is None else _band(negative, f"{location}.defaultNegativePriorityBand", True),
        bands,
        _ref(fc, "usageLimitPolicyPluginRef", location),
        detector_ref,
        location,
    )


@dataclass(frozen=True, slots=True)
class BandConfig:
    """A priority band (or a template for dynamically created bands), defaults applied."""

    priority: int
    max_requests: int
    max_bytes: int
    ordering: OrderingPolicy
    fairness: FairnessPolicy

    def as_yaml(self, with_priority: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"priority": self.priority} if with_priority else {}
        out.update(
            maxBytes=str(self.max_bytes),
            maxRequests=str(self.max_requests),
            fairnessPolicyRef=self.fairness.name,
            orderingPolicyRef=self.ordering.name,
        )
        return out


@dataclass(frozen=True, slots=True)
class FlowControlConfig:
    """The effective flow-control configuration. ``max_requests`` / ``max_bytes`` 0: no pool limit;
    TTLs 0: no expiry; ``detector``: ``flowControl.saturationDetector`` (None: the top-level one)."""

    max_requests: int
    max_bytes: int
    default_ttl: float
    no_endpoint_ttl: float
    bands: Mapping[int, BandConfig]
    default_band: BandConfig
    default_negative_band: BandConfig | None
    usage_limit: UsageLimitPolicy
    detector: SaturationDetector | None = None

    def band(self, priority: int) -> BandConfig:
        """The configuration of the band for ``priority`` (configured, else the matching template)."""
        band = self.bands.get(priority)
        if band is not None:
            return band
        template = (
            self.default_negative_band if priority < 0 and self.default_negative_band else self.default_band
        )
        return BandConfig(
            priority, template.max_requests, template.max_bytes, template.ordering, template.fairness
        )

    def as_yaml(self) -> dict[str, Any]:
        """The effective section (every default filled in); loads again with the same meaning."""
        out: dict[str, Any] = {
            "maxBytes": str(self.max_bytes),
            "maxRequests": str(self.max_requests),
            "defaultRequestTTL": _duration(self.default_ttl),
            "noEndpointRequestTTL": _duration(self.no_endpoint_ttl),
            "defaultPriorityBand": self.default_band.as_yaml(False),
        }
        if self.default_negative_band is not None:
            out["defaultNegativePriorityBand"] = self.default_negative_band.as_yaml(False)
        if self.bands:
            out["priorityBands"] = [
                b.as_yaml() for b in sorted(self.bands.values(), key=lambda b: -b.priority)
            ]
        out["usageLimitPolicyPluginRef"] = self.usage_limit.name
        if self.detector is not None:
            out["saturationDetector"] = {"pluginRef": self.detector.name}
        return out


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


_IMPLICIT: dict[str, Callable[[], Plugin]] = {
    FcfsOrdering.plugin_type: lambda: FcfsOrdering(FcfsOrdering.plugin_type),
    GlobalStrictFairness.plugin_type: lambda: GlobalStrictFairness(GlobalStrictFairness.plugin_type),
    StaticUsageLimit.plugin_type: lambda: StaticUsageLimit(
        StaticUsageLimit.plugin_type, StaticUsageLimitParams()
    ),
}
_KINDS: dict[type, str] = {
    OrderingPolicy: "an ordering policy (e.g. fcfs-ordering-policy or edf-ordering-policy)",
    FairnessPolicy: "a fairness policy (e.g. global-strict-fairness-policy or round-robin-fairness-policy)",
    UsageLimitPolicy: "a usage limit policy (e.g. static-usage-limit-policy or priority-holdback-policy)",
    SaturationDetector: "a saturation detector (e.g. utilization-detector or concurrency-detector)",
}


class _Resolver:
    def __init__(self, lookup: Callable[[str], Plugin], declared: tuple[str, ...]) -> None:
        self._lookup = lookup
        self._declared = declared
        self._implicit: dict[str, Plugin] = {}

    def __call__(self, ref: str, kind: type, location: str) -> Any:
        try:
            plugin = self._lookup(ref)
        except KeyError:
            make = _IMPLICIT.get(ref)
            if make is None:
                declared = ", ".join(self._declared) or "none"
                raise ConfigError(
                    f'no plugin named "{ref}" (declared: {declared})', location=location
                ) from None
            plugin = self._implicit.setdefault(ref, make())
        if not has_role(plugin, kind):
            plugin_type = getattr(plugin, "plugin_type", type(plugin).__name__)
            raise ConfigError(f'plugin "{ref}" ({plugin_type}) is not {_KINDS[kind]}', location=location)
        return plugin


def resolve_flow_control(
    spec: FlowControlSpec | None,
    api_version: str,
    lookup: Callable[[str], Plugin],
    declared: tuple[str, ...] = (),
) -> FlowControlConfig:
    """Resolve ``spec``'s references through ``lookup`` (the configuration's plugins by name; KeyError
    when unknown) and apply upstream's defaults. ``declared``: plugin names for error messages."""
    spec = spec or FlowControlSpec()
    resolve = _Resolver(lookup, declared)
    where = spec.location
    ordering = resolve(FcfsOrdering.plugin_type, OrderingPolicy, where)
    fairness = resolve(GlobalStrictFairness.plugin_type, FairnessPolicy, where)

    def band(b: BandSpec, base: BandConfig | None) -> BandConfig:
        return BandConfig(
            b.priority or 0,
            b.max_requests or (base.max_requests if base else DEFAULT_BAND_MAX_REQUESTS),
            b.max_bytes or (base.max_bytes if base else DEFAULT_BAND_MAX_BYTES),
            resolve(b.ordering_ref, OrderingPolicy, f"{b.location}.orderingPolicyRef")
            if b.ordering_ref
            else (base.ordering if base else ordering),
            resolve(b.fairness_ref, FairnessPolicy, f"{b.location}.fairnessPolicyRef")
            if b.fairness_ref
            else (base.fairness if base else fairness),
        )

    system = BandConfig(0, DEFAULT_BAND_MAX_REQUESTS, DEFAULT_BAND_MAX_BYTES, ordering, fairness)
    default_band = band(spec.default_band, None) if spec.default_band else system
    default_band = BandConfig(0, default_band.max_requests, default_band.max_bytes, default_band.ordering,
                              default_band.fairness)  # fmt: skip
    negative = band(spec.default_negative_band, None) if spec.default_negative_band else None
    bands = {b.priority: band(b, None) for b in spec.bands if b.priority is not None}
    usage_ref = spec.usage_limit_ref or StaticUsageLimit.plugin_type
    usage = resolve(usage_ref, UsageLimitPolicy, f"{where}.usageLimitPolicyPluginRef")
    detector = None
    if spec.detector_ref:
        detector = resolve(spec.detector_ref, SaturationDetector, f"{where}.saturationDetector.pluginRef")
    default_ttl = spec.default_ttl
    if default_ttl is None:
        default_ttl = 0.0 if api_version == LEGACY_API_VERSION else DEFAULT_REQUEST_TTL_S
    no_endpoint_ttl = default_ttl if spec.no_endpoint_ttl is None else spec.no_endpoint_ttl
    return FlowControlConfig(
        spec.max_requests or 0,
        spec.max_bytes or 0,
        default_ttl,
        no_endpoint_ttl,
        bands,
        default_band,
        negative,
        usage,
        detector,
    )
