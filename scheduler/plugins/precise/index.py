"""The exact KV-block index: which block keys each model server holds, per storage tier.

Fed by vLLM KV events (:mod:`scheduler.plugins.precise.events`): ``BlockStored`` adds keys to the
server's set for the event's medium (``GPU``, ``CPU``, ...; lower-cased, None meaning ``gpu``),
``BlockRemoved`` removes them from that medium, ``AllBlocksCleared`` (and a restarted or removed
server) drops everything the server held. Keys are 60-bit ints (:func:`~.hashing.external_key`).

Lookup (:meth:`KVBlockIndex.match`): for each server, the longest run of the prompt's keys held from
the first block on, in any tier, and its weighted length ``sum(weight of the best tier holding the
block)`` with the tier weights given (llm-d's defaults: gpu 1.0, cpu 0.8; an unlisted tier weighs 0.5).

Memory budget: one Python set per (server, tier); an entry costs about 60 bytes (a 32-byte int plus
the set's slot). A server holding more than ``max_blocks_per_source`` keys is reset (its set is
dropped and re-learnt from later events; counted in ``overflow_resets``): more keys than the server's
cache can hold means removals were lost. At most ``max_sources`` servers are tracked; events from
further ones are dropped (``dropped_sources``). Single-threaded: mutate and read on one thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_TIER_WEIGHTS", "KVBlockIndex", "Match"]

DEFAULT_TIER_WEIGHTS: Mapping[str, float] = {"gpu": 1.0, "cpu": 0.8}
_UNLISTED_TIER_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class Match:
    """A server's consecutive cached prefix: ``blocks`` and its tier-weighted length."""

    blocks: int
    weighted: float


class KVBlockIndex:
    """Per-server, per-tier sets of cached block keys (see the module docstring)."""

    __slots__ = (
        "_sources",
        "dropped_sources",
        "max_blocks_per_source",
        "max_sources",
        "overflow_resets",
        "tier_weights",
    )

    def __init__(
        self,
        max_blocks_per_source: int = 1 << 20,
        max_sources: int = 4096,
        tier_weights: Mapping[str, float] = DEFAULT_TIER_WEIGHTS,
    ) -> None:
        self._sources: dict[str, dict[str, set[int]]] = {}
        self.max_blocks_per_source = max_blocks_per_source
        self.max_sources = max_sources
        self.tier_weights = dict(tier_weights)
        self.overflow_resets = 0
        self.dropped_sources = 0

    # -- mutation (event ingestion) --------------------------------------------------------------------

    def _tiers(self, source: str) -> dict[str, set[int]] | None:
        tiers = self._sources.get(source)
        if tiers is None:
            if len(self._sources) >= self.max_sources:
                self.dropped_sources += 1
                return None
            tiers = self._sources[source] = {}
        return tiers

    def store(self, source: str, keys: Iterable[int], medium: str = "gpu") -> None:
        tiers = self._tiers(source)
        if tiers is None:
            return
        blocks = tiers.get(medium)
        if blocks is None:
            blocks = tiers[medium] = set()
        blocks.update(keys)
        if len(blocks) > self.max_blocks_per_source and self.size(source) > self.max_blocks_per_source:
            tiers.clear()
            self.overflow_resets += 1

    def remove(self, source: str, keys: Iterable[int], medium: str = "gpu") -> None:
        tiers = self._sources.get(source)
        if tiers is None:
            return
        blocks = tiers.get(medium)
        if blocks is not None:
            blocks.difference_update(keys)

    def clear(self, source: str) -> None:
        """Forget everything ``source`` holds (AllBlocksCleared, restart, removal)."""
        self._sources.pop(source, None)

    def clear_all(self) -> None:
        self._sources.clear()

    # -- reading ---------------------------------------------------------------------------------------

    def sources(self) -> list[str]:
        return list(self._sources)

    def size(self, source: str | None = None) -> int:
        """Entries held (by ``source``, or in total): one per (block, server, tier)."""
        if source is not None:
            return sum(len(s) for s in self._sources.get(source, {}).values())
        return sum(len(s) for tiers in self._sources.values() for s in tiers.values())

    def holds(self, source: str) -> bool:
        return source in self._sources

    def match(self, keys: Sequence[int], source: str) -> Match:
        """``source``'s consecutive prefix of ``keys`` (0 blocks when it holds none or is unknown)."""
        tiers = self._sources.get(source)
        if not tiers or not keys:
            return Match(0, 0.0)
        sets = [(s, self.tier_weights.get(t, _UNLISTED_TIER_WEIGHT)) for t, s in tiers.items() if s]
        if not sets:
            return Match(0, 0.0)
        if len(sets) == 1:  # the common case: GPU only
            only, weight = sets[0]
            n = 0
            for k in keys:
                if k not in only:
                    break
                n += 1
            return Match(n, n * weight)
        sets.sort(key=lambda sw: -sw[1])
        n = 0
        total = 0.0
        for k in keys:
            for s, weight in sets:
                if k in s:
                    total += weight
                    break
            else:
                break
            n += 1
        return Match(n, total)
