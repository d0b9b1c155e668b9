"""``header-based-testing-filter`` (tests only): keep the endpoints named by a request header.

Header ``test-epp-endpoint-selection`` holds a comma-separated list of ``ip:port`` (or bare ``ip``,
which matches every port of that IP); whitespace around entries is ignored; IPv6 as ``[ip]:port``, a
bare IPv6 with or without brackets. Endpoints listed are kept, in endpoint order (GIE returns header
order, deduplicated by IP, and a bare IP keeps one of its ports; the picker breaks ties at random, so
only the set matters). As in GIE, a request without the header (or with an empty one) keeps
nothing, so the profile fails: the filter is meant for tests that pin requests to endpoints and
must never be configured for production traffic. Parameters: none. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.types import EndpointView, LLMRequest

__all__ = ["TEST_SELECTION_HEADER", "HeaderBasedTestingFilter", "factory", "selected"]

TEST_SELECTION_HEADER = "test-epp-endpoint-selection"


def _bare(entry: str) -> str:
    """``entry`` without IPv6 brackets when it is a bare IP (``[fd00::1]`` -> ``fd00::1``)."""
    return entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry


def selected(header: str | None) -> frozenset[str]:
    """The addresses / bare IPs listed in the header value (bare IPv6 without brackets)."""
    if not header:
        return frozenset()
    return frozenset(_bare(part.strip()) for part in header.split(",") if part.strip())


def _ip(address: str) -> str:
    """The host of ``ip:port`` without IPv6 brackets (``[fd00::1]:8000`` -> ``fd00::1``)."""
    host, sep, _ = address.rpartition(":")
    return _bare(host) if sep else address


class HeaderBasedTestingFilter(PluginBase):
    plugin_type = "header-based-testing-filter"

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        wanted = selected(request.headers.get(TEST_SELECTION_HEADER))
        if not wanted:
            return []
        return [e for e in endpoints if e.address in wanted or _ip(e.address) in wanted]

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        if not request.headers.get(TEST_SELECTION_HEADER):
            return f"header {TEST_SELECTION_HEADER} missing"
        return f"not listed in header {TEST_SELECTION_HEADER}"


factory = factory_without_params(
    HeaderBasedTestingFilter.plugin_type, lambda name, handle: HeaderBasedTestingFilter(name)
)
