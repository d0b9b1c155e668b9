"""Shared fixtures of the data-layer tests.

``tests/`` is appended to ``sys.path`` so that the reusable fake Kubernetes API server imports as
``fakekube``; the repository root is appended too, so the real packages (regular packages) always
win over same-named test folders (namespace portions).
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
for _path in (str(_ROOT), str(_ROOT / "tests")):
    if _path not in sys.path:
        sys.path.append(_path)
