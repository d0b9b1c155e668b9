"""The per-request prefix match, shared through CycleState by every plugin that needs it.

The ``prefix-cache-scorer`` computes the match once per scheduling cycle, in its ``prepare`` step
(before any profile runs, on the full endpoint snapshot), and stores it under :data:`PREFIX_MATCH`.
Other plugins (``prefix-cache-affinity-filter``, ``prefix-based-pd-decider``, ...) read it with
:func:`prefix_match` instead of re-hashing the prompt; it is None when no prefix-cache-scorer is
configured. When several prefix-cache-scorers are configured, :data:`PREFIX_MATCH` holds the match of
the first one in configuration order (each scorer also keeps its own under a private key).

Score of an endpoint: ``matched_blocks(address) / total_blocks`` (0.0 when the prompt has no full block).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from scheduler.cycle_state import CycleState, StateKey
from scheduler.values import value_type

if TYPE_CHECKING:
    from scheduler.types import LLMRequest

__all__ = ["PREFIX_MATCH", "PrefixMatch", "PrefixMatchSource", "prefix_match"]


@value_type
class PrefixMatch:
    """How much of one request's prompt prefix each endpoint is believed to hold.

    ``hashes`` are the chained block hashes of the prompt (at most maxPrefixBlocksToMatch);
    ``matched`` maps address -> consecutive blocks held from the start (absent = 0);
    ``block_size_tokens`` is the block size the hashes were cut with (for token arithmetic);
    ``prompt_tokens`` the prompt's length in the same tokens when the hashes were cut from its token
    ids (0: not known, e.g. the approximate index hashing characters, whose blocks are counted in the
    request's own estimate of 4 characters per token).
    """

    hashes: tuple[int, ...]
    matched: Mapping[str, int]
    block_size_tokens: int
    scorer: str
    prompt_tokens: int = 0

    @property
    def total_blocks(self) -> int:
        return len(self.hashes)

    def blocks(self, address: str) -> int:
        """Consecutive prompt blocks from the start that ``address`` holds."""
        return self.matched.get(address, 0)

    def score(self, address: str) -> float:
        """matched / total, in [0, 1]; 0.0 for a prompt shorter than one block."""
        total = len(self.hashes)
        return self.matched.get(address, 0) / total if total else 0.0

    def cached_tokens(self, address: str) -> int:
        """Estimated prompt tokens already in ``address``'s KV cache."""
        return self.matched.get(address, 0) * self.block_size_tokens


PREFIX_MATCH: StateKey[PrefixMatch] = StateKey("prefix-cache/match")
"""The public CycleState key of the cycle's prefix match (written by the first prefix-cache-scorer)."""


def prefix_match(cycle: CycleState) -> PrefixMatch | None:
    """The cycle's prefix match, or None when no prefix-cache-scorer is configured."""
    return cycle.read(PREFIX_MATCH)


@runtime_checkable
class PrefixMatchSource(Protocol):
    """A producer of ``PrefixCacheMatchInfo``: the approximate index (``approx-prefix-cache-producer``)
    or the exact one fed by KV events (``precise-prefix-cache-producer``). ``match`` is memoised per
    cycle and pure apart from that."""

    def match(self, cycle: CycleState, request: LLMRequest) -> PrefixMatch: ...
