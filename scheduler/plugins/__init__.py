"""In-tree plugins, one per module, grouped by kind.

Layout: ``scorers/``, ``filters/``, ``pickers/``, ``handlers/`` (profile handlers and P/D deciders),
``prefix/`` (the approximate prefix-cache index), ``saturation/`` (saturation detectors). Each plugin
module exports its class and a ``factory``; :func:`register_builtin` is the one place that assembles
them into a registry (one line per plugin type).
"""

from __future__ import annotations

from scheduler.registry import Registry

__all__ = ["register_builtin"]


def register_builtin(registry: Registry) -> None:
    """Register every in-tree plugin type. Imports are local so that importing the package is cheap."""
    from scheduler.plugins.handlers import single_profile
    from scheduler.plugins.pickers import max_score, random_picker, weighted_random
    from scheduler.plugins.scorers import kv_cache_utilization, queue

    registry.register("queue-scorer", queue.factory)
    registry.register("kv-cache-utilization-scorer", kv_cache_utilization.factory)
    registry.register("max-score-picker", max_score.factory)
    registry.register("random-picker", random_picker.factory)
    registry.register("weighted-random-picker", weighted_random.factory)
    registry.register("single-profile-handler", single_profile.factory)
