"""Engine mappings: spec parsing, every built-in engine, engineConfigs overrides, flag overrides."""

from __future__ import annotations

import pytest
from dl_fakes import vllm_text

from datalayer.engines import (
    BUILTIN_ENGINES,
    EngineConfigError,
    MetricSpec,
    apply_metric_overrides,
    parse_engine_configs,
    parse_spec,
)
from datalayer.extract import ExtractionError, extract_metrics
from datalayer.promtext import LazySamples, parse_exposition
from datalayer.records import EndpointMetrics


def _extract(text: str, engine: str = "vllm", engines: object = None) -> EndpointMetrics:
    mapping = (engines or BUILTIN_ENGINES)[engine]  # type: ignore[index]
    lazy = extract_metrics(LazySamples(text), mapping, now=7.0)
    assert lazy == extract_metrics(parse_exposition(text, mapping.wanted_names()), mapping, now=7.0)
    return lazy


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("a", MetricSpec("a")),
        ("vllm:x{a=b}", MetricSpec("vllm:x", (("a", "b"),))),
        ('n{ a = "b" , c="d",}', MetricSpec("n", (("a", "b"), ("c", "d")))),
    ],
)
def test_parse_spec(text: str, spec: MetricSpec) -> None:
    assert parse_spec(text) == spec


@pytest.mark.parametrize("text", ["", "9x", "a{b}", "a{b=c", 'a{b="c"d"}', "a b"])
def test_parse_spec_rejects(text: str) -> None:
    with pytest.raises(EngineConfigError):
        parse_spec(text, "loc")


def _two_models(text: str) -> str:
    first = 'vllm:num_requests_waiting{model_name="m"} 1.0\n'
    return text.replace(first, first + 'vllm:num_requests_waiting{model_name="n"} 5\n')


_SGLANG = """
sglang:num_queue_reqs{model_name="m"} 4
sglang:num_running_reqs{model_name="m"} 9
sglang:token_usage{model_name="m"} 0.25
sglang:cache_config_info{page_size="32",num_pages="500"} 1
"""
_TRTLLM = """
trtllm_num_requests_waiting 2
trtllm_num_requests_running 3
trtllm_kv_cache_utilization 0.5
trtllm_kv_cache_tokens_per_block 64
trtllm_kv_cache_max_blocks 2000
"""
_TRITON = """
nv_trt_llm_request_metrics{model="ensemble",request_type="waiting",version="1"} 5
nv_trt_llm_request_metrics{model="ensemble",request_type="scheduled",version="1"} 6
nv_trt_llm_request_metrics{model="ensemble",request_type="context",version="1"} 99
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="ensemble"} 0.75
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="ensemble"} 128
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="ensemble"} 300
"""


@pytest.mark.parametrize(
    ("engine", "text", "expected"),
    [
        ("vllm", vllm_text(1, 2, 0.3), (1, 2, 0.3, 16, 1024)),
        ("vllm", vllm_text(1, 2, 0.3, kv_name="vllm:gpu_cache_usage_perc"), (1, 2, 0.3, 16, 1024)),
        ("vllm", vllm_text(1, 2, 1.2, block_size=None), (1, 2, 1.0, None, None)),
        ("vllm", _two_models(vllm_text(1, 2, 0.3)), (6, 2, 0.3, 16, 1024)),
        ("sglang", _SGLANG, (4, 9, 0.25, 32, 500)),
        ("trtllm-serve", _TRTLLM, (2, 3, 0.5, 64, 2000)),
        ("triton-tensorrt-llm", _TRITON, (5, 6, 0.75, 128, 300)),
    ],
)
def test_builtin_engines(engine: str, text: str, expected: tuple[object, ...]) -> None:
    m = _extract(text, engine)
    assert (
        m.waiting_queue_size,
        m.running_requests,
        m.kv_cache_usage,
        m.block_size,
        m.num_gpu_blocks,
    ) == expected
    assert m.updated_at == 7.0


def test_vllm_lora_uses_newest_series() -> None:
    text = vllm_text(lora=[(100.0, 2, "old", ""), (200.0, 4, "a, b", "c"), (150.0, 3, "mid", "")])
    m = _extract(text)
    assert (m.max_lora, m.running_adapters, m.waiting_adapters) == (4, {"a", "b"}, {"c"})
    assert _extract(vllm_text()).running_adapters == frozenset()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            vllm_text(1, 2, 0.3).replace("vllm:num_requests_running", "other"),
            "vllm:num_requests_running missing",
        ),
        (vllm_text(1, 2, float("nan")), "impossible value"),
        (
            vllm_text(1, 2, 0.3, lora=[(1.0, 0, "", "")]).replace('max_lora="0"', 'max_lora="x"'),
            "not a number",
        ),
    ],
)
def test_extraction_errors(text: str, message: str) -> None:
    with pytest.raises(ExtractionError, match=message):
        _extract(text)


