"""Parameters shared by every picker.

``maxNumOfEndpoints`` (int >= 1, default 1): how many distinct endpoints a picker returns at most
(the primary first, then fallbacks in order).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.params import param

__all__ = ["PickerParams"]


@dataclass(frozen=True, slots=True)
class PickerParams:
    max_num_of_endpoints: int = param(1, ge=1)
