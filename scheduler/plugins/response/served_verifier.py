"""``destination-endpoint-served-verifier`` (conformance tests only): report the endpoint that served.

GIE's conformance suite deploys it to check that the gateway sent each request where the picker said.
When the model server's response headers arrive, the plugin adds response header
``x-conformance-test-served-endpoint`` to the response sent to the client, with the value the proxy
reported in its dynamic metadata ``envoy.lb`` / ``x-gateway-destination-endpoint-served`` (the
``served`` argument of :meth:`~scheduler.interfaces.ResponseHeadersProvider.response_headers`), or
``fail: missing destination endpoint served metadata`` when the proxy reported none. The test client
compares the value with the endpoint it pinned the request to (``header-based-testing-filter``).

Differs from GIE in one detail: GIE words the failure ``fail: missing envoy lb metadata`` when the
whole ``envoy.lb`` namespace is absent; the EPP core here passes only the served address, so both
cases read as above. Parameters: none. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.types import LLMRequest, SchedulingResult

__all__ = ["MISSING_SERVED", "SERVED_RESULT_HEADER", "DestinationEndpointServedVerifier", "factory"]

SERVED_RESULT_HEADER = "x-conformance-test-served-endpoint"
MISSING_SERVED = "fail: missing destination endpoint served metadata"


class DestinationEndpointServedVerifier(PluginBase):
    plugin_type = "destination-endpoint-served-verifier"

    def response_headers(
        self, request: LLMRequest, result: SchedulingResult, served: str | None
    ) -> Mapping[str, str]:
        return {SERVED_RESULT_HEADER: served or MISSING_SERVED}


factory = factory_without_params(
    DestinationEndpointServedVerifier.plugin_type,
    lambda name, handle: DestinationEndpointServedVerifier(name),
)
