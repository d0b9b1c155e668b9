"""request-attribute-reporter: CEL over the response usage, reported as dynamic metadata.

Tables ported from llm-d-router (commit ebab68792),
pkg/epp/framework/plugins/requestcontrol/requestattributereporter/plugin_test.go (TestNew,
TestResponseBody), plus pyepp's compile-time checks (undeclared variables and functions, as cel-go's
type checker reports them).
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.plugins.response.attribute_reporter import RequestAttributeReporter, factory, usage_struct
from scheduler.types import LLMRequest, SchedulingResult, Usage

REQ = LLMRequest(request_id="r", model="m", target_model="m")
RESULT = SchedulingResult(endpoints=(), profile_results={}, primary_profile="")


def attrs(expression: str = "usage.prompt_tokens", condition: str = "", **key: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": {"name": "test-attribute", **key}, "expression": expression}
    if condition:
        entry["condition"] = condition
    return {"attributes": [entry]}


def build(parameters: Any) -> RequestAttributeReporter:
    plugin = factory("reporter", parameters, PluginHandle())
    assert isinstance(plugin, RequestAttributeReporter)
    return plugin


@pytest.mark.parametrize(
    ("parameters", "namespace", "error"),
    [
        (attrs(), "envoy.lb", None),  # valid config with default namespace
        (attrs(namespace="custom-ns"), "custom-ns", None),
        ({"attributes": [{"key": {}, "expression": "usage.prompt_tokens"}]}, "", "name cannot be empty"),
        ({"attributes": [{"key": {"name": "a"}}]}, "", "expression cannot be empty"),
        (attrs("usage.prompt_tokens + -"), "", "failed to compile expression"),
        (attrs(condition="usage.prompt_tokens > "), "", "failed to compile condition"),
        ({"attributes": []}, "", "exactly one entry"),
        ({"attributes": [attrs()["attributes"][0]] * 2}, "", "exactly one entry"),
        ({}, "", "exactly one entry"),
        (attrs("request.size"), "", "undeclared reference to 'request'"),
        (attrs("nosuchfn(usage.prompt_tokens)"), "", "nosuchfn"),
        (
            {"attributes": [{"key": {"name": "a"}, "expression": "1", "extra": 1}]},
            "",
            "attributes\\[0\\].extra",
        ),
        ({**attrs(), "other": 1}, "", "parameters.other"),
    ],
)
def test_new(parameters: Any, namespace: str, error: str | None) -> None:
    if error is None:
        assert build(parameters).spec.namespace == namespace
    else:
        with pytest.raises(ConfigError, match=error):
            build(parameters)


TOTAL_GUARDED = (
    "(has(usage.prompt_tokens) ? usage.prompt_tokens : 0) + "
    "(has(usage.completion_tokens) ? usage.completion_tokens : 0)"
)


@pytest.mark.parametrize(
    ("parameters", "usage", "want"),
    [
        (attrs("usage.prompt_tokens"), Usage(prompt_tokens=10), {"envoy.lb": {"test-attribute": 10}}),
        (attrs(condition="has(usage.prompt_tokens)"), Usage(), {}),  # zero value: skipped
        (attrs(condition="usage.completion_tokens > 0.0"), Usage(prompt_tokens=10), {}),  # condition not met
        (attrs(condition="usage.prompt_tokens"), Usage(prompt_tokens=10), {}),  # non-boolean condition
        (attrs("'not a number'"), Usage(prompt_tokens=10), {}),
        (attrs("usage.non_existent_field"), Usage(prompt_tokens=10), {}),  # runtime error
        (attrs(TOTAL_GUARDED), Usage(), {}),  # zero: skipped
        (attrs(TOTAL_GUARDED), Usage(completion_tokens=25), {"envoy.lb": {"test-attribute": 25}}),
        (attrs("usage.prompt_tokens - 11.0"), Usage(prompt_tokens=10), {}),  # -1: skipped as upstream
        (attrs("usage.prompt_tokens / 4.0"), Usage(prompt_tokens=10), {"envoy.lb": {"test-attribute": 2}}),
        (
            attrs("usage.prompt_tokens_details.cached_tokens", "has(usage.prompt_tokens_details)"),
            Usage(prompt_tokens=10, cached_tokens=4),
            {"envoy.lb": {"test-attribute": 4}},
        ),
        (
            attrs("usage.prompt_tokens + usage.completion_tokens", namespace="custom-ns"),
            Usage(3, 4, 7),
            {"custom-ns": {"test-attribute": 7}},
        ),
    ],
)
def test_response_body(parameters: Any, usage: Usage, want: dict[str, dict[str, float]]) -> None:
    assert build(parameters).response_metadata(REQ, RESULT, usage) == want


def test_usage_is_a_struct_of_doubles() -> None:
    assert usage_struct(Usage(1, 2, 3)) == {
        "prompt_tokens": 1.0,
        "completion_tokens": 2.0,
        "total_tokens": 3.0,
    }
    assert usage_struct(Usage(1, 2, 3, 1))["prompt_tokens_details"] == {"cached_tokens": 1.0}
    # CEL does not mix doubles and ints, as with upstream's Struct: an int literal fails at evaluation.
    assert build(attrs("usage.prompt_tokens * 2")).response_metadata(REQ, RESULT, Usage(5)) == {}
