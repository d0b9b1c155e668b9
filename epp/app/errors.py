"""The one error :func:`epp.app.build_app` raises."""

from __future__ import annotations

__all__ = ["StartupError"]


class StartupError(Exception):
    """The picker cannot start; the message names the flag or file and what is wrong."""
