"""``prefill-filter``, ``decode-filter`` and ``encode-filter`` (llm-d): select endpoints by role label.

Label ``llm-d.ai/role``; accepted values (llm-d's):

===========================  ===============  ==============  ==============
role value                   prefill-filter   decode-filter   encode-filter
===========================  ===============  ==============  ==============
``prefill``                  keep             drop            drop
``decode``                   drop             keep            drop
``prefill-decode``           keep             keep            drop
``both`` (deprecated alias)  keep             keep            drop
``encode``                   drop             drop            keep
``encode-prefill``           keep             drop            keep
``encode-prefill-decode``    keep             keep            keep
anything else                drop             drop            drop
no label                     drop             keep            drop
===========================  ===============  ==============  ==============

Unlabeled endpoints serve decode, so a pool without P/D labels works unchanged behind a P/D
configuration. Parameters: none. Pure; order kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.cycle_state import CycleState
from scheduler.plugins.base import PluginBase, factory_without_params
from scheduler.plugins.filters.by_label import keep_by_label, label_mismatch
from scheduler.types import EndpointView, LLMRequest

__all__ = [
    "DECODE_ROLES",
    "ENCODE_ROLES",
    "PREFILL_ROLES",
    "ROLE_LABEL",
    "DecodeFilter",
    "EncodeFilter",
    "PrefillFilter",
    "decode_factory",
    "encode_factory",
    "prefill_factory",
]

ROLE_LABEL = "llm-d.ai/role"
PREFILL_ROLES = frozenset({"prefill", "prefill-decode", "both", "encode-prefill", "encode-prefill-decode"})
DECODE_ROLES = frozenset({"decode", "prefill-decode", "both", "encode-prefill-decode"})
ENCODE_ROLES = frozenset({"encode", "encode-prefill", "encode-prefill-decode"})


class _RoleFilter(PluginBase):
    roles: frozenset[str] = frozenset()
    keep_unlabeled = False

    def filter(
        self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[EndpointView]
    ) -> Sequence[EndpointView]:
        return keep_by_label(endpoints, ROLE_LABEL, self.roles, self.keep_unlabeled)

    def reason(self, cycle: CycleState, request: LLMRequest, endpoint: EndpointView) -> str:
        return label_mismatch(endpoint, ROLE_LABEL, self.roles)


class PrefillFilter(_RoleFilter):
    plugin_type = "prefill-filter"
    roles = PREFILL_ROLES


class DecodeFilter(_RoleFilter):
    plugin_type = "decode-filter"
    roles = DECODE_ROLES
    keep_unlabeled = True


class EncodeFilter(_RoleFilter):
    plugin_type = "encode-filter"
    roles = ENCODE_ROLES


prefill_factory = factory_without_params(PrefillFilter.plugin_type, lambda name, handle: PrefillFilter(name))
decode_factory = factory_without_params(DecodeFilter.plugin_type, lambda name, handle: DecodeFilter(name))
encode_factory = factory_without_params(EncodeFilter.plugin_type, lambda name, handle: EncodeFilter(name))