def test_engine_configs_replace_a_builtin_entirely_and_disable() -> None:
    # GIE config-text.md: "engineConfigs is full-replacement per engine name"; a field left out is off.
    engines = parse_engine_configs(
        [
            {
                "name": "vllm",
                "queuedRequestsSpec": "my_queue{pool=a}",
                "runningRequestsSpec": "r",
                "loraSpec": "",
            },
            {"name": "custom", "runningRequestsSpec": ["r1", "r2"], "kvUsageSpec": "kv"},
        ]
    )
    assert engines["vllm"].waiting == (MetricSpec("my_queue", (("pool", "a"),)),)
    assert engines["vllm"].running == (MetricSpec("r"),)
    assert engines["vllm"].kv_usage == () and engines["vllm"].lora == () and engines["vllm"].cache_info == ()
    assert engines["sglang"] == BUILTIN_ENGINES["sglang"]
    text = 'my_queue{pool="b"} 100\nmy_queue{pool="a"} 3\nr 1\n'
    m = _extract(text, "vllm", engines)
    assert (m.waiting_queue_size, m.running_requests, m.kv_cache_usage) == (3, 1, 0.0)
    custom = _extract("r2 4\nkv 0.5\n", "custom", engines)
    assert (custom.waiting_queue_size, custom.running_requests, custom.kv_cache_usage) == (0, 4, 0.5)


def test_engine_configs_take_upstream_cache_keys() -> None:
    (engine,) = [
        parse_engine_configs(
            [
                {
                    "name": "e",
                    "queuedRequestsSpec": "q",
                    "cacheInfoSpec": "info",
                    "cacheBlockSizeLabelName": "bs",
                    "cacheNumBlocksLabelName": "",  # empty: the default label name
                }
            ]
        )["e"]
    ]
    assert (engine.block_size_label, engine.num_blocks_label) == ("bs", "num_gpu_blocks")
    m = _extract('q 1\ninfo{bs="32",num_gpu_blocks="10"} 1\n', "e", {"e": engine})
    assert (m.block_size, m.num_gpu_blocks) == (32, 10)
    gauges = parse_engine_configs(
        [{"name": "g", "cacheBlockSizeSpec": "tokens_per_block", "cacheNumBlocksSpec": "max_blocks"}]
    )["g"]
    m = _extract("tokens_per_block 64\nmax_blocks 7\n", "g", {"g": gauges})
    assert (m.block_size, m.num_gpu_blocks) == (64, 7)


def test_triton_builtin_reads_queue_and_running_only() -> None:
    m = _extract("nv_inference_pending_request_count 4\nnv_inference_exec_count 9\n", "triton")
    assert (m.waiting_queue_size, m.running_requests, m.kv_cache_usage) == (4, 9, 0.0)


@pytest.mark.parametrize(
    ("entries", "location"),
    [
        ("vllm", "engineConfigs"),
        ([{"queuedRequestsSpec": "x"}], "engineConfigs[0].name"),
        ([{"name": "vllm", "bogus": 1}], "engineConfigs[0].bogus"),
        ([{"name": "vllm", "kvUsageSpec": 3}], "engineConfigs[0].kvUsageSpec"),
        ([{"name": "vllm", "kvUsageSpec": ["ok", "9bad"]}], "engineConfigs[0].kvUsageSpec[1]"),
        ([{"name": "vllm", "cacheBlockSizeLabelName": "a-b"}], "engineConfigs[0].cacheBlockSizeLabelName"),
        ([{"name": "vllm", "blockSizeSpec": "x"}], "engineConfigs[0].blockSizeSpec"),
        ([{"name": "default"}], "engineConfigs[0].name"),
        ([{"name": ""}], "engineConfigs[0].name"),
        ([{"name": "x"}, {"name": "x"}], "engineConfigs[1].name"),
    ],
)
def test_engine_config_errors_name_the_field(entries: object, location: str) -> None:
    with pytest.raises(EngineConfigError) as err:
        parse_engine_configs(entries)
    assert err.value.location == location


def test_flag_overrides() -> None:
    engines = apply_metric_overrides(BUILTIN_ENGINES, [("waiting", "q{x=1}"), ("kv_usage", "")])
    assert engines["vllm"].waiting == (MetricSpec("q", (("x", "1"),)),) and engines["vllm"].kv_usage == ()
    assert apply_metric_overrides(BUILTIN_ENGINES, []) is BUILTIN_ENGINES
    with pytest.raises(EngineConfigError, match="unknown metric key"):
        apply_metric_overrides(BUILTIN_ENGINES, [("queue", "q")])
