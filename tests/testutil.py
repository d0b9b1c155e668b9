"""Small helpers shared by every test folder (``tests/`` is on ``sys.path``, see tests/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["eventually"]


async def eventually(
    cond: Callable[[], object], timeout: float = 5.0, what: str = "condition", interval: float = 0.01
) -> None:
    """Poll ``cond()`` every ``interval`` seconds until it is truthy; fail the test after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        await asyncio.sleep(interval)
