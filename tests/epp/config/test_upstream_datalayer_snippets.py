"""Trimmed copies of real upstream EndpointPickerConfigs that exercise the data layer's parameters and
featureGates: each loads, and the parameters have their upstream effect.

Every snippet names its repository, path and commit (GIE at its last commit with pkg/epp, 80e21c3c;
llm-d-router and llm-d-inference-scheduler at the mirrored HEAD). Helm templates are rendered by hand
with the chart defaults (``.Values.*.metricsDataSource`` = scheme "http", path "/metrics",
insecureSkipVerify true) or the value named in the test.
"""

from __future__ import annotations

import pytest

from datalayer.connection import Connection
from datalayer.sources import CoreMetricsExtractor, MetricsDataSource
from epp.config.feature_gates import DATA_LAYER, FLOW_CONTROL, LEGACY_METRICS
from epp.config.sections import load_picker_config

# kubernetes-sigs/gateway-api-inference-extension@80e21c3c config/charts/epplib/templates/_config.yaml
# (inferencepool chart defaults; modelServerType sglang renders the defaultEngine parameter), and
# llm-d/llm-d-router@HEAD config/charts/routerlib/templates/_config.yaml (the same block).
CHART_DEFAULT = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
  parameters:
    scheme: "http"
    path: "/metrics"
    insecureSkipVerify: true
- type: core-metrics-extractor
  parameters:
    defaultEngine: "sglang"
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"""

# kubernetes-sigs/gateway-api-inference-extension@80e21c3c site-src/implementations/model-servers.md
# ("Change Default Engine" and "Custom Engine Configuration").
MODEL_SERVERS_DEFAULT_ENGINE = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates:
- dataLayer
plugins:
- name: core-metrics-extractor
  type: core-metrics-extractor
  parameters:
    defaultEngine: "sglang"  # Pods without engine label will use SGLang metrics
"""
MODEL_SERVERS_CUSTOM_ENGINE = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates:
- dataLayer
plugins:
- name: core-metrics-extractor
  type: core-metrics-extractor
  parameters:
    engineLabelKey: "inference.networking.k8s.io/engine-type"
    defaultEngine: "vllm"
    engineConfigs:
    - name: vllm
      queuedRequestsSpec: "vllm:num_requests_waiting"
      runningRequestsSpec: "vllm:num_requests_running"
      kvUsageSpec: "vllm:kv_cache_usage_perc"
      loraSpec: "vllm:lora_requests_info"
      cacheInfoSpec: "vllm:cache_config_info"
    - name: sglang
      queuedRequestsSpec: "sglang:num_queue_reqs"
      runningRequestsSpec: "sglang:num_running_reqs"
      kvUsageSpec: "sglang:token_usage"
    - name: triton
      queuedRequestsSpec: "nv_trt_llm_request_metrics{request_type=waiting}"
      kvUsageSpec: "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}"
"""

# kubernetes-sigs/gateway-api-inference-extension@80e21c3c test/integration/epp/testdata/default-config.yaml
# (also llm-d/llm-d-inference-scheduler@HEAD, same path); the openai-parser entry is left out here.
GIE_LEGACY_METRICS = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
  - type: prefix-cache-scorer
  - type: lora-affinity-scorer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
      - pluginRef: kv-cache-utilization-scorer
      - pluginRef: prefix-cache-scorer
      - pluginRef: lora-affinity-scorer
featureGates:
  - enableLegacyMetrics
"""

# llm-d/llm-d-router@HEAD pkg/epp/config/loader/testdata_test.go successFlowControlDisabledNoSectionText.
LLMD_FLOW_CONTROL_OFF = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: maxScore
  type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: maxScore
featureGates: ["flowControl=false"]
"""

# llm-d/llm-d-router@HEAD pkg/epp/framework/plugins/datalayer/source/metrics/README.md (Example
# Configuration), with the dataLayer wiring of docs/architecture.md's defaults spelled out.
LLMD_METRICS_README = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: metrics-data-source
  parameters:
    scheme: "http"
    path: "/metrics"
    insecureSkipVerify: true
    interval: "1s"
- type: queue-scorer
dataLayer:
  sources: []
"""


def _metrics(text: str) -> tuple[MetricsDataSource, CoreMetricsExtractor]:
    loaded = load_picker_config(None, text)
    sources = loaded.data_layer.build_sources()
    metrics = next(s for s in sources if isinstance(s, MetricsDataSource))
    (extractor,) = metrics.extractors
    assert isinstance(extractor, CoreMetricsExtractor)
    return metrics, extractor


def test_chart_default_config_loads_with_its_parameters() -> None:
    metrics, extractor = _metrics(CHART_DEFAULT)
    assert metrics.path == "/metrics" and metrics.connection.resolve(Connection()) == Connection("http")
    assert extractor.default_engine == "sglang"


@pytest.mark.parametrize("text", [MODEL_SERVERS_DEFAULT_ENGINE, MODEL_SERVERS_CUSTOM_ENGINE])
def test_gie_model_server_guide_configs_load(text: str) -> None:
    loaded = load_picker_config(None, text)
    assert loaded.feature_gates.enabled(DATA_LAYER)
    _, extractor = _metrics(text)  # no dataLayer section: the defaults use the declared extractor
    assert extractor.default_engine in {"sglang", "vllm"}


def test_custom_engine_guide_replaces_builtins_entirely() -> None:
    _, extractor = _metrics(MODEL_SERVERS_CUSTOM_ENGINE)
    sglang, triton = extractor.engines["sglang"], extractor.engines["triton"]
    assert sglang.cache_info == ()  # left out: disabled (full replacement)
    assert triton.running == () and str(triton.kv_usage[0]).startswith("nv_trt_llm_kv_cache_block_metrics")


def test_gie_legacy_metrics_config_loads_and_uses_the_flags() -> None:
    loaded = load_picker_config(None, GIE_LEGACY_METRICS)
    assert loaded.feature_gates.enabled(LEGACY_METRICS)
    (metrics,) = loaded.data_layer.build_sources(metrics_path="/from-flag")
    assert isinstance(metrics, MetricsDataSource) and metrics.path == "/from-flag"


def test_llmd_flow_control_off_loads() -> None:
    assert not load_picker_config(None, LLMD_FLOW_CONTROL_OFF).feature_gates.enabled(FLOW_CONTROL)


def test_llmd_empty_sources_inject_the_declared_metrics_source() -> None:
    metrics, _ = _metrics(LLMD_METRICS_README)
    assert metrics.interval(0.05) == pytest.approx(1.0)
