"""Prefix-cache statistics for the ``inference_extension_prefix_indexer_*`` metrics.

* hit ratio of one request = the unweighted score the ``prefix-cache-scorer`` gave the chosen (primary)
  endpoint in the primary profile's decision record: matched prefix blocks / request blocks, in [0, 1].
  Requests whose primary profile has no prefix scorer are not observed.
* index size = the number of distinct block hashes held by the prefix indexes of every
  ``prefix-cache-scorer`` instance, read at scrape time.

Both read the scheduler's own records and plugin state, so the scheduler needs no metrics code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scheduler.interfaces import Plugin
from scheduler.types import SchedulingResult

__all__ = ["PREFIX_SCORER_TYPE", "hit_ratio_observer", "index_size_reader"]

PREFIX_SCORER_TYPE = "prefix-cache-scorer"


def hit_ratio_observer(
    plugins: Sequence[Plugin], observe: Callable[[float], None]
) -> Callable[[SchedulingResult], None] | None:
    """``f(result)`` observing the primary endpoint's prefix score; None without a prefix scorer."""
    names = frozenset(p.name for p in plugins if p.plugin_type == PREFIX_SCORER_TYPE)
    if not names:
        return None

    def on_result(result: SchedulingResult) -> None:
        decision = result.decision
        if decision is None or not result.endpoints:
            return
        primary = result.endpoints[0].address
        for profile in decision.profiles:
            if profile.profile != result.primary_profile:
                continue
            for name, scores in profile.scores.items():
                if name in names and primary in profile.candidates:
                    observe(scores[profile.candidates.index(primary)])
                    return

    return on_result


def index_size_reader(plugins: Sequence[Plugin]) -> Callable[[], int | None]:
    """``f() -> entries`` over every prefix scorer's index (None when there is none)."""
    indexes = [getattr(p, "index", None) for p in plugins if p.plugin_type == PREFIX_SCORER_TYPE]
    sized = [i for i in indexes if i is not None and hasattr(i, "__len__")]
    if not sized:
        return lambda: None
    return lambda: sum(len(i) for i in sized)
