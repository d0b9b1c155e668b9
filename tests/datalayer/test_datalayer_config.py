"""The dataLayer section validator and the plugin factories."""

from __future__ import annotations

from typing import Any

import pytest

from datalayer.config import (
    DataLayerConfigError,
    plugin_factories,
    validate_datalayer_section,
)
from datalayer.records import EndpointSpec
from datalayer.sources import MetricsDataSource, ModelsDataSource

_PLUGINS = [
    {"type": "max-score-picker"},
    {"name": "metrics", "type": "metrics-data-source", "parameters": {"path": "/prom"}},
    {
        "type": "core-metrics-extractor",
        "parameters": {"engineConfigs": [{"name": "vllm", "queuedRequestsSpec": "q", "kvUsageSpec": "kv"}]},
    },
    {"name": "models", "type": "models-data-source", "parameters": {"interval": "2s"}},
]


def test_absent_section_gives_default_sources() -> None:
    config = validate_datalayer_section(None)
    metrics, models = config.build_sources(metrics_path="/m", models_interval=3.0)
    assert isinstance(metrics, MetricsDataSource) and metrics.path == "/m"
    assert isinstance(models, ModelsDataSource) and models.interval(0.05) == 3.0
    assert config.engines is None


def test_refs_resolve_against_plugins_list() -> None:
    section = {
        "sources": [
            {"pluginRef": "metrics", "extractors": [{"pluginRef": "core-metrics-extractor"}]},
            {"pluginRef": "models"},
        ]
    }
    config = validate_datalayer_section(section, _PLUGINS)
    assert config.engines is not None and str(config.engines["vllm"].kv_usage[0]) == "kv"
    metrics, models = config.build_sources()
    assert isinstance(metrics, MetricsDataSource) and metrics.path == "/prom" and metrics.name == "metrics"
    assert isinstance(models, ModelsDataSource) and models.interval(0.05) == 2.0


def test_refs_resolve_later_against_plugin_instances() -> None:
    section = {"sources": [{"pluginRef": "metrics", "extractors": [{"pluginRef": "core"}]}]}
    config = validate_datalayer_section(section)
    assert not config.resolved
    with pytest.raises(DataLayerConfigError, match="unresolved"):
        config.build_sources()
    factories = plugin_factories()
    instances = {
        "metrics": factories["metrics-data-source"]("metrics", {"path": "/x"}, None),
        "core": factories["core-metrics-extractor"]("core", {}, None),
    }
    (metrics,) = config.resolve(instances).build_sources()
    assert isinstance(metrics, MetricsDataSource) and metrics.path == "/x"
    with pytest.raises(DataLayerConfigError) as err:
        config.resolve({"metrics": instances["core"], "core": instances["core"]})
    assert err.value.location == "dataLayer.sources[0].pluginRef"


# llm-d-router pkg/epp/config/loader/defaults_test.go TestEnsureDataLayer (commit ebab68792): the
# metrics source and core extractor are appended unless a metrics-data-source is listed or
# injectDefaults is false (then nothing is added, and no metrics are collected).
@pytest.mark.parametrize(
    ("section", "types"),
    [
        ({}, ["metrics-data-source"]),  # empty DataLayer {} injects metrics defaults
        ({"sources": []}, ["metrics-data-source"]),
        ({"sources": [{"pluginRef": "models"}]}, ["models-data-source", "metrics-data-source"]),  # additive
        (
            {"sources": [{"pluginRef": "metrics", "extractors": [{"pluginRef": "core-metrics-extractor"}]}]},
            ["metrics-data-source"],  # an existing metrics source is not doubled
        ),
    ],
)
def test_inject_defaults(section: Any, types: list[str]) -> None:
    config = validate_datalayer_section(section, _PLUGINS)
    assert [s.plugin.plugin_type for s in config.sources] == types
    injected = config.sources[-1]
    assert [e.plugin_type for e in injected.extractors] == ["core-metrics-extractor"]


