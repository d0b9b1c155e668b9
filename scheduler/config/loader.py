"""Loading an ``EndpointPickerConfig`` from a file, from text, or the default one.

``load_config_file(path)`` / ``load_config_text(text)`` / ``default_config()`` read YAML strictly,
validate the document (:mod:`scheduler.config.document`), instantiate the plugins through the
registry (:func:`scheduler.registry.default_registry` unless one is given) and resolve profiles and
defaults (:mod:`scheduler.config.build`). ``sections`` maps the names of top-level sections owned by
other parts of the EPP (``dataLayer``, ``flowControl``, ``featureGates``, ...) to their validators.
Every error is a ConfigError naming the source (file name or ``<config-text>``), the location in
the document and what was expected. ``seed`` seeds every plugin's random source; ``clock`` is the
monotonic clock plugins and the scheduler use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from scheduler.config.build import build_config
from scheduler.config.defaults import DEFAULT_CONFIG_TEXT
from scheduler.config.document import SectionValidator, parse_document
from scheduler.config.resolved import ResolvedConfig
from scheduler.config.yaml_io import TEXT_SOURCE, read_yaml_file, read_yaml_text
from scheduler.errors import ConfigError
from scheduler.handle import PluginHandle
from scheduler.registry import Registry, default_registry

__all__ = ["DEFAULT_SOURCE", "default_config", "load_config_file", "load_config_text", "resolve_document"]

DEFAULT_SOURCE = "(default configuration)"
_RESERVED = frozenset({"apiVersion", "kind", "plugins", "schedulingProfiles", "saturationDetector"})


def resolve_document(
    raw: Any,
    source: str,
    *,
    registry: Registry | None = None,
    sections: Mapping[str, SectionValidator] | None = None,
    seed: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> ResolvedConfig:
    """Validate and build an already-parsed document (a mapping as YAML would give)."""
    sections = dict(sections or {})
    reserved = _RESERVED.intersection(sections)
    if reserved:
        raise ValueError(f"section validators cannot replace scheduler-owned fields: {sorted(reserved)}")
    try:
        doc = parse_document(raw, sections)
        return build_config(
            doc, registry if registry is not None else default_registry(), PluginHandle(seed, clock), source
        )
    except ConfigError as exc:
        raise exc.at(source=source) from None


def load_config_file(
    path: str | Path,
    *,
    registry: Registry | None = None,
    sections: Mapping[str, SectionValidator] | None = None,
    seed: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> ResolvedConfig:
    raw = read_yaml_file(path)
    return resolve_document(raw, str(path), registry=registry, sections=sections, seed=seed, clock=clock)


def load_config_text(
    text: str,
    *,
    source: str = TEXT_SOURCE,
    registry: Registry | None = None,
    sections: Mapping[str, SectionValidator] | None = None,
    seed: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> ResolvedConfig:
    raw = read_yaml_text(text, source)
    return resolve_document(raw, source, registry=registry, sections=sections, seed=seed, clock=clock)


def default_config(
    *,
    registry: Registry | None = None,
    sections: Mapping[str, SectionValidator] | None = None,
    seed: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> ResolvedConfig:
    """The configuration used when none is given (see :mod:`scheduler.config.defaults`)."""
    return load_config_text(
        DEFAULT_CONFIG_TEXT,
        source=DEFAULT_SOURCE,
        registry=registry,
        sections=sections,
        seed=seed,
        clock=clock,
    )
