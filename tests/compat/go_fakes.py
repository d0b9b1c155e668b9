"""Python equivalents of the fake plugin types the Go config-loader tests register.

Upstream's loader fixtures (``pkg/epp/config/loader/testdata_test.go``) name plugin types that exist only
in the Go test (``registerTestPlugins`` in ``configloader_test.go``: ``test-plugin``, ``test-scorer``,
``test-picker``, ``test-profile-handler``, ``test-with-dependencies``, ``test-with-nested-dependencies``;
GIE's ``TestFilterExecutionOrderFromYAML`` adds ``test-order-filter``). The corpus test registers these
equivalents, with the same parameter handling, for the fixtures that use them, so those cases test
pyepp's loader rather than stopping at an unknown type. Like the Go mocks they do nothing when called.

The Go tests' data-layer fakes and feature gate are registered too, through the seams
:func:`datalayer.config.registered_types` and :func:`epp.config.feature_gates.registered_gates` (see
:func:`go_test_fakes`): the loader test's ``test-source`` / ``test-extractor`` (``mockSource`` /
``mockExtractor``: parameters ignored, they collect and extract nothing), the integration harness's
``mock-metrics-source`` (``dlmocks.NewDataSource``, handed to the runner by the test, which writes
metrics the test sets straight into endpoints; its config entry takes no parameters either) and
``test-feature-gate`` (``RegisterFeatureGate(testFeatureGate, true)``: default true).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from datalayer.config import DataLayerPlugin, ExtraPluginType, registered_types
from epp.config.feature_gates import registered_gates
from scheduler.cycle_state import CycleState
from scheduler.errors import ConfigError
from scheduler.interfaces import Handle, Plugin, PluginFactory
from scheduler.params import plugin_location
from scheduler.plugins.base import PluginBase
from scheduler.profile import SchedulerProfile
from scheduler.registry import Registry
from scheduler.types import EndpointView, LLMRequest, ProfileResult, SchedulingResult, ScoredEndpoint

__all__ = ["DATALAYER_FAKES", "FAKE_GATES", "FAKE_TYPES", "go_test_fakes", "register_go_test_fakes"]


class _Fake(PluginBase):
    def __init__(self, plugin_type: str, name: str) -> None:
        super().__init__(name)
        self.plugin_type = plugin_type  # type: ignore[misc]


class _FakeFilter(_Fake):
    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        return endpoints


class _FakeScorer(_Fake):
    def score(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]) -> list[float]:
        return [0.0] * len(endpoints)


class _FakePicker(_Fake):
    def pick(
        self, cycle: CycleState, request: LLMRequest, scored: Sequence[ScoredEndpoint]
    ) -> Sequence[ScoredEndpoint]:
        return list(scored[:1])


class _FakeProfileHandler(_Fake):
    def pick_profiles(
        self,
        cycle: CycleState,
        request: LLMRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> Mapping[str, SchedulerProfile]:
        return {}

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        raise NotImplementedError("a Go test mock: never run")


def _mapping(plugin_type: str, name: str, parameters: Any) -> Mapping[str, Any]:
    if parameters is None:
        return {}
    if not isinstance(parameters, Mapping):
        raise ConfigError(
            f"expected a mapping, got {parameters!r}",
            location=f"{plugin_location(plugin_type, name)}: parameters",
        )
    return parameters


def _simple(cls: type[_Fake], plugin_type: str) -> PluginFactory:
    """Go's mockFactory: ignores its parameters."""

    def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
        return cls(plugin_type, name)

    return factory


def _test_scorer(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    """Go decodes ``{blockSize int}``: a non-integer blockSize fails (other keys are ignored)."""
    params = _mapping("test-scorer", name, parameters)
    block = params.get("blockSize", 0)
    if isinstance(block, bool) or not isinstance(block, int):
        raise ConfigError(
            f"expected an integer, got {block!r}",
            location=f"{plugin_location('test-scorer', name)}: parameters.blockSize",
        )
    return _FakeScorer("test-scorer", name)


def _require(plugin_type: str, name: str, handle: Handle, key: str, ref: Any) -> None:
    try:
        handle.plugin(str(ref))
    except KeyError:
        raise ConfigError(
            f"failed to find dependency {ref}",
            location=f"{plugin_location(plugin_type, name)}: parameters.{key}",
        ) from None


def _with_dependencies(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    """Go: ``{dependency string, pointedTo *string}``, each must name an instantiated plugin."""
    plugin_type = "test-with-dependencies"
    params = _mapping(plugin_type, name, parameters)
    _require(plugin_type, name, handle, "dependency", params.get("dependency", ""))
    if params.get("pointedTo") is not None:
        _require(plugin_type, name, handle, "pointedTo", params["pointedTo"])
    return _FakeFilter(plugin_type, name)


def _with_nested_dependencies(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    """Go: ``{nested {dependency}, extras []string, nestedPtr *{dependency}, pointedTo *string}``."""
    plugin_type = "test-with-nested-dependencies"
    params = _mapping(plugin_type, name, parameters)
    nested = params.get("nested") or {}
    _require(plugin_type, name, handle, "nested.dependency", nested.get("dependency", ""))
    for i, extra in enumerate(params.get("extras") or ()):
        _require(plugin_type, name, handle, f"extras[{i}]", extra)
    if params.get("nestedPtr") is not None:
        _require(plugin_type, name, handle, "nestedPtr.dependency", params["nestedPtr"].get("dependency", ""))
    if params.get("pointedTo") is not None:
        _require(plugin_type, name, handle, "pointedTo", params["pointedTo"])
    return _FakeFilter(plugin_type, name)


FAKE_TYPES: dict[str, PluginFactory] = {
    "test-plugin": _simple(_Fake, "test-plugin"),
    "test-scorer": _test_scorer,
    "test-picker": _simple(_FakePicker, "test-picker"),
    "test-profile-handler": _simple(_FakeProfileHandler, "test-profile-handler"),
    "test-order-filter": _simple(_FakeFilter, "test-order-filter"),
    "test-with-dependencies": _with_dependencies,
    "test-with-nested-dependencies": _with_nested_dependencies,
}


def _ignored(parameters: Any, location: str) -> Mapping[str, Any]:
    """The Go fakes' factories never read their parameters."""
    return {}


DATALAYER_FAKES: tuple[ExtraPluginType, ...] = (
    ExtraPluginType("test-source", "source", _ignored),
    ExtraPluginType("test-extractor", "extractor", _ignored),
    ExtraPluginType("mock-metrics-source", "source", _ignored),
)
FAKE_GATES: Mapping[str, bool] = {"test-feature-gate": True}


def _datalayer_factory(plugin_type: str) -> PluginFactory:
    def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
        return DataLayerPlugin(plugin_type, name, {})  # type: ignore[return-value]

    return factory


def register_go_test_fakes(registry: Registry) -> Registry:
    for plugin_type, factory in FAKE_TYPES.items():
        registry.register(plugin_type, factory, origin="go-test-fake")
    for fake in DATALAYER_FAKES:
        registry.register(fake.plugin_type, _datalayer_factory(fake.plugin_type), origin="go-test-fake")
    return registry


@contextmanager
def go_test_fakes() -> Iterator[None]:
    """While active, the data layer also accepts :data:`DATALAYER_FAKES` and the feature gates
    :data:`FAKE_GATES` (the plugin registry is handled by the caller, see ``corpus_lib``)."""
    with registered_types(*DATALAYER_FAKES), registered_gates(FAKE_GATES):
        yield