@pytest.mark.parametrize(
    ("section", "types"),
    [
        ({"injectDefaults": False}, []),  # TestEnsureDataLayer "injectDefaults: false suppresses injection"
        ({"sources": [{"pluginRef": "models"}], "injectDefaults": False}, ["models-data-source"]),
    ],
)
def test_inject_defaults_false_runs_without_metrics(section: Any, types: list[str]) -> None:
    config = validate_datalayer_section(section, _PLUGINS)
    assert [s.plugin.plugin_type for s in config.sources] == types
    assert not any(s.primary for s in config.build_sources())


def test_injected_source_takes_parameters_of_plugins_named_after_the_type() -> None:
    plugins = [{"type": "metrics-data-source", "parameters": {"path": "/custom"}}]
    (source,) = validate_datalayer_section({"sources": []}, plugins).sources
    assert source.plugin.parameters["path"] == "/custom"
    with pytest.raises(DataLayerConfigError) as err:
        validate_datalayer_section({}, [{"name": "metrics-data-source", "type": "models-data-source"}])
    assert err.value.location == "plugins[0].name"


@pytest.mark.parametrize(
    ("section", "location", "message"),
    [
        ([], "dataLayer", "expected a mapping"),
        ({"sources": {}}, "dataLayer.sources", "expected a list"),
        ({"injectDefaults": "yes"}, "dataLayer.injectDefaults", "true or false"),
        ({"sources": [{"pluginRef": "models"}], "x": 1}, "dataLayer.x", "unknown parameter"),
        ({"sources": [{"pluginRef": "nope"}]}, "dataLayer.sources[0].pluginRef", "no plugin named"),
        ({"sources": [{"pluginRef": "max-score-picker"}]}, "dataLayer.sources[0].pluginRef", "has type"),
        (
            {"sources": [{"pluginRef": "metrics", "extractors": []}]},
            "dataLayer.sources[0].extractors",
            "exactly one",
        ),
        (
            {"sources": [{"pluginRef": "models", "extractors": [{"pluginRef": "core-metrics-extractor"}]}]},
            "dataLayer.sources[0].extractors[0].pluginRef",
            "models-data-source cannot feed a core-metrics-extractor",
        ),
        (
            {"sources": [{"pluginRef": "metrics", "extractors": [{"pluginRef": "metrics"}]}]},
            "dataLayer.sources[0].extractors[0].pluginRef",
            "has type",
        ),
        (  # the shape of every entry is checked before any reference (as upstream's strict decoder)
            {"sources": [{"pluginRef": "max-score-picker", "extractors": ["core-metrics-extractor"]}]},
            "dataLayer.sources[0].extractors[0]",
            "expected a mapping with pluginRef",
        ),
        (
            {"sources": [{"pluginRef": "nope"}, {"pluginRef": "models", "x": 1}]},
            "dataLayer.sources[1].x",
            "unknown parameter",
        ),
        (
            {"sources": [{"pluginRef": "metrics", "extractors": [{"pluginRef": "core", "weight": 1}]}]},
            "dataLayer.sources[0].extractors[0].weight",
            "unknown parameter",
        ),
        (
            {
                "sources": [{"pluginRef": "metrics", "extractors": [{"pluginRef": "core-metrics-extractor"}]}]
                * 2
            },
            "dataLayer.sources",
            "listed twice",
        ),
    ],
)
def test_section_errors_name_the_location(section: Any, location: str, message: str) -> None:
    with pytest.raises(DataLayerConfigError) as err:
        validate_datalayer_section(section, _PLUGINS)
    assert err.value.location == location
    assert message in err.value.message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("plugins", "location"),
    [
        (
            [{"name": "m", "type": "metrics-data-source", "parameters": {"path": 3}}],
            "plugins[0].parameters.path",
        ),
        (
            [{"name": "m", "type": "metrics-data-source", "parameters": {"bogus": 1}}],
            "plugins[0].parameters.bogus",
        ),
        (
            [
                {"name": "m", "type": "metrics-data-source"},
                {
                    "name": "c",
                    "type": "core-metrics-extractor",
                    "parameters": {"engineConfigs": [{"name": "vllm", "kvUsageSpec": "9"}]},
                },
            ],
            "plugins[1].parameters.engineConfigs[0].kvUsageSpec",
        ),
    ],
)
def test_plugin_parameter_errors_name_the_plugin_entry(plugins: list[Any], location: str) -> None:
    section = {
        "sources": [
            {
                "pluginRef": "m",
                "extractors": [{"pluginRef": "c" if len(plugins) > 1 else "core-metrics-extractor"}],
            }
        ]
    }
    with pytest.raises(DataLayerConfigError) as err:
        validate_datalayer_section(section, plugins)
    assert err.value.location == location


