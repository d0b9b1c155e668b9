"""endpoint-notification-source: configuration (llm-d-router's validateSourceExtractors rules) and the
lifecycle events the data layer delivers to endpoint extractors."""

from __future__ import annotations

from typing import Any

import pytest

from datalayer import DataLayer, StaticDiscovery
from datalayer.config import DataLayerConfigError, validate_datalayer_section
from datalayer.discovery import SpecTracker, make_spec
from datalayer.notifications import EndpointEvent, EndpointEventType, EndpointNotificationSource
from epp.config.sections import load_picker_config
from scheduler.errors import ConfigError
from tests.datalayer.dl_fakes import FakeHttp

_PLUGINS: list[Any] = [
    {"type": "endpoint-notification-source"},
    {"name": "cache-a", "type": "some-producer"},
    {"name": "cache-b", "type": "other-producer"},
    {"type": "core-metrics-extractor"},
]


class Recorder:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.events: list[tuple[str, str]] = []

    def extract_endpoint(self, event: EndpointEvent) -> None:
        self.events.append((event.kind.value, event.endpoint.address))
        if self.fail:
            raise RuntimeError("boom")


def _section(*extractors: str) -> dict[str, Any]:
    refs = [{"pluginRef": e} for e in extractors]
    return {"sources": [{"pluginRef": "endpoint-notification-source", "extractors": refs}]}


def test_extractors_are_bound_to_the_plugin_instances() -> None:
    config = validate_datalayer_section(_section("cache-a", "cache-b"), _PLUGINS)
    assert [s.plugin.plugin_type for s in config.sources] == [
        "endpoint-notification-source",
        "metrics-data-source",
    ]
    assert [s.plugin_type for s in config.build_sources()] == ["metrics-data-source"]  # not polled
    instances = {"cache-a": Recorder("cache-a"), "cache-b": Recorder("cache-b")}
    (source,) = config.endpoint_sources(instances.__getitem__)
    assert source.name == "endpoint-notification-source"
    assert source.extractors == (instances["cache-a"], instances["cache-b"])


@pytest.mark.parametrize(
    ("section", "plugins", "location", "message"),
    [
        (_section("nope"), _PLUGINS, "dataLayer.sources[0].extractors[0].pluginRef", "no plugin named"),
        (
            _section("cache-a", "cache-a2"),
            [*_PLUGINS, {"name": "cache-a2", "type": "some-producer"}],
            "dataLayer.sources[0].extractors",
            "two extractors of type 'some-producer'",
        ),
        (
            {"sources": [{"pluginRef": "endpoint-notification-source", "extractors": ["cache-a"]}]},
            _PLUGINS,
            "dataLayer.sources[0].extractors[0]",
            "expected a mapping",
        ),
    ],
)
def test_section_errors(section: Any, plugins: list[Any], location: str, message: str) -> None:
    with pytest.raises(DataLayerConfigError, match=message) as err:
        validate_datalayer_section(section, plugins)
    assert err.value.location == location


def test_an_extractor_must_implement_extract_endpoint() -> None:
    config = validate_datalayer_section(_section("cache-a", "core-metrics-extractor"), _PLUGINS)
    with pytest.raises(DataLayerConfigError, match="does not implement extract_endpoint") as err:
        config.endpoint_sources({"cache-a": Recorder("a"), "core-metrics-extractor": object()}.__getitem__)
    assert err.value.location == "dataLayer.sources[0].extractors[1].pluginRef"


_HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"


def test_the_loader_checks_the_extractors() -> None:
    text = _HEAD + (
        "plugins:\n- type: endpoint-notification-source\n- type: max-score-picker\n"
        "dataLayer:\n  sources:\n  - pluginRef: endpoint-notification-source\n"
        "    extractors:\n    - pluginRef: max-score-picker\n"
    )
    with pytest.raises(ConfigError, match="does not implement extract_endpoint"):
        load_picker_config(None, text)
    bare = _HEAD + "plugins:\n- type: endpoint-notification-source\n- type: max-score-picker\n"
    bare += "dataLayer:\n  sources:\n  - pluginRef: endpoint-notification-source\n"
    loaded = load_picker_config(None, bare)
    (source,) = loaded.data_layer.endpoint_sources(loaded.config.plugin)
    assert source.extractors == ()
    with pytest.raises(ConfigError, match="unknown parameter"):
        load_picker_config(
            None,
            bare.replace(
                "- type: endpoint-notification-source\n",
                "- type: endpoint-notification-source\n  parameters: {x: 1}\n",
                1,
            ),
        )


def test_the_data_layer_delivers_lifecycle_events_in_order() -> None:
    failing, recorder = Recorder("failing", fail=True), Recorder("rec")
    source = EndpointNotificationSource("endpoint-notification-source", [failing, recorder])
    layer = DataLayer(StaticDiscovery([]), http=FakeHttp(), sources=[], endpoint_sources=[source])
    tracker = SpecTracker()
    a, b = make_spec("10.0.0.1:8000"), make_spec("10.0.0.2:8000")
    layer.apply(tracker.update([a, b]))
    layer.apply(tracker.update([make_spec(a.address, labels={"x": "y"}), b]))  # relabel: an update
    layer.apply(tracker.update([b]))
    add, delete = EndpointEventType.ADD_OR_UPDATE.value, EndpointEventType.DELETE.value
    assert recorder.events == [
        (add, a.address),
        (add, b.address),
        (add, a.address),
        (delete, a.address),
    ]
    assert failing.events == recorder.events  # a failing extractor does not stop the others
