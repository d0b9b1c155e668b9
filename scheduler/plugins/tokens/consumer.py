"""Reading ``token-producer``'s token count: the prompt length of ``context-length-aware`` and
``inflight-load-producer`` (upstream's ``TokenizedRequest.TokenCount()``).

:class:`TokenCountReader` is a mixin. Its need (``TokenizedPrompt/token-producer``) is optional: with
no ``token-producer`` configured nothing is injected and the plugin keeps pyepp's estimate (the
request's ``token_estimate``, else 4 characters per token — what upstream's injected ``estimate``
producer counts for an ASCII prompt). With one, the prompt length is the number of its token ids,
0 when it produced none (a failed render), as upstream.
"""

from __future__ import annotations

from scheduler.cycle_state import CycleState
from scheduler.interfaces import Plugin
from scheduler.plugins.filters.kv_headroom import prompt_tokens
from scheduler.plugins.tokens.producer import TOKENIZED_PROMPT, TokenProducer
from scheduler.producers import DataNeed
from scheduler.types import LLMRequest

__all__ = ["TOKENS_KEY", "TokenCountReader"]

TOKENS_KEY = f"{TOKENIZED_PROMPT}/{TokenProducer.plugin_type}"


class TokenCountReader:
    """Mixin: ``token_need`` / ``bind_tokens`` / ``prompt_length``."""

    _token_source: TokenProducer | None = None

    def token_need(self) -> DataNeed:
        return DataNeed(TOKENS_KEY, "", False, TokenProducer.plugin_type, optional=True)

    def bind_tokens(self, key: str, producer: Plugin | None) -> bool:
        """Takes the binding of :data:`TOKENS_KEY` (True); other keys are the caller's (False)."""
        if key != TOKENS_KEY:
            return False
        if isinstance(producer, TokenProducer):
            self._token_source = producer
        return True

    def prompt_length(self, cycle: CycleState, request: LLMRequest) -> int:
        """The prompt's length in tokens for this cycle."""
        source = self._token_source
        if source is None:
            return prompt_tokens(request)
        ids = source.tokens(cycle, request)
        return len(ids) if ids else 0
