"""Prefix-cache statistics for the ``*_prefix_indexer_*`` metrics.

* per routed request and ``prefix-cache-scorer`` of the primary profile, read from that profile's
  decision record: matched blocks = the unweighted score the scorer gave the chosen (primary) endpoint
  x the request's blocks (``min(len(prompt) // block chars, maxPrefixBlocksToMatch)`` of the index the
  scorer reads). Hit bytes = matched blocks x block chars (upstream counts 4 bytes per token, as the
  scorer cuts blocks of ``blockSizeTokens x 4`` characters); hit ratio = the score, observed only when
  the prompt has a block (upstream skips the ratio when the total is 0, and observes the bytes always).
* index size = the number of distinct block hashes held by each index, read at scrape time.

Labels name the plugin that owns the index, as upstream: a self-contained scorer (GIE's, or one with
index parameters) is ``prefix-cache-scorer``; a scorer reading llm-d-router's
``approx-prefix-cache-producer`` reports under that producer's name and type (several scorers of one
producer: one observation per request). Both read the scheduler's own records and the plugins'
:class:`~scheduler.interfaces.PrefixIndexStats` (never type names or attribute lookups), so the
scheduler needs no metrics code. A scorer reading a producer without stats (the precise one) is not
observed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scheduler.interfaces import Plugin, PrefixIndexStats, Scorer
from scheduler.types import LLMRequest, SchedulingResult

__all__ = ["index_sizes_reader", "prefix_hit_recorder"]

Observe = Callable[[str, str, float, float | None], None]  # (name, type, hit bytes, hit ratio or None)


def prefix_hit_recorder(
    plugins: Sequence[Plugin], observe: Observe
) -> Callable[[LLMRequest, SchedulingResult], None] | None:
    """``f(request, result)`` recording the primary endpoint's prefix hit; None without a prefix scorer
    (a :class:`~scheduler.interfaces.Scorer` that is a :class:`~scheduler.interfaces.PrefixIndexStats`)."""
    scorers: dict[str, PrefixIndexStats] = {
        p.name: p for p in plugins if isinstance(p, PrefixIndexStats) and isinstance(p, Scorer)
    }
    if not scorers:
        return None

    def on_result(request: LLMRequest, result: SchedulingResult) -> None:
        decision = result.decision
        if decision is None or not result.endpoints:
            return
        primary = result.endpoints[0].address
        for profile in decision.profiles:
            if profile.profile != result.primary_profile or primary not in profile.candidates:
                continue
            at = profile.candidates.index(primary)
            owners: set[str] = set()
            for name, scores in profile.scores.items():
                scorer = scorers.get(name)
                if scorer is None:
                    continue
                index = scorer.stats_index()
                if index is None or index.name in owners:
                    continue
                owners.add(index.name)
                chars = index.block_chars
                total = min(len(request.prompt_text) // chars, index.max_blocks())
                score = scores[at]
                observe(index.name, index.plugin_type, round(score * total) * chars, score if total else None)
            return

    return on_result


def index_sizes_reader(plugins: Sequence[Plugin]) -> Callable[[], list[tuple[str, str, int]]]:
    """``f() -> [(plugin name, plugin type, entries)]`` for every prefix index in use: that of each
    :class:`~scheduler.interfaces.PrefixIndexStats` plugin holding its own (a self-contained
    ``prefix-cache-scorer``, an ``approx-prefix-cache-producer``)."""
    held = [p for p in plugins if isinstance(p, PrefixIndexStats) and p.stats_index() is p]
    return lambda: [(p.name, p.plugin_type, p.index_entries()) for p in held]
