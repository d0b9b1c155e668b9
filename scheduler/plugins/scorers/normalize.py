"""Score normalisation shared by the metric scorers (``queue-scorer``, ``running-requests-size-scorer``).

:func:`lower_is_better` min-max normalises over the candidates of one cycle, so that the lowest value
scores 1.0 and the highest 0.0::

    score(v) = (hi - v) / (hi - lo)        # all values equal -> 1.0 for every endpoint

Pure; one sort for the bounds (16 values sort faster than min() and max() scan them) and one pass
for the scores.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["lower_is_better"]


def lower_is_better(values: Sequence[float]) -> list[float]:
    """Scores in [0, 1] aligned with ``values`` (an empty input gives an empty list)."""
    if not values:
        return []
    ordered = sorted(values)  # both bounds at once: sorted() compares ints / floats natively
    lo, hi = ordered[0], ordered[-1]
    if hi == lo:
        return [1.0] * len(values)
    span = float(hi - lo)
    return [(hi - v) / span for v in values]
