"""Test-wide setup: ``tests/`` on ``sys.path`` so shared test helpers import by name.

The repository root is appended before ``tests/`` so the real packages (regular packages) always win
over same-named test folders (namespace portions); helpers such as the fake Kubernetes API server
then import as ``fakekube``.

``SCHEDULER_FROZEN_VALUES=1``: the value types (:mod:`scheduler.values`) are real frozen dataclasses in
every test (and in the processes tests start), so code that assigns to a shared value fails here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("SCHEDULER_FROZEN_VALUES", "1")

_ROOT = Path(__file__).resolve().parents[1]
for _path in (str(_ROOT), str(_ROOT / "tests")):
    if _path not in sys.path:
        sys.path.append(_path)
