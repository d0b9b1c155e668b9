"""Data-layer plugin parameters: upstream's names, defaults and validation errors, and their effect.

Sources: llm-d-router ``pkg/epp/framework/plugins/datalayer/source/{metrics,models,http}`` (factories,
``ParseIntervalOption``, ``tlsClientConfig``), ``datalayer/interval_dispatcher.go`` (``periodTicks``) and
``extractor/metrics/factories.go`` (defaultEngine, engineLabelKey); GIE's last EPP for the same factories.
"""

from __future__ import annotations

from typing import Any

import pytest
from dl_fakes import vllm_text
from structlog.testing import capture_logs

from datalayer import DataLayer, DataLayerOptions, StaticDiscovery
from datalayer.config import DataLayerConfigError, plugin_factories, validate_datalayer_section
from datalayer.connection import Connection, SourceConnection, TlsSettings
from datalayer.discovery import make_spec
from datalayer.http.rawhttp import RawHttpClient
from datalayer.params import go_duration
from datalayer.promtext import LazySamples
from datalayer.sources import CoreMetricsExtractor, MetricsDataSource, ModelsDataSource, tick_interval


def _params(plugin_type: str, params: Any) -> Any:
    return plugin_factories()[plugin_type]("p", params, None).parameters


def test_metrics_source_defaults_take_the_flags() -> None:
    p = _params("metrics-data-source", None)
    assert p == {"connection": SourceConnection(), "interval": None}
    flags = Connection("https", 9100, TlsSettings(insecure_skip_verify=False))
    assert p["connection"].resolve(flags) == flags


def test_metrics_source_parameters_parse() -> None:
    p = _params(
        "metrics-data-source",
        {
            "scheme": "https",
            "path": "metrics",  # Go's URL adds the leading slash
            "insecureSkipVerify": True,
            "port": 9400,
            "interval": "1s",
            "caCertPath": "/etc/ca.pem",  # not read: insecureSkipVerify
        },
    )
    assert p["path"] == "/metrics" and p["interval"] == 1.0
    resolved = p["connection"].resolve(Connection())
    assert resolved == Connection("https", 9400, TlsSettings(True, "/etc/ca.pem"))


@pytest.mark.parametrize(
    ("plugin_type", "params", "key", "message"),
    [
        ("metrics-data-source", {"scheme": "ftp"}, "scheme", "unsupported scheme 'ftp'"),
        ("metrics-data-source", {"scheme": ""}, "scheme", "unsupported scheme"),
        ("models-data-source", {"scheme": "HTTP"}, "scheme", "unsupported scheme"),
        ("metrics-data-source", {"port": 0}, "port", "invalid port 0: must be between 1 and 65535"),
        ("metrics-data-source", {"port": 65536}, "port", "between 1 and 65535"),
        ("metrics-data-source", {"port": "9400"}, "port", "expected an integer port"),
        ("metrics-data-source", {"port": True}, "port", "expected an integer port"),
        ("metrics-data-source", {"interval": "-1s"}, "interval", "interval must be non-negative"),
        ("metrics-data-source", {"interval": "1 s"}, "interval", "invalid interval"),
        ("metrics-data-source", {"interval": 5}, "interval", "expected a string"),
        ("models-data-source", {"interval": "soon"}, "interval", "invalid interval"),
        ("metrics-data-source", {"insecureSkipVerify": "false"}, "insecureSkipVerify", "true or false"),
        ("metrics-data-source", {"caCertPath": 1}, "caCertPath", "expected a string"),
        ("models-data-source", {"port": 8000}, "port", "unknown parameter"),  # models has no port upstream
        ("metrics-data-source", {"bogus": 1}, "bogus", "unknown parameter"),
        (
            "core-metrics-extractor",
            {"defaultEngine": "tgi"},
            "defaultEngine",
            "'tgi' not found in engineConfigs",
        ),
        ("core-metrics-extractor", {"engineLabelKey": 3}, "engineLabelKey", "expected a string"),
        ("core-metrics-extractor", {"customMetrics": []}, "customMetrics", "unknown parameter"),  # per engine
    ],
)
def test_parameter_errors_name_the_parameter(plugin_type: str, params: Any, key: str, message: str) -> None:
    with pytest.raises(DataLayerConfigError) as err:
        _params(plugin_type, params)
    assert err.value.location == f'({plugin_type} "p"): parameters.{key}'
    assert message in err.value.message


