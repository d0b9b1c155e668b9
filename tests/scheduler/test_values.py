"""Value types: frozen in the test suite (SCHEDULER_FROZEN_VALUES, set by tests/conftest.py), fast outside."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from scheduler import values
from scheduler.types import Completion, LLMRequest, ScoredEndpoint, Usage


def test_the_suite_runs_with_frozen_values() -> None:
    assert values.FROZEN_AT_RUNTIME
    request = LLMRequest(request_id="r", model="m", target_model="m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.model = "other"  # type: ignore[misc]


@pytest.mark.parametrize("frozen", ["0", "1"])
def test_equality_hash_and_replace_are_the_same_either_way(frozen: str) -> None:
    code = (
        "import dataclasses\n"
        "from scheduler.types import Completion, Outcome, Usage\n"
        "a = Completion(Outcome.OK, 200, usage=Usage(1, 2))\n"
        "b = Completion(Outcome.OK, 200, usage=Usage(1, 2))\n"
        "assert a == b and hash(a) == hash(b) and len({a, b}) == 1\n"
        "assert dataclasses.replace(a, status_code=500) != a\n"
        "assert not hasattr(a, '__dict__')\n"
        "try:\n"
        "    a.status_code = 1\n"
        "    print('mutable')\n"
        "except dataclasses.FrozenInstanceError:\n"
        "    print('frozen')\n"
    )
    env = {**os.environ, "SCHEDULER_FROZEN_VALUES": frozen}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("frozen" if frozen == "1" else "mutable")


def test_value_types_are_slotted_dataclasses() -> None:
    for cls in (LLMRequest, ScoredEndpoint, Completion, Usage):
        assert dataclasses.is_dataclass(cls)
        assert "__slots__" in vars(cls)
