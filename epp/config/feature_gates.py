"""The ``featureGates`` section: upstream's gate names, syntax and defaults, and what each does here.

Syntax (llm-d-router): each entry is ``name``, ``name=true`` or ``name=false`` (the value as Go's
``strconv.ParseBool`` reads it after lower-casing and trimming: 1/t/true, 0/f/false); later entries win;
an omitted gate takes its default. A name that is not a gate below is rejected (both upstreams
reject unknown gates at load: "feature gate 'x' is unknown or unregistered").

Gates (the union of GIE's last EPP and llm-d-router's; default in parentheses):

* ``flowControl`` (false): request queueing with fairness and priority bands, configured by the
  ``flowControl`` section (:mod:`epp.flowcontrol`; docs/flow-control.md). Off: the legacy admission
  (sheddable requests get 429 while the pool is saturated); the section is still validated and its
  ``saturationDetector`` still selects the detector, as in llm-d-router.
* ``dataLayer`` (false; GIE): a no-op there since the data layer became the default, kept so old
  configurations load; pyepp always runs its data layer and logs that the gate can be removed.
  (llm-d-router removed the gate and rejects it.)
* ``enableLegacyMetrics`` (false; GIE): scrape with the legacy settings instead of the ``dataLayer``
  section: metrics only, per ``--model-server-metrics-*`` and the metric-name flags; the section's
  sources (and /v1/models polling) are not used. (llm-d-router removed the gate and rejects it.)
* GIE's deprecated ``ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER=true`` environment variable enables
  ``flowControl`` as the gate does.
* ``haPopulateNonLeaderDatastore`` (true; llm-d-router): with ``--ha-enable-leader-election``, replicas
  that do not lead still discover and scrape endpoints (they stay not ready). ``=false`` restores the
  leader-only behaviour: the data layer starts on first acquiring leadership and stops on losing it.

:func:`parse_feature_gates` returns :class:`FeatureGates`; errors are
:class:`~scheduler.errors.ConfigError` naming the entry.

Test seam: :func:`registered_gates` adds gates for the duration of a ``with`` block (the equivalent of
the Go loader test's ``RegisterFeatureGate("test-feature-gate", true)``); only tests use it, so the
server accepts exactly the gates above.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scheduler.errors import ConfigError

__all__ = [
    "DATA_LAYER",
    "FLOW_CONTROL",
    "FLOW_CONTROL_ENV",
    "GATE_DEFAULTS",
    "HA_POPULATE_NON_LEADER_DATASTORE",
    "LEGACY_METRICS",
    "FeatureGates",
    "flow_control_from_env",
    "parse_feature_gates",
    "registered_gates",
]

FLOW_CONTROL = "flowControl"
DATA_LAYER = "dataLayer"
LEGACY_METRICS = "enableLegacyMetrics"
HA_POPULATE_NON_LEADER_DATASTORE = "haPopulateNonLeaderDatastore"

GATE_DEFAULTS: Mapping[str, bool] = MappingProxyType(
    {FLOW_CONTROL: False, DATA_LAYER: False, LEGACY_METRICS: False, HA_POPULATE_NON_LEADER_DATASTORE: True}
)
"""Every gate pyepp accepts, with its upstream default."""

_EXTRA_GATES: ContextVar[Mapping[str, bool]] = ContextVar("extra_feature_gates", default=MappingProxyType({}))


@contextmanager
def registered_gates(gates: Mapping[str, bool]) -> Iterator[None]:
    """While active (in this context), :func:`parse_feature_gates` also accepts ``gates`` (name ->
    default). For tests that load upstream fixtures naming the Go tests' own gates; never used by the
    server. A name that is already a gate raises ValueError."""
    clash = sorted(set(gates) & (set(GATE_DEFAULTS) | set(_EXTRA_GATES.get())))
    if clash:
        raise ValueError(f"feature gate {clash[0]!r} is already registered")
    token = _EXTRA_GATES.set(MappingProxyType({**_EXTRA_GATES.get(), **gates}))
    try:
        yield
    finally:
        _EXTRA_GATES.reset(token)


_TRUE = frozenset({"1", "t", "true"})
_FALSE = frozenset({"0", "f", "false"})


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The value of every gate (defaults for those the section leaves out)."""

    values: Mapping[str, bool] = field(default_factory=lambda: GATE_DEFAULTS)
    defaults: Mapping[str, bool] = field(default_factory=lambda: GATE_DEFAULTS)

    def enabled(self, gate: str) -> bool:
        """The gate's value; KeyError for a name that is not a gate."""
        return self.values[gate]

    @property
    def set_explicitly(self) -> tuple[str, ...]:
        """Gates whose value differs from the default (for the start-up log)."""
        return tuple(g for g, v in self.values.items() if v != self.defaults[g])


FLOW_CONTROL_ENV = "ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER"
"""GIE's deprecated environment switch that appends the flowControl gate when it parses as true."""


def flow_control_from_env(environ: Mapping[str, str]) -> bool:
    """Whether GIE's deprecated :data:`FLOW_CONTROL_ENV` enables flow control (Go ``ParseBool``; an
    unparsable value counts as false, as GIE's ``env.GetEnvBool`` does)."""
    return environ.get(FLOW_CONTROL_ENV, "") in {"1", "t", "T", "TRUE", "true", "True"}


def parse_feature_gates(value: Any, location: str = "featureGates") -> FeatureGates:
    """Validate the section (a list of ``name[=bool]`` strings; None: all defaults)."""
    if value is None:
        return FeatureGates()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            "expected a list of feature-gate names (name, name=true or name=false)", location=location
        )
    defaults = MappingProxyType({**GATE_DEFAULTS, **_EXTRA_GATES.get()})
    values = dict(defaults)
    for i, entry in enumerate(value):
        name, eq, raw = entry.partition("=")
        where = f"{location}[{i}]"
        if name not in defaults:
            known = ", ".join(sorted(defaults))
            raise ConfigError(f"unknown feature gate {name!r} (known gates: {known})", location=where)
        enabled = True
        if eq:
            text = raw.split("=", 1)[0].strip().lower()
            if text not in _TRUE | _FALSE:
                raise ConfigError(
                    f"{raw!r} is not a valid value for the feature gate {name} (expected true or false)",
                    location=where,
                )
            enabled = text in _TRUE
        values[name] = enabled
    return FeatureGates(MappingProxyType(values), defaults)
