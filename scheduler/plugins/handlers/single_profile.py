"""``single-profile-handler``: run the configured profile once and route by its result.

``pick_profiles`` returns every profile on the first call (the one routed profile, plus any shadow
profiles, which the scheduler runs for observation only) and nothing afterwards. ``process_results``
receives the routed results only and turns the single one into the SchedulingResult: its targets are
the endpoints (primary first). A failed run raises NoEndpointError naming the profile.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.cycle_state import CycleState
from scheduler.errors import NoEndpointError
from scheduler.interfaces import Handle
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.profile import SchedulerProfile
from scheduler.types import LLMRequest, ProfileResult, SchedulingResult

__all__ = ["SingleProfileHandler", "factory"]


class SingleProfileHandler(PluginBase):
    plugin_type = "single-profile-handler"

    def pick_profiles(
        self,
        cycle: CycleState,
        request: LLMRequest,
        profiles: Mapping[str, SchedulerProfile],
        results: Mapping[str, ProfileResult | None],
    ) -> Mapping[str, SchedulerProfile]:
        return {} if results else profiles

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        if not results:
            raise NoEndpointError("no scheduling profile was run")
        name, result = next(iter(results.items()))
        if result is None or not result.targets:
            raise NoEndpointError(f'profile "{name}" found no endpoint')
        return SchedulingResult(
            primary_profile=name,
            endpoints=tuple([t.endpoint for t in result.targets]),
            profile_results={name: result},
        )


def _build(name: str, handle: Handle) -> SingleProfileHandler:
    return SingleProfileHandler(name)


factory = factory_without_params(SingleProfileHandler.plugin_type, _build)