@pytest.mark.parametrize(
    ("interval", "base", "effective"),
    [
        (None, 0.05, 0.05),  # omitted: every base tick
        (0.0, 0.05, 0.05),  # "0s": every base tick
        (1.0, 0.05, 1.0),
        (0.07, 0.05, 0.05),  # rounded to the nearest multiple
        (0.08, 0.05, 0.1),
        (0.01, 0.05, 0.05),  # at least one tick
        (5.0, 2.0, 6.0),  # 2.5 ticks round half away from zero, as Go's math.Round
    ],
)
def test_intervals_round_to_base_ticks(interval: float | None, base: float, effective: float) -> None:
    assert tick_interval(interval, base) == pytest.approx(effective)


def test_source_intervals_come_from_parameters() -> None:
    plugins = [
        {"name": "m", "type": "metrics-data-source", "parameters": {"interval": "1s", "port": 9400}},
        {
            "name": "v",
            "type": "models-data-source",
            "parameters": {"interval": "0s", "insecureSkipVerify": False},
        },
        {"type": "core-metrics-extractor"},
    ]
    section = {
        "sources": [
            {"pluginRef": "m", "extractors": [{"pluginRef": "core-metrics-extractor"}]},
            {"pluginRef": "v"},
        ]
    }
    metrics, models = validate_datalayer_section(section, plugins).build_sources()
    assert isinstance(metrics, MetricsDataSource) and isinstance(models, ModelsDataSource)
    assert metrics.interval(0.05) == pytest.approx(1.0) and models.interval(0.05) == 0.05
    assert metrics.connection.port == 9400 and models.connection.insecure_skip_verify is False
    (default_models,) = validate_datalayer_section(
        {"sources": [{"pluginRef": "models-data-source"}]}
    ).sources[1:]
    assert default_models.plugin.parameters["interval"] is None  # pyepp's 5 s default applies at build


_SGLANG = "sglang:num_queue_reqs 4\nsglang:num_running_reqs 2\nsglang:token_usage 0.5\n"


def _extractor(params: Any) -> CoreMetricsExtractor:
    plugins = [
        {"name": "m", "type": "metrics-data-source"},
        {"name": "c", "type": "core-metrics-extractor", "parameters": params},
    ]
    section = {"sources": [{"pluginRef": "m", "extractors": [{"pluginRef": "c"}]}]}
    (metrics,) = validate_datalayer_section(section, plugins).build_sources()
    assert isinstance(metrics, MetricsDataSource)
    (extractor,) = metrics.extractors
    assert isinstance(extractor, CoreMetricsExtractor)
    return extractor


def test_default_engine_applies_to_endpoints_without_an_engine_label() -> None:
    # GIE charts: `defaultEngine: {{ modelServerType }}` when the pool is not vLLM.
    extractor = _extractor({"defaultEngine": "sglang"})
    m = extractor.extract(LazySamples(_SGLANG), make_spec("10.0.0.1:8000"), 1.0).metrics
    assert m is not None and (m.waiting_queue_size, m.running_requests, m.kv_cache_usage) == (4, 2, 0.5)
    labelled = make_spec("10.0.0.1:8000", labels={"llm-d.ai/engine-type": "vllm"})
    m = extractor.extract(LazySamples(vllm_text(9)), labelled, 1.0).metrics
    assert m is not None and m.waiting_queue_size == 9
    unknown = make_spec("10.0.0.1:8000", labels={"inference.networking.k8s.io/engine-type": "tgi"})
    assert extractor.mapping_for(unknown).name == "sglang"  # no mapping: the default engine's


