"""Deciders: whether a request should run a disaggregated stage (``disagg-profile-handler``).

A decider is a plugin implementing :class:`~scheduler.interfaces.PDDecider` (re-exported here),
referenced by name from the handler's ``deciders.prefill`` / ``deciders.encode`` (or the flat
``prefillDeciderPluginName`` / ``encodeDeciderPluginName``). It is called once per request and stage,
after the decode profile chose its endpoint (None in ``prefill-first`` order), and must be pure.

* ``always-disagg-pd-decider``: always true. Parameters: none.
* ``always-disagg-multimodal-decider`` (llm-d's encode decider): true when the request carries
  multimodal content: a chat message whose content list holds a block of type ``image_url``,
  ``video_url`` or ``input_audio`` (vLLM's online-serving multimodal inputs; the rule of
  llm-d-inference-scheduler, whose successor llm-d-router reads the same fact from the tokenized
  prompt's multimodal features). Text-only, completions and header-only requests: false.
  Parameters: none.
* ``prefix-based-pd-decider`` (llm-d): disaggregate when the prompt tokens the decode endpoint does
  not hold yet are at least ``nonCachedTokens``::

      prompt   = request.token_estimate (or len(prompt_text) / 4 when 0)
      if promptTokens > 0 and prompt < promptTokens: no      # short prompts stay local
      if nonCachedTokens == 0: no                             # the decider is disabled
      cached   = min(cached_tokens(decode), floor((prompt - 1) / bs) * bs)
      decide   = prompt - cached >= nonCachedTokens

  ``cached_tokens`` = matched blocks x block size ``bs`` in tokens, from the match the profile handler
  selected (:data:`DECIDER_PREFIX_MATCH`: pd-profile-handler's ``prefixMatchInfoProducerName``), else
  the cycle's published prefix match, capped (as in llm-d) so that the last token is always
  computed; without a prefix match nothing counts as cached (llm-d refuses to disaggregate then; we
  decide by prompt length, which is what an empty cache means). Parameters: ``nonCachedTokens``
  (int >= 0, default 0 = the decider is disabled: never disaggregate, as llm-d-router and
  llm-d-inference-scheduler since 2026-03; logged at start), ``promptTokens`` (int >= 0, default 0 =
  no prompt-length gate).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.cycle_state import CycleState, StateKey
from scheduler.interfaces import PDDecider
from scheduler.params import param
from scheduler.plugins.base import PluginBase, factory_with_params, factory_without_params
from scheduler.plugins.filters.kv_headroom import prompt_tokens
from scheduler.plugins.prefix.match import PrefixMatch, prefix_match
from scheduler.types import EndpointView, LLMRequest

_log = logging.getLogger("scheduler.plugins")

__all__ = [
    "DECIDER_PREFIX_MATCH",
    "MULTIMODAL_BLOCK_TYPES",
    "AlwaysDisaggDecider",
    "AlwaysDisaggMultimodalDecider",
    "PDDecider",
    "PrefixBasedDecider",
    "PrefixBasedDeciderParams",
    "always_factory",
    "has_multimodal_content",
    "multimodal_factory",
    "prefix_based_factory",
]

DECIDER_PREFIX_MATCH = StateKey[PrefixMatch]("prefix-based-pd-decider/match")
"""The prefix match a profile handler bound to a producer wrote for the decider (absent: the cycle's
published match, :func:`~scheduler.plugins.prefix.match.prefix_match`)."""


class AlwaysDisaggDecider(PluginBase):
    plugin_type = "always-disagg-pd-decider"

    def should_disaggregate(
        self, cycle: CycleState, request: LLMRequest, decode: EndpointView | None
    ) -> bool:
        return True


always_factory = factory_without_params(
    AlwaysDisaggDecider.plugin_type, lambda name, handle: AlwaysDisaggDecider(name)
)

MULTIMODAL_BLOCK_TYPES = frozenset({"image_url", "video_url", "input_audio"})
"""Chat content block types that make a request multimodal (vLLM's online-serving inputs)."""


def has_multimodal_content(request: LLMRequest) -> bool:
    """True when a chat message's content list holds an image, video or audio block."""
    for message in request.messages or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, Mapping) and block.get("type") in MULTIMODAL_BLOCK_TYPES:
                    return True
    return False


class AlwaysDisaggMultimodalDecider(PluginBase):
    plugin_type = "always-disagg-multimodal-decider"

    def should_disaggregate(
        self, cycle: CycleState, request: LLMRequest, decode: EndpointView | None
    ) -> bool:
        return has_multimodal_content(request)


multimodal_factory = factory_without_params(
    AlwaysDisaggMultimodalDecider.plugin_type, lambda name, handle: AlwaysDisaggMultimodalDecider(name)
)


@dataclass(frozen=True, slots=True)
class PrefixBasedDeciderParams:
    non_cached_tokens: int = param(0, ge=0)
    prompt_tokens: int = param(0, ge=0)


class PrefixBasedDecider(PluginBase):
    plugin_type = "prefix-based-pd-decider"

    def __init__(self, name: str, params: PrefixBasedDeciderParams | None = None) -> None:
        super().__init__(name)
        self.params = params = params or PrefixBasedDeciderParams()
        self._threshold = params.non_cached_tokens
        self._min_prompt = params.prompt_tokens
        if self._threshold == 0:
            _log.info("%s: prefix-based P/D decider disabled (nonCachedTokens=0): never disaggregates", name)

    def uncached_tokens(self, cycle: CycleState, request: LLMRequest, decode: EndpointView) -> int:
        prompt = prompt_tokens(request)
        match = cycle.read(DECIDER_PREFIX_MATCH) or prefix_match(cycle)
        if match is None or prompt <= 0:
            return max(0, prompt)
        bs = match.block_size_tokens
        cached = min(match.cached_tokens(decode.address), (prompt - 1) // bs * bs)
        return prompt - cached

    def should_disaggregate(
        self, cycle: CycleState, request: LLMRequest, decode: EndpointView | None
    ) -> bool:
        if decode is None:
            return False  # only asked before decode in prefill-first order, where it cannot be configured
        if self._min_prompt and prompt_tokens(request) < self._min_prompt:
            return False
        if self._threshold == 0:
            return False
        return self.uncached_tokens(cycle, request, decode) >= self._threshold


prefix_based_factory = factory_with_params(
    PrefixBasedDecider.plugin_type,
    PrefixBasedDeciderParams,
    lambda name, params, handle: PrefixBasedDecider(name, params),
)
