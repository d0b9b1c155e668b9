"""``data-parallel-profile-handler`` (llm-d, deprecated there for Istio >= 1.28.1).

Runs the single routed profile (plus any shadow profiles, observation only) like
``single-profile-handler``, then rewrites every target to ``primaryPort`` (the port of the rank-0
server of a data-parallel group, which forwards to the chosen rank) and sets header
``x-data-parallel-host-port: <ip:port>`` to the originally chosen endpoint. A failed run raises
NoEndpointError. Configurations with more than one routed profile are rejected at startup.

Parameters: ``primaryPort`` (1-65535, default 8000).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.params import param
from scheduler.plugins.base import factory_with_params
from scheduler.plugins.handlers.disagg import DATA_PARALLEL_HEADER, with_port
from scheduler.plugins.handlers.single_profile import SingleProfileHandler
from scheduler.types import LLMRequest, ProfileResult, SchedulingResult

__all__ = ["DataParallelParams", "DataParallelProfileHandler", "factory"]

_log = logging.getLogger("scheduler.plugins")


@dataclass(frozen=True, slots=True)
class DataParallelParams:
    primary_port: int = param(8000, ge=1, le=65535)


class DataParallelProfileHandler(SingleProfileHandler):
    plugin_type = "data-parallel-profile-handler"
    routes_one_profile = True

    def __init__(self, name: str, params: DataParallelParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or DataParallelParams()
        self.primary_port = params.primary_port

    def process_results(
        self, cycle: CycleState, request: LLMRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        single = super().process_results(cycle, request, results)
        port = self.primary_port
        return SchedulingResult(
            primary_profile=single.primary_profile,
            endpoints=tuple(with_port(e, port) for e in single.endpoints),
            profile_results=single.profile_results,
            headers={DATA_PARALLEL_HEADER: single.primary.address},
        )


def _build(name: str, params: DataParallelParams, handle: Handle) -> DataParallelProfileHandler:
    _log.info(
        '%s "%s" is deprecated (as in llm-d): with Istio >= 1.28.1 use single-profile-handler',
        DataParallelProfileHandler.plugin_type,
        name,
    )
    return DataParallelProfileHandler(name, params)


factory = factory_with_params(DataParallelProfileHandler.plugin_type, DataParallelParams, _build)
