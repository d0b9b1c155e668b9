"""``destination-endpoint-served-verifier`` (GIE's conformance plugin) and the provider fan-out.

The table is GIE's ``TestDestinationEndpointServedVerifier_ResponseReceived``; GIE's two missing-metadata
cases collapse into one message here (the plugin module docstring says why).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from scheduler.config import load_config_text
from scheduler.plugins.base import PluginBase
from scheduler.plugins.filters.header_testing import TEST_SELECTION_HEADER
from scheduler.plugins.response.served_verifier import (
    MISSING_SERVED,
    SERVED_RESULT_HEADER,
    DestinationEndpointServedVerifier,
)
from scheduler.plugins.scorers.session_affinity import encode_token
from scheduler.scheduler import Scheduler
from scheduler.types import Endpoint, LLMRequest, SchedulingResult

# GIE's conformance/resources/base.yaml, ConfigMap plugins-config (last commit with pkg/epp)
CONFORMANCE_CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: header-based-testing-filter
- type: destination-endpoint-served-verifier
schedulingProfiles:
- name: conformance-profile
  plugins:
  - pluginRef: header-based-testing-filter
"""

EPS = [Endpoint("10.0.0.1:8080"), Endpoint("10.0.0.2:8080"), Endpoint("10.0.0.3:8080")]


def _request(headers: Mapping[str, str]) -> LLMRequest:
    return LLMRequest(request_id="r", model="m", target_model="m", headers=dict(headers))


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        ("10.0.0.1:8080", "10.0.0.1:8080"),  # success - endpoint is correctly reported
        (None, MISSING_SERVED),  # missing lb metadata / missing served key / nil metadata
        ("", MISSING_SERVED),
    ],
)
def test_reports_the_served_endpoint(served: str | None, expected: str) -> None:
    plugin = DestinationEndpointServedVerifier("test-verifier")
    result = SchedulingResult(endpoints=(), profile_results={}, primary_profile="")
    assert plugin.response_headers(_request({}), result, served) == {SERVED_RESULT_HEADER: expected}


def test_conformance_config_pins_the_endpoint_and_reports_what_served() -> None:
    scheduler = load_config_text(CONFORMANCE_CONFIG).build_scheduler()
    assert scheduler.has_response_header_providers
    req = _request({TEST_SELECTION_HEADER: "10.0.0.2:8080"})
    result = scheduler.schedule(req, EPS)
    assert [e.address for e in result.endpoints] == ["10.0.0.2:8080"]
    headers = scheduler.added_response_headers(req, result, "10.0.0.2:8080")
    assert headers == {SERVED_RESULT_HEADER: "10.0.0.2:8080"}
    assert scheduler.added_response_headers(req, result, None) == {SERVED_RESULT_HEADER: MISSING_SERVED}


def test_conformance_config_rejects_parameters() -> None:
    text = CONFORMANCE_CONFIG.replace(
        "- type: destination-endpoint-served-verifier",
        "- type: destination-endpoint-served-verifier\n  parameters: {x: 1}",
    )
    with pytest.raises(Exception, match=r"parameters\.x"):
        load_config_text(text)


class _Raising(PluginBase):
    plugin_type = "raising-provider"

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, served: str | None
    ) -> Mapping[str, str]:
        raise RuntimeError("provider exploded")


def test_providers_merge_in_order_and_a_failing_one_adds_nothing() -> None:
    text = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: session-affinity-scorer
- type: destination-endpoint-served-verifier
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: session-affinity-scorer
  - pluginRef: max-score-picker
"""
    scheduler = load_config_text(text).build_scheduler()
    req = _request({})
    result = scheduler.schedule(req, EPS[:1])
    assert scheduler.added_response_headers(req, result, "10.0.0.1:8080") == {
        "x-session-token": encode_token("10.0.0.1:8080"),
        SERVED_RESULT_HEADER: "10.0.0.1:8080",
    }
    with_raising = Scheduler(scheduler.profiles, scheduler.handler, [_Raising("boom"), *scheduler.plugins])
    assert SERVED_RESULT_HEADER in with_raising.added_response_headers(req, result, "10.0.0.1:8080")
