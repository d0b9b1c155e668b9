"""Duration parameters as GIE writes them (Kubernetes ``metav1.Duration`` / Go ``time.ParseDuration``).

Accepted: a Go duration string (``"200ms"``, ``"2s"``, ``"1m30s"``, ``"1.5h"``; units ns, us, µs, ms,
s, m, h; an optional sign; ``"0"``) or a plain number of seconds (``0.2``). Returns seconds as a float.
Raises ValueError naming the expected form otherwise, for use as ``param(convert=parse_duration)``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["DURATION_EXPECT", "parse_duration"]

DURATION_EXPECT = 'a duration such as "200ms", "2s" or "1m30s" (or a number of seconds)'

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(raw: Any) -> float:
    """Seconds from a Go duration string or a number of seconds."""
    if isinstance(raw, bool):
        raise ValueError("not a duration")
    if isinstance(raw, int | float):
        return float(raw)
    if not isinstance(raw, str) or not raw:
        raise ValueError("not a duration")
    text = raw.strip()
    sign = 1.0
    if text[:1] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    total = 0.0
    pos = 0
    while pos < len(text):
        match = _PART.match(text, pos)
        if match is None:
            raise ValueError("not a duration")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos == 0:
        raise ValueError("not a duration")
    return sign * total