def test_factories_validate_parameters() -> None:
    factory = plugin_factories()["models-data-source"]
    assert factory("m", {"interval": "500ms"}, None).parameters["interval"] == 0.5
    with pytest.raises(DataLayerConfigError, match="invalid interval"):
        factory("m", {"interval": "soon"}, None)


def test_registered_types_is_a_test_seam_only_active_inside_the_block() -> None:
    from datalayer.config import ExtraPluginType, registered_types

    plugins = [{"name": "src", "type": "test-source"}, {"name": "ext", "type": "test-extractor"}]
    section = {"sources": [{"pluginRef": "src", "extractors": [{"pluginRef": "ext"}]}]}
    fakes = (
        ExtraPluginType("test-source", "source", lambda p, where: {}),
        ExtraPluginType("test-extractor", "extractor", lambda p, where: {}),
    )
    with registered_types(*fakes):
        config = validate_datalayer_section(section, plugins)
        assert [s.plugin.plugin_type for s in config.sources] == ["test-source", "metrics-data-source"]
        assert [e.plugin_type for e in config.sources[0].extractors] == ["test-extractor"]
        with pytest.raises(DataLayerConfigError, match="registered for tests only"):
            config.build_sources()
        clash = ExtraPluginType("metrics-data-source", "source", lambda p, where: {})
        with pytest.raises(ValueError, match="already registered"), registered_types(clash):
            pass
    with pytest.raises(DataLayerConfigError, match="has type 'test-source'; expected one of"):
        validate_datalayer_section(section, plugins)


def test_models_data_extractor_produces_the_models_attributes() -> None:
    # llm-d-router's models README example: a models-data-source feeding a models-data-extractor
    plugins = [
        {"name": "vllm-models-source", "type": "models-data-source", "parameters": {"interval": "5s"}},
        {"name": "vllm-models-extractor", "type": "models-data-extractor"},
    ]
    section = {
        "sources": [
            {"pluginRef": "vllm-models-source", "extractors": [{"pluginRef": "vllm-models-extractor"}]}
        ]
    }
    config = validate_datalayer_section(section, plugins)
    models = next(s for s in config.build_sources() if isinstance(s, ModelsDataSource))
    assert [e.name for e in models.extractors] == ["vllm-models-extractor"]
    body = b'{"object": "list", "data": [{"id": "llama-3"}, {"id": "sql-lora", "parent": "llama-3"}]}'
    update = models.extract(body, EndpointSpec("10.0.0.1:8000", "pod-a"), 0.0)
    assert update.attributes is not None
    assert update.attributes["models"] == frozenset({"llama-3"})
    assert dict(update.attributes["adapters"]) == {"sql-lora": "llama-3"}
    with pytest.raises(DataLayerConfigError, match="unknown parameter"):
        validate_datalayer_section(section, [plugins[0], {**plugins[1], "parameters": {"x": 1}}])
    bad = {
        "sources": [
            {"pluginRef": "metrics-data-source", "extractors": [{"pluginRef": "models-data-extractor"}]}
        ]
    }
    with pytest.raises(DataLayerConfigError, match="metrics-data-source cannot feed a models-data-extractor"):
        validate_datalayer_section(bad, [])
