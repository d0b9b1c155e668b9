"""``disagg-headers-handler`` and its alias ``prefill-header-handler`` (llm-d, deprecated there).

The request-side half of P/D and E/P/D routing, as a separate plugin (llm-d's PreRequest plugin of
the same name, kept for configurations written before ``disagg-profile-handler`` set these headers
itself; it is what ``pd-profile-handler`` configurations pair with). After the profile handler built
the result, it sets:

* ``x-prefiller-host-port: <ip:port>`` of the first target of the ``prefillProfile`` result, when
  that profile ran and found an endpoint;
* ``x-encoder-hosts-ports: <ip:port>,...`` of every target of the ``encodeProfile`` result, when
  that profile ran and found endpoints.

Parameters: ``prefillProfile`` (default ``prefill``), ``encodeProfile`` (default ``encode``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Handle
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params
from scheduler.plugins.handlers.disagg import ENCODER_HEADER, PREFILLER_HEADER, disagg_headers
from scheduler.types import LLMRequest, SchedulingResult

__all__ = ["DisaggHeadersHandler", "HeadersParams", "PrefillHeaderHandler", "factory", "prefill_factory"]

_log = logging.getLogger("scheduler.plugins")


@dataclass(frozen=True, slots=True)
class HeadersParams:
    prefill_profile: str = param("prefill")
    encode_profile: str = param("encode")


class DisaggHeadersHandler(PluginBase):
    plugin_type: ClassVar[str] = "disagg-headers-handler"
    owned_request_headers: ClassVar[frozenset[str]] = frozenset({PREFILLER_HEADER, ENCODER_HEADER})

    def __init__(self, name: str, params: HeadersParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or HeadersParams()
        self._prefill = params.prefill_profile
        self._encode = params.encode_profile

    def request_headers(
        self, cycle: CycleState, request: LLMRequest, result: SchedulingResult
    ) -> Mapping[str, str]:
        return disagg_headers(result.profile_results, self._prefill, self._encode)


class PrefillHeaderHandler(DisaggHeadersHandler):
    """The same plugin under its older type name."""

    plugin_type: ClassVar[str] = "prefill-header-handler"


_DEPRECATED = '%s "%s" is deprecated (as in llm-d): disagg-profile-handler sets these headers itself'


def _build(name: str, params: HeadersParams, handle: Handle) -> DisaggHeadersHandler:
    _log.info(_DEPRECATED, DisaggHeadersHandler.plugin_type, name)
    return DisaggHeadersHandler(name, params)


def _build_prefill(name: str, params: HeadersParams, handle: Handle) -> PrefillHeaderHandler:
    _log.info(_DEPRECATED, PrefillHeaderHandler.plugin_type, name)
    return PrefillHeaderHandler(name, params)


factory = factory_with_params(DisaggHeadersHandler.plugin_type, HeadersParams, _build)
prefill_factory = factory_with_params(PrefillHeaderHandler.plugin_type, HeadersParams, _build_prefill)
