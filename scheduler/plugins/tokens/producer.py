"""``token-producer`` (alias ``tokenizer``, its deprecated name): the prompt as token ids, shared.

Produces ``TokenizedPrompt/<name>``; today's consumer is ``approx-prefix-cache-producer``, which then
hashes blocks of token ids instead of blocks of characters (:mod:`scheduler.plugins.prefix.matcher`).
The ids are computed once per cycle (``prepare``, memoised in the cycle state).

Backends (:mod:`scheduler.plugins.tokens.params`):

* ``estimate`` (the default): tokenizer-free byte packing, as upstream — the prompt text's UTF-8
  bytes, zero-padded to a multiple of 4, read as little-endian uint32 words (one pseudo-token per 4
  bytes). Pure.
* ``vllm``: vLLM's ``/v1/completions/render`` and ``/v1/chat/completions/render``. Calling them is I/O,
  which scheduler plugins never do: the EPP calls them before scheduling (its async pre-scheduling
  step, :mod:`epp.server.render`) and hands the ids over with :meth:`TokenProducer.accept_rendered`;
  ``prepare`` takes them. A failed render (timeout, error status, oversized or malformed answer,
  unsupported request kind) leaves the request without ids, as upstream's director logs the error and
  goes on: consumers then see no tokenized prompt (the prefix producer matches nothing for it).

Handed-over ids wait in a map keyed by request id until the request is scheduled; it holds at most
1,024 entries (the oldest is dropped first), so requests cancelled between render and scheduling
cannot grow it.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.cycle_state import CycleState, StateKey
from scheduler.interfaces import Handle, Plugin
from scheduler.plugins.base import PluginBase
from scheduler.plugins.tokens.params import RenderBackend, TokenProducerParams, parse_token_producer_params
from scheduler.types import LLMRequest

__all__ = ["TOKENIZED_PROMPT", "TokenProducer", "factory", "pack_bytes"]

TOKENIZED_PROMPT = "TokenizedPrompt"
_PENDING_LIMIT = 1024


def pack_bytes(raw: bytes) -> tuple[int, ...]:
    """Upstream's ``packBytes``: 4 bytes per pseudo-token, little-endian, the tail zero-padded."""
    if not raw:
        return ()
    pad = -len(raw) % 4
    words = array("I", raw + b"\x00" * pad if pad else raw)
    if sys.byteorder == "big":
        words.byteswap()
    return tuple(words)


class TokenProducer(PluginBase):
    plugin_type = "token-producer"

    def __init__(self, name: str, settings: TokenProducerParams) -> None:
        super().__init__(name)
        self.settings = settings
        self._key: StateKey[tuple[int, ...] | None] = StateKey(f"{TOKENIZED_PROMPT}/{name}")
        self._pending: dict[str, tuple[int, ...] | None] = {}

    @property
    def render(self) -> RenderBackend | None:
        """The vLLM render backend (None: ``estimate``)."""
        return self.settings.render

    def produced_keys(self) -> frozenset[str]:
        return frozenset({f"{TOKENIZED_PROMPT}/{self.name}"})

    def accept_rendered(self, request_id: str, token_ids: Sequence[int] | None) -> None:
        """The render backend's ids for ``request_id`` (None: the render failed)."""
        if self.settings.render is None:
            return
        pending = self._pending
        if request_id not in pending and len(pending) >= _PENDING_LIMIT:
            pending.pop(next(iter(pending)))
        pending[request_id] = tuple(token_ids) if token_ids else None

    def tokens(self, cycle: CycleState, request: LLMRequest) -> tuple[int, ...] | None:
        """The request's token ids for this cycle (None: none could be produced)."""
        key = self._key
        if key in cycle:
            return cycle.read(key)
        if self.settings.render is None:
            ids: tuple[int, ...] | None = pack_bytes(request.prompt_text.encode()) or None
        else:
            ids = self._pending.pop(request.request_id, None)
        cycle.write(key, ids)
        return ids

    def prepare(self, cycle: CycleState, request: LLMRequest, endpoints: Sequence[Any]) -> None:
        self.tokens(cycle, request)


def factory(name: str, parameters: Mapping[str, Any], handle: Handle) -> Plugin:
    """Builds a ``token-producer`` (also under the alias ``tokenizer``, upstream's deprecated name)."""
    return TokenProducer(name, parse_token_producer_params(parameters, TokenProducer.plugin_type, name))
