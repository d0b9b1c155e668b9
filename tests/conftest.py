"""Test-wide setup: ``tests/`` on ``sys.path`` so shared test helpers import by name.

The repository root is appended before ``tests/`` so the real packages (regular packages) always win
over same-named test folders (namespace portions); helpers such as the fake Kubernetes API server
then import as ``fakekube``.

``SCHEDULER_FROZEN_VALUES=1``: the value types (:mod:`scheduler.values`) are real frozen dataclasses in
every test (and in the processes tests start), so code that assigns to a shared value fails here.
``EPP_FROZEN_RESPONSES=1``: the shared ext_proc responses of :mod:`epp.protocol.messages` are checked
on every reuse and after every test (:func:`shared_responses_unchanged`), so code that modifies one
fails here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("SCHEDULER_FROZEN_VALUES", "1")
os.environ.setdefault("EPP_FROZEN_RESPONSES", "1")

_ROOT = Path(__file__).resolve().parents[1]
for _path in (str(_ROOT), str(_ROOT / "tests")):
    if _path not in sys.path:
        sys.path.append(_path)


@pytest.fixture(autouse=True)
def shared_responses_unchanged() -> Iterator[None]:
    """After each test: no shared response of :mod:`epp.protocol.messages` was modified (when loaded)."""
    yield
    messages = sys.modules.get("epp.protocol.messages")
    if messages is not None:
        messages.verify_shared_responses()