def test_engine_label_key_and_gie_fallback() -> None:
    extractor = _extractor({"engineLabelKey": "example.com/engine"})
    custom = make_spec(
        "a:1", labels={"example.com/engine": "sglang", "inference.networking.k8s.io/engine-type": "vllm"}
    )
    assert extractor.mapping_for(custom).name == "sglang"
    gie = make_spec("a:1", labels={"inference.networking.k8s.io/engine-type": "trtllm-serve"})
    assert extractor.mapping_for(gie).name == "trtllm-serve"  # upstream falls back to GIE's label
    default = _extractor(None)
    assert default.engine_label_key == "llm-d.ai/engine-type" and default.default_engine == "vllm"
    llmd = make_spec("a:1", labels={"llm-d.ai/engine-type": "triton"})
    assert default.mapping_for(llmd).name == "triton"


def test_custom_metrics_become_endpoint_attributes() -> None:
    # llm-d-router metrics_extraction_from_config_test.go: TestMetricsExtractionCustom*FromConfig.
    extractor = _extractor(
        {
            "engineConfigs": [
                {
                    "name": "vllm",  # replaces the built-in: only the custom metrics are read
                    "customMetrics": [
                        {"attributeKey": "custom.queue_depth", "metricSpec": "custom_queue_depth{tier=gold}"},
                        {"attributeKey": "custom.total_requests", "metricSpec": "custom_total_requests"},
                    ],
                }
            ]
        }
    )
    text = (
        "# TYPE custom_total_requests counter\ncustom_total_requests 12\n"
        'custom_queue_depth{tier="silver"} 1\ncustom_queue_depth{tier="gold"} 42.5\n'
    )
    update = extractor.extract(
        LazySamples(text), make_spec("a:1", labels={"llm-d.ai/engine-type": "vllm"}), 1.0
    )
    assert update.attributes == {"custom.queue_depth": 42.5, "custom.total_requests": 12.0}
    assert update.metrics is not None and update.metrics.waiting_queue_size == 0
    missing = extractor.extract(LazySamples("other 1\n"), make_spec("a:1"), 1.0)
    assert missing.attributes is None  # the previous values stay on the record


@pytest.mark.parametrize(
    ("custom", "location", "message"),
    [
        ([{"metricSpec": "q"}], "[0].attributeKey", "attributeKey cannot be empty"),
        ([{"attributeKey": "k"}], "[0].metricSpec", "spec cannot be empty"),
        ([{"attributeKey": "k", "metricSpec": "9q"}], "[0].metricSpec", "invalid metric name"),
        (
            [{"attributeKey": "k", "metricSpec": "a"}, {"attributeKey": "k", "metricSpec": "b"}],
            "[1].attributeKey",
            "duplicated",
        ),
        ([{"attributeKey": "k", "metricSpec": "a", "type": "gauge"}], "[0].type", "unknown key"),
        ({"attributeKey": "k"}, "", "expected a list"),
    ],
)
def test_custom_metric_errors(custom: Any, location: str, message: str) -> None:
    with pytest.raises(DataLayerConfigError) as err:
        _params("core-metrics-extractor", {"engineConfigs": [{"name": "custom", "customMetrics": custom}]})
    where = '(core-metrics-extractor "p"): parameters.engineConfigs[0].customMetrics'
    assert err.value.location == where + location
    assert message in err.value.message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("1s", 1.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("300us", 3e-4),
        ("-2ms", -0.002),
        ("+5s", 5.0),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "s", "1 s", "--1s", "1d", "1s2"])
def test_go_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        go_duration(text)


def test_a_metrics_interval_longer_than_the_staleness_threshold_is_warned_about() -> None:
    slow = MetricsDataSource("m", interval=5.0)
    with capture_logs() as logs:
        DataLayer(
            StaticDiscovery.from_addresses(["127.0.0.1:1"]),
            http=RawHttpClient(),
            options=DataLayerOptions(staleness_threshold=2.0),
            sources=[slow],
        )
    assert [e["interval_s"] for e in logs if "staleness threshold" in e["event"]] == [5.0]


def test_record_engine_follows_the_llmd_label_first() -> None:
    both = {"llm-d.ai/engine-type": "sglang", "inference.networking.k8s.io/engine-type": "vllm"}
    assert make_spec("a:1", labels=both).engine == "sglang"
    assert (
        make_spec("a:1", labels={"inference.networking.k8s.io/engine-type": "trtllm-serve"}).engine
        == "trtllm-serve"
    )
    assert make_spec("a:1").engine == "vllm"
