"""``@value_type``: the immutable value classes of the scheduler (and of the picker's per-request path).

A value type is a slotted dataclass that is **frozen for the type checker** (``dataclass_transform``
with ``frozen_default``: mypy rejects any assignment to a field, as for ``@dataclass(frozen=True)``)
with the equality and field hash of a frozen dataclass.

At run time it is not frozen by default, on measurement: a frozen dataclass assigns every field
through ``object.__setattr__`` in ``__init__``, which makes construction about four times slower
(about 600 ns instead of 150 ns for five fields). The picker builds some thirty value objects per
request (the request, one scored endpoint per candidate, decision records, results, actions), and
that difference was about 20 µs (11%) of its CPU per 1 KB request behind Envoy
(``tests/epp/server/inproc_bench.py``).

Set ``SCHEDULER_FROZEN_VALUES=1`` in the environment (before the first import) to get real frozen
dataclasses, so that any assignment raises ``dataclasses.FrozenInstanceError`` at run time too; the
test suite runs that way (``tests/conftest.py``), so plugins and framework code that would mutate a
shared value fail there as well as under mypy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

__all__ = ["FROZEN_AT_RUNTIME", "value_type"]

_T = TypeVar("_T")

FROZEN_AT_RUNTIME = os.environ.get("SCHEDULER_FROZEN_VALUES", "") not in ("", "0")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value_type(cls: type[_T]) -> type[_T]:
    """Make ``cls`` a slotted value dataclass (frozen for mypy; at run time, see the module doc)."""
    if FROZEN_AT_RUNTIME:
        return dataclass(frozen=True, slots=True)(cls)
    return dataclass(slots=True, unsafe_hash=True)(cls)
