"""``header-profile-handler`` (llm-d): run the one profile named by a request header.

For a caller that already knows which stage a call is for (e.g. a coordinator scheduling the
encode, prefill and decode calls of one request separately):

* exactly one routed profile configured: it always runs, header or not;
* otherwise the profile named by header ``headerName`` (value trimmed, matched case-sensitively
  against profile names) runs alone; a missing or blank header runs ``defaultProfile``;
* a header naming an unconfigured profile, or a missing header when ``defaultProfile`` is not
  configured, runs nothing: the request fails with NoEndpointError giving the reason.

Shadow profiles run alongside (observation only). No request headers are set.

Parameters (llm-d's): ``headerName`` (default ``EPP-Profile``; trimmed and lower-cased, since
request header names are lower-case), ``defaultProfile`` (default ``decode``; trimmed; blank means
the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.errors import NoEndpointError
from scheduler.interfaces import Handle
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.profile import SchedulerProfile
from scheduler.types import LLMRequest, ProfileResult, SchedulingResult

__all__ = ["HeaderProfileHandler", "HeaderProfileParams", "factory"]


@dataclass(frozen=True, slots=True)
class HeaderProfileParams:
    header_name: str = param("EPP-Profile")
    default_profile: str = param("decode")


class HeaderProfileHandler(PluginBase):
    plugin_type = "header-profile-handler"

    def __init__(self, name: str, params: HeaderProfileParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or HeaderProfileParams()
        self.header = params.header_name.strip().lower() or "epp-profile"
        self.default = params.default_profile.strip() or "decode"

    def _selection(self, request: LLMRequest) -> str:
        return request.headers.get(self.header, "").strip()

    def pick_profiles(
        self,
        cycle: CycleState,
        request: LLMRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> Mapping[str, SchedulerProfile]:
        if results:
            return {}
        shadows = {n: p for n, p in profiles.items() if p.shadow}
        routed = [n for n, p in profiles.items() if not p.shadow]
        if len(routed) == 1:
            name = routed[0]
        else:
            name = self._selection(request) or self.default
            if name not in profiles or profiles[name].shadow:
                return shadows
        return {**shadows, name: profiles[name]}

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        if not results:
            selected = self._selection(request)
            if not selected:
                raise NoEndpointError(
                    f'header profile handler: missing "{self.header}" header and defaultProfile '
                    f'"{self.default}" is not a configured scheduling profile'
                )
            raise NoEndpointError(
                f'header profile handler: no scheduling profile configured for "{self.header}" '
                f'header value "{selected}"'
            )
        name, result = next(iter(results.items()))
        if result is None or not result.targets:
            raise NoEndpointError(f'profile "{name}" found no endpoint')
        return SchedulingResult(
            primary_profile=name,
            endpoints=tuple(t.endpoint for t in result.targets),
            profile_results={name: result},
        )


def _build(name: str, params: HeaderProfileParams, handle: Handle) -> HeaderProfileHandler:
    return HeaderProfileHandler(name, params)


factory = factory_with_params(HeaderProfileHandler.plugin_type, HeaderProfileParams, _build)
