"""Durations: the one grammar of the picker, Go's ``time.ParseDuration``.

Flags (:func:`epp.config.flags.parse_duration`), configuration files (plugin parameters:
:func:`parse_duration`) and the data layer's parameters (:func:`datalayer.params.go_duration`) all parse
through this module, so a value means the same everywhere and the same as in the Go picker. Documented
in docs/scheduler.md ("Durations").

Grammar: ``[-+]?([0-9]*(\\.[0-9]*)?unit)+`` or the bare ``0`` (also ``-0``, ``+0``), where every
component has a digit before or after its point and a unit: ``ns``, ``us``, ``µs`` (U+00B5), ``μs``
(U+03BC), ``ms``, ``s``, ``m``, ``h``. Examples: ``300ms``, ``-1.5h``, ``2h45m``, ``1m30s``, ``.5s``,
``5.s``. No spaces, no exponent, no other units (``1d`` is an error). The value is computed as Go does,
in integer nanoseconds: fractions are truncated to the nanosecond and the sum must fit in a signed
64-bit count (about 292 years), else it is an error.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DURATION_EXPECT", "DurationError", "go_duration", "go_duration_ns", "parse_duration"]

DURATION_EXPECT = 'a duration such as "200ms", "2s" or "1m30s" (or a number of seconds)'

_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_LIMIT = 1 << 63  # magnitudes above this overflow (only -2**63 itself is representable)
_DIGITS = frozenset("0123456789")


def _quote(value: object) -> str:
    """A value in double quotes with escapes, as Go's ``strconv.Quote`` writes it in its messages."""
    return json.dumps(value if isinstance(value, str) else repr(value), ensure_ascii=False)


class DurationError(ValueError):
    """Not a Go duration; the message is Go's (``time: invalid duration "1x"``)."""


def _leading_int(s: str, pos: int) -> tuple[int, int]:
    """The integer of the digits at ``pos`` and the position after them; overflow is an error."""
    value = 0
    while pos < len(s) and s[pos] in _DIGITS:
        value = value * 10 + ord(s[pos]) - 48
        if value > _LIMIT:
            raise OverflowError
        pos += 1
    return value, pos


def _leading_fraction(s: str, pos: int) -> tuple[int, float, int]:
    """Digits after a point as (value, scale, position after them); digits that would overflow are
    skipped (they add no precision), as Go's ``leadingFraction``."""
    value, scale, overflow = 0, 1.0, False
    while pos < len(s) and s[pos] in _DIGITS:
        if not overflow:
            nxt = value * 10 + ord(s[pos]) - 48
            if value > (_LIMIT - 1) // 10 or nxt > _LIMIT:
                overflow = True
            else:
                value, scale = nxt, scale * 10
        pos += 1
    return value, scale, pos


def go_duration_ns(text: str) -> int:
    """Nanoseconds from a Go duration string; :class:`DurationError` (Go's message) otherwise."""
    invalid = DurationError(f"time: invalid duration {_quote(text)}")
    if not isinstance(text, str):
        raise invalid
    s, neg = text, False
    if s[:1] in ("-", "+"):
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total, pos = 0, 0
    while pos < len(s):
        if not (s[pos] == "." or s[pos] in _DIGITS):
            raise invalid
        start = pos
        try:
            whole, pos = _leading_int(s, pos)
        except OverflowError:
            raise invalid from None
        digits_before = pos != start
        frac, scale, digits_after = 0, 1.0, False
        if pos < len(s) and s[pos] == ".":
            frac, scale, after = _leading_fraction(s, pos + 1)
            digits_after, pos = after != pos + 1, after
        if not digits_before and not digits_after:
            raise invalid
        start = pos
        while pos < len(s) and s[pos] != "." and s[pos] not in _DIGITS:
            pos += 1
        if pos == start:
            raise DurationError(f"time: missing unit in duration {_quote(text)}")
        unit = _UNIT_NS.get(s[start:pos])
        if unit is None:
            raise DurationError(f"time: unknown unit {_quote(s[start:pos])} in duration {_quote(text)}")
        if whole > _LIMIT // unit:
            raise invalid
        value = whole * unit
        if frac:
            value += int(float(frac) * (float(unit) / scale))  # float64 as Go: exact to the ns for hours
            if value > _LIMIT:
                raise invalid
        total += value
        if total > _LIMIT:
            raise invalid
    if neg:
        return -total
    if total > _LIMIT - 1:
        raise invalid
    return total


def go_duration(text: str) -> float:
    """Seconds from a Go duration string (``"1m30s"`` -> 90.0); :class:`DurationError` otherwise."""
    return go_duration_ns(text) / 1e9


def parse_duration(raw: Any) -> float:
    """A duration in a configuration file: a Go duration string or a number of seconds (YAML ``0.2``).

    Returns seconds; raises :class:`DurationError` (a ValueError) for anything else, booleans included,
    for use as ``param(convert=parse_duration)``."""
    if isinstance(raw, bool):
        raise DurationError(f"time: invalid duration {_quote(raw)}")
    if isinstance(raw, int | float):
        return float(raw)
    return go_duration(raw)
